"""Guard zones catch out-of-bounds accesses of real kernels.

Each test takes a generated kernel, breaks its OpenCL text on purpose (a store guard removed,
an index shifted) and runs it the way verify() does: a stray write must be reported by the
output's guard zones, a stray read must make verify() fail through the NaN around the inputs.
Every shift stays within the 1024-element guard zones, so no test touches foreign memory.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from conftest import EXAMPLES, generated, strategy_names

import treduda
from treduda.errors import VerificationError
from treduda.run.opencl import GUARD_ELEMENTS, guard_elements, run_opencl

GEMM, GEMM_SIZES = EXAMPLES["gemm"]  # C[i,j] = A[i,k] * B[k,j] with i=37, j=45, k=13


def gemm(strategy: str = "thread_per_element") -> treduda.Kernel:
    return treduda.compile(GEMM, GEMM_SIZES, strategy=strategy)


def broken(kernel: treduda.Kernel, pattern: str, replacement: str) -> treduda.Kernel:
    """The kernel with every match of ``pattern`` in its OpenCL text replaced."""
    source, edits = re.subn(pattern, replacement, kernel.opencl_source)
    assert edits, f"{pattern!r} is not in the kernel text"
    copy = dataclasses.replace(kernel)
    vars(copy)["opencl_source"] = source  # where functools.cached_property keeps the text
    return copy


def stores_past_the_end(kernel: treduda.Kernel) -> int:
    """Output elements past C's end that thread_per_element's gemm writes when every thread
    of the grid stores ``C[i*45 + j]`` (thread x is j, thread y is i)."""
    (gx, gy, _), (bx, by, _) = kernel.grid, kernel.block
    i, j = np.meshgrid(np.arange(gy * by), np.arange(gx * bx))
    size, stride = GEMM_SIZES["i"] * GEMM_SIZES["j"], GEMM_SIZES["j"]
    return int(np.count_nonzero(np.unique(i * stride + j) >= size))


@pytest.mark.parametrize(("itemsize", "align"), [(4, 128), (8, 128), (4, 4096), (8, 4), (4, 12)])
def test_guard_zone_is_long_and_aligned(itemsize, align):
    elements = guard_elements(itemsize, align)
    assert elements >= GUARD_ELEMENTS and elements * itemsize % align == 0


def test_write_past_the_end_is_reported():
    """Without its bounds check, every thread of the grid stores: rows and columns overflow."""
    kernel = gemm()
    assert kernel.opencl_source.count("if (") == 1  # the one check, around the whole body
    expected = stores_past_the_end(kernel)
    assert expected > 0
    with pytest.raises(VerificationError, match=rf"wrote outside its output C \(1665 elements\)"
                                                rf": {expected} element\(s\) after it$"):
        broken(kernel, r"if \(.*\) \{", "if (1) {").verify()


def test_write_before_the_start_is_reported():
    with pytest.raises(VerificationError, match=r"output C .*: 50 element\(s\) before it$"):
        broken(gemm(), r"\bC\[", "C[-50 + ").verify()


def test_tiled_write_without_bounds_checks_is_reported():
    """A register-tiled kernel with all its checks removed writes whole tiles."""
    with pytest.raises(VerificationError, match=r"output C .* element\(s\) after it$"):
        broken(gemm("tiled"), r"if \(.*\) \{", "if (1) {").verify()


def test_guard_error_comes_from_run_opencl():
    """The check lives in run_opencl(guard=True), for every caller, not only in verify()."""
    kernel = broken(gemm(), r"\bC\[", "C[-3 + ")
    rng = np.random.default_rng(0)
    arrays = {t: rng.uniform(-1, 1, [GEMM_SIZES[i] for i in idx]).astype(np.float32)
              for t, idx in kernel.contraction.inputs.items()}
    launch = kernel._prepare(GEMM_SIZES, arrays, {})
    with pytest.raises(VerificationError, match=r"3 element\(s\) before it$"):
        run_opencl(kernel.opencl_source, launch, guard=True)


@pytest.mark.parametrize("strategy", strategy_names())
@pytest.mark.parametrize(("tensor", "shift"), [("A", 1000), ("B", -1000)])
def test_read_outside_an_input_fails_verify(strategy, tensor, shift):
    """Reads shifted into the NaN guard zone poison the result (staged kernels read inputs
    only in their copies to shared memory, so those are what break)."""
    kernel = broken(gemm(strategy), rf"\b{tensor}\[", f"{tensor}[{shift} + ")
    with pytest.raises(VerificationError, match="not finite"):
        kernel.verify()


@pytest.mark.parametrize("strategy", strategy_names())
@pytest.mark.parametrize(("example", "layout", "dtype", "symbolic"),
                         [("gemm_accumulate", "C", "float32", False),
                          ("dot", "F", "float64", True)])
def test_correct_kernels_pass_with_guards(example, strategy, layout, dtype, symbolic):
    """A small sample (the strategy matrix verifies every kernel with guards on)."""
    expression, sizes = EXAMPLES[example]
    kernel = treduda.compile(expression, None if symbolic else sizes, layout=layout, dtype=dtype,
                             symbolic=symbolic, strategy=strategy)
    assert kernel.verify(sizes).ok


def test_guards_do_not_change_the_result():
    """Inputs and output passed as sub-buffers give bit for bit what plain buffers give."""
    expression, sizes = EXAMPLES["gemm_scaled_transposed"]
    kernel = generated(expression, tuple(sizes.items()), "F", "float64", False)
    c, rng = kernel.contraction, np.random.default_rng(1)
    arrays = {t: rng.standard_normal([sizes[i] for i in idx])
              for t, idx in {**c.inputs, c.output: c.output_indices}.items()}
    launch = kernel._prepare(sizes, arrays, {"alpha": 1.5, "beta": -0.5})
    plain = run_opencl(kernel.opencl_source, launch, guard=False)
    guarded = run_opencl(kernel.opencl_source, launch, guard=True)
    assert np.array_equal(plain, guarded)

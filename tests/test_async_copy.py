"""Asynchronous copies (cp.async) in the tensor-core strategy: their kernels against
numpy.einsum on PoCL, the emulator's model of their asynchrony (no hazard where the kernel
waits, one where it does not), nvcc and NVRTC compiling them into LDGSTS for sm_80 and sm_90
and into plain copies below, and the search offering them only where the GPU has them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import without
from treduda.strategies import get as get_strategy
from treduda.strategies.tensorcore_model import TensorCoreModel

import treduda
from treduda.codegen import ir, serial
from treduda.model.gpus import gpu
from treduda.polyhedral.lower import plan
from treduda.polyhedral.strategy import Limits
from treduda.run.emulator import emulate
from treduda.run.launch import Launch
from treduda.run.nvcc import compile_cuda_batch, nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available, toolkit_headers
from treduda.run.sass import find_disassembler, sass_report
from treduda.tuning.walk import count

GEMM = "C[i,j] = A[i,k] * B[k,j]"
PARTIAL = {"i": 40, "j": 50, "k": 70}  # no multiple of any fragment shape; k, j even
SMALL = {"warps_m": 2, "warps_n": 1, "frags_m": 1, "frags_n": 2, "frags_k": 1}
CASES = {
    "gemm": (GEMM, PARTIAL),
    "batched": ("C[b,i,j] = A[b,i,k]*B[b,k,j]", {"b": 3, "i": 20, "j": 18, "k": 24}),
    "tccg_09": ("C[a,b,c,d]=A[e,a]*B[e,b,c,d]", {"a": 18, "b": 5, "c": 4, "d": 3, "e": 22}),
    "scaled": ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", {"i": 33, "j": 18, "k": 42}),
}
KINDS = [("float16", "highest"), ("float32", "tf32")]


def _compile(case: str, dtype: str, precision: str, layout: str = "C",
             **params) -> treduda.Kernel:
    expression, sizes = CASES[case]
    return treduda.compile(expression, sizes, dtype=dtype, precision=precision, layout=layout,
                           strategy="tensorcore", params={"async_copy": True, **params})


def _statements(kernel: treduda.Kernel, kind: type) -> list:
    return [s for s in ir.nested(kernel.built.kernel.body) if isinstance(s, kind)]


@pytest.mark.parametrize(("dtype", "precision"), KINDS)
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize(("case", "layout"), [("gemm", "F"), ("batched", "C"),
                                              ("tccg_09", "F"), ("scaled", "C")])
def test_async_copies_match_einsum(case, layout, dtype, precision, stages):
    kernel = _compile(case, dtype, precision, layout, stages=stages)
    copies = _statements(kernel, ir.AsyncCopy)
    # partial tiles: runs that zero-fill where they lie outside the tensor
    assert copies and any(c.zero or c.reads is not None for c in copies)
    tiles = {c.target.array for c in copies}
    assert tiles == {"td_sa", "td_sb"} and not any(  # no operand passes through registers
        isinstance(s.target, ir.Load) and s.target.array in tiles
        for s in _statements(kernel, ir.Assign))
    assert _statements(kernel, ir.CommitCopies) and _statements(kernel, ir.WaitCopies)
    assert kernel.verify().ok


def test_runs_are_as_wide_as_the_tensors_allow():
    """float16 rows of 70 and 50 elements: 4-byte runs; float32 rows of 72 and 48: 16 bytes;
    TF32 with A's rows along M (A[k,i], i fastest): one element per copy where K is not
    adjacent in B (B[j,k]: k fastest, but B's tile rows run along N)."""
    def widths(expression, sizes, dtype, precision):
        kernel = treduda.compile(expression, sizes, dtype=dtype, precision=precision,
                                 strategy="tensorcore", params={"async_copy": True})
        return {c.source.array: c.width for c in _statements(kernel, ir.AsyncCopy)}

    assert widths(GEMM, PARTIAL, "float16", "highest") == {"A": 2, "B": 2}
    assert widths(GEMM, {"i": 40, "j": 48, "k": 72}, "float32", "tf32") == {"A": 4, "B": 4}
    assert widths("C[i,j] = A[k,i]*B[j,k]", {"i": 40, "j": 48, "k": 70}, "float32",
                  "tf32") == {"A": 4, "B": 2}


def test_float16_rows_of_odd_length_are_copied_through_registers():
    """A's rows of 69 elements have no 4-byte run: A is copied through registers, B (rows of
    50) by cp.async, each operand on its own."""
    kernel = treduda.compile(GEMM, {"i": 40, "j": 50, "k": 69}, dtype="float16",
                             strategy="tensorcore", params={"async_copy": True})
    assert {c.source.array for c in _statements(kernel, ir.AsyncCopy)} == {"B"}
    assert any(isinstance(s.target, ir.Load) and s.target.array == "td_sa"
               for s in _statements(kernel, ir.Assign))
    assert kernel.verify().ok


@pytest.mark.parametrize(("dtype", "precision"), [*KINDS, ("float32", "3xtf32")])
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_emulator_finds_no_hazard_where_the_copies_are_waited_for(dtype, precision, stages):
    kernel = _compile("scaled", dtype, precision, stages=stages, **SMALL)
    assert kernel.verify(backend="emulator").ok  # every block: a hazard raises


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_emulator_reports_reads_before_the_wait(stages):
    kernel = _compile("gemm", "float16", "highest", stages=stages, **SMALL)
    assert kernel.hazards() == []
    # PoCL copies at once, so only the emulator can tell that the data arrive at the wait
    assert {h.kind for h in without(kernel, ir.WaitCopies).hazards()} >= {
        "unfinished async copy"}
    # waited for, but read by other threads before the barrier after the wait
    assert "race" in {h.kind for h in without(kernel, ir.Barrier).hazards()}


def test_emulator_waits_for_all_but_the_pending_groups():
    """``wait_group 1`` after two commits lands the first group only: the second's element
    is still in flight when it is read, and holds no value yet."""
    def kernel(pending: int) -> ir.KernelIR:
        copy = [ir.AsyncCopy(ir.Load("s", ir.Int(n)), ir.Load("A", ir.Int(n))) for n in (0, 1)]
        body = ir.If(ir.Binary(ir.Op.EQ, ir.Index(ir.Builtin.THREAD_ID, 0), ir.Int(0)),
                     ir.Block((copy[0], ir.CommitCopies(), copy[1], ir.CommitCopies(),
                               ir.WaitCopies(pending),
                               ir.Assign(ir.Load("C", ir.Int(0)), "=", ir.Binary(
                                   ir.Op.ADD, ir.Load("s", ir.Int(0)),
                                   ir.Load("s", ir.Int(1)))))))
        return ir.KernelIR("k", "float32", 32, (ir.Param("C", ir.ParamKind.OUTPUT),
                                                 ir.Param("A", ir.ParamKind.INPUT)),
                           (ir.Local("s", ir.Space.SHARED, (2,)),), body)

    launch = Launch("k", (1, 1, 1), (32, 1, 1), (np.zeros(1, np.float32),
                                                 np.array([2.0, 3.0], np.float32)), 0, (1,), "C")
    result, found = emulate(kernel(0), launch)
    assert found == [] and result[0] == 5.0
    result, found = emulate(kernel(1), launch)
    assert {(h.kind, h.array, h.offset) for h in found} == {  # s[0] landed: no report on it
        ("unfinished async copy", "s", 1), ("uninitialised read", "s", 1)}


def test_kernel_ir_with_async_copies_survives_storage():
    body = _compile("gemm", "float32", "tf32", stages=3).built.kernel
    assert serial.Decoder()(serial.encode(body)) == body


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize(("dtype", "precision"), [*KINDS, ("float64", "highest")])
def test_sass_copies_with_ldgsts(dtype, precision, arch):
    kernel = treduda.compile(GEMM, {"i": 256, "j": 256, "k": 256}, dtype=dtype,
                             precision=precision, strategy="tensorcore",
                             params={"async_copy": True, "stages": 3})
    report = sass_report(kernel.cuda_source, arch)[0]
    assert report.main_loop_async_copies > 0 and report.main_loop_mma > 0
    assert not report.global_load_widths  # every operand goes global -> shared directly


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
def test_nvcc_compiles_async_copies_and_their_fallback():
    sources = [_compile(case, dtype, precision, layout, stages=3).cuda_source
               for case, layout in (("gemm", "C"), ("tccg_09", "F"))
               for dtype, precision in KINDS]
    for arch in ("sm_80", "sm_90"):
        assert all(len(r) == 1 and r[0].spill_bytes == 0
                   for r in compile_cuda_batch(sources, arch))
    # float16 WMMA runs on Turing, which has no cp.async: the same text copies at once
    assert compile_cuda_batch(sources[::2], "sm_75")


@pytest.mark.skipif(not (nvrtc_available() and toolkit_headers()),
                    reason="NVRTC or a CUDA toolkit's headers (mma.h) not installed")
def test_nvrtc_compiles_cp_async_from_sm_80_only():
    source = _compile("gemm", "float16", "highest", stages=3).cuda_source
    for arch in ("compute_80", "compute_90"):
        ptx = compile_nvrtc(source, arch)
        assert "cp.async.ca.shared.global" in ptx and "cp.async.wait_group 1" in ptx
    assert "cp.async" not in compile_nvrtc(source, "compute_75")


def test_offered_only_where_the_gpu_has_them():
    program = plan(GEMM, PARTIAL, dtype="float16")
    older = get_strategy("tensorcore", Limits(async_copies=False)).space(program)
    assert {p["async_copy"] for p in older.points()} == {False}
    assert {p["async_copy"] for p in get_strategy("tensorcore").space(program).points()} == {
        False, True}
    assert not gpu("V100").async_copies and gpu("A100").async_copies


def test_model_issues_fewer_instructions_for_async_copies():
    program = plan(GEMM, {"i": 2048, "j": 2048, "k": 2048}, dtype="float16")
    model = TensorCoreModel(program, gpu("A100"), get_strategy("tensorcore"))
    chosen = get_strategy("tensorcore").defaults(program)
    issue = {a: model.estimate({**chosen, "async_copy": a}).resources["issue"]
             for a in (False, True)}
    assert issue[True] < issue[False]


def test_walk_counts_a_load_per_run_and_every_element_stored():
    def counted(async_copy: bool):
        kernel = treduda.compile(GEMM, {"i": 64, "j": 64, "k": 64}, dtype="float32",
                                 precision="tf32", strategy="tensorcore",
                                 params={"async_copy": async_copy})
        return count(kernel, use_nvcc=False)

    plain, copied = counted(False), counted(True)
    assert copied.global_loads == plain.global_loads / 4  # 16-byte runs of float32
    assert copied.shared_stores == plain.shared_stores > 0

"""Copies into shared memory number a tile's elements with power-of-two extents
(geometry.copy_extents), so a thread finds its elements' coordinates with shifts and masks:
the rule, the kernels it shapes against numpy.einsum, and the copies' index arithmetic."""

from __future__ import annotations

import pytest

import treduda
from treduda.codegen import ir
from treduda.polyhedral.geometry import copy_extents
from treduda.tuning.gpus import gpu
from treduda.tuning.model import Model

GEMM = "C[i,j] = A[i,k]*B[k,j]"
# The whole reduction (k = 24) is one step: the tiles of A and B are 24 wide along k.
STEP = {"order": "j,i", "block_x": 16, "reg_x": 2, "block_y": 8, "reg_y": 2, "step": 32,
        "stage": "A,B", "pad": 1}


@pytest.mark.parametrize(("box", "threads", "extents"), [
    ([24, 1, 24, 8], 256, [32, 1, 32, 8]),  # tccg_35's tile of B: 1024 elements precede 8
    ([8, 1, 24, 11], 256, [8, 1, 32, 11]),
    ([300, 5], 256, [512, 5]),
    ([3, 5, 7], 8, [4, 8, 7]),  # 32 elements precede 7: no more padding
    ([24], 256, [24]),  # the slowest dimension never
    ([24, 3], 96, [24, 3]),  # a block of 96 threads: padding would not help
])
def test_extents_are_powers_of_two_below_the_block(box, threads, extents):
    assert copy_extents(box, threads) == extents


def _divisors(e: ir.Expr) -> list[int]:
    """The constants ``e`` divides by or takes a remainder of."""
    found = []
    if isinstance(e, ir.Binary):
        if e.op in (ir.Op.DIV, ir.Op.MOD, ir.Op.FLOOR_DIV) and isinstance(e.right, ir.Int):
            found.append(e.right.value)
        found += _divisors(e.left) + _divisors(e.right)
    elif isinstance(e, ir.Select):
        found += [d for part in (e.condition, e.if_true, e.if_false) for d in _divisors(part)]
    elif isinstance(e, ir.Neg):
        found += _divisors(e.operand)
    return found


def copies(kernel: treduda.Kernel) -> list[ir.Assign]:
    """The assignments that read an input in a staged kernel: its copies (every operand the
    compute statement reads comes from shared memory)."""
    inputs = set(kernel.contraction.inputs)
    return [s for s in ir.nested(kernel.built.kernel.body) if isinstance(s, ir.Assign)
            and isinstance(s.value, ir.Load) and s.value.array in inputs]


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("preload", "double_buffer"), [(False, False), (True, False),
                                                        (True, True)])
def test_copies_of_a_tile_24_wide_divide_by_powers_of_two_only(layout, preload, double_buffer):
    sizes = {"i": 40, "j": 36, "k": 24}
    order = {"order": "j,i" if layout == "C" else "i,j"}
    kernel = treduda.compile(GEMM, sizes, layout=layout, strategy="tiled+staged",
                             params={**STEP, **order, "preload": preload,
                                     "double_buffer": double_buffer})
    found = copies(kernel)
    assert found
    divisors = {d for s in found for d in _divisors(s.value.offset)}
    assert all(d & (d - 1) == 0 for d in divisors), divisors
    assert kernel.verify().ok
    assert kernel.hazards() == []


def test_the_model_holds_a_register_per_copy_a_thread_preloads():
    """128 threads preload tiles of A (16 rows of 24: numbered as 16 x 32) and B (24 rows of
    32, its slowest dimension unpadded): 4 + 6 registers, where unpadded A would need 3."""
    sizes = {"i": 40, "j": 36, "k": 24}
    params = {**STEP, "order": "j,i", "preload": True, "double_buffer": False}
    kernel = treduda.compile(GEMM, sizes, strategy="tiled+staged", params=params)
    preloaded = {local.name: local.size for local in kernel.built.kernel.locals
                 if local.name.endswith("_pre")}
    assert preloaded == {"A_pre": 4, "B_pre": 6}
    model = Model(kernel.program, gpu("H100"), "tiled+staged")
    without = {**params, "preload": False}
    assert model.registers(kernel.params)[0] - model.registers(without)[0] == 4 + 6

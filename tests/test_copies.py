"""Copies into shared memory number a tile's elements with power-of-two extents
(geometry.copy_extents), so a thread finds its elements' coordinates with shifts and masks:
the rule, the kernels it shapes against numpy.einsum, the copies' index arithmetic, and the
formulas it comes from against the copies' access relations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import formulas_name_their_relations
from treduda.strategies.staging_kernel import copy_coordinate

import treduda
from treduda.codegen import ir
from treduda.model.gpus import gpu
from treduda.model.model import Model
from treduda.polyhedral.geometry import copy_extents
from treduda.polyhedral.lower import Kind, plan
from treduda.polyhedral.strategy import get

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


def _variables(e: ir.Expr) -> set[str]:
    if isinstance(e, ir.Var):
        return {e.name}
    return {name for part in ir.children(e) for name in _variables(part)}


def _fields(e: ir.Expr) -> list[ir.Binary]:
    """The divisions and remainders in ``e``."""
    own = [e] if isinstance(e, ir.Binary) and e.op in (ir.Op.DIV, ir.Op.MOD) else []
    return own + [f for part in ir.children(e) for f in _fields(part)]


@pytest.mark.parametrize(("stride", "modulus", "block", "fields"), [
    (1, 8, (16, 4, 2), True),  # the lowest bits of threadIdx.x
    (8, 32, (16, 4, 2), True),  # threadIdx.x's high bits, y, z and c's lowest bit
    (256, 8, (16, 4, 2), True),  # above the block: c alone
    (2048, None, (16, 4, 2), True),  # the slowest dimension: no remainder
    (4, None, (8, 2, 2), True),
    (64, 4, (32, 1, 1), True),  # the ids of extent 1 have no bits
    (768, 3, (16, 8, 1), True),  # a multiple of the block, unpadded: c's steps
    (1, 24, (12, 2, 1), False),  # 24 threads: the element number itself
])
def test_a_copy_coordinate_is_the_element_numbering(stride, modulus, block, fields):
    threads = math.prod(block)
    c, t0, t1, t2 = np.meshgrid(np.arange(50), *(np.arange(b) for b in block), indexing="ij")
    e = threads * c + t0 + block[0] * t1 + block[0] * block[1] * t2
    expected = e // stride if modulus is None else e // stride % modulus
    coordinate = copy_coordinate(stride, modulus, block)
    found = ir.evaluate(coordinate, {"c": c, "t0": t0, "t1": t1, "t2": t2})
    assert np.array_equal(np.broadcast_to(found, e.shape), expected)
    # Bit fields: each division or remainder takes one variable, so the thread ids' fields
    # are the same in every iteration of the copy loop and c's are constants once unrolled.
    assert all(len(_variables(f.left)) == 1 for f in _fields(coordinate)) == fields


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("preload", "double_buffer"), [(False, False), (True, True)])
def test_the_copies_formulas_are_their_access_relations(layout, preload, double_buffer):
    """The AST builder takes a copy's index expressions from its formulas: at every point of
    its domain they name the element its access relation names (tiles that cross the ends
    of A and B, two buffers chosen by the step's parity, registers by the copy loop)."""
    params = {"order": "j,i" if layout == "C" else "i,j", "block_x": 4, "reg_x": 2,
              "block_y": 2, "reg_y": 4, "step": 4, "stage": "A,B", "pad": 1,
              "preload": preload, "double_buffer": double_buffer}
    scheduled = get("tiled+staged").apply(plan(GEMM, {"i": 10, "j": 13, "k": 7}, layout),
                                          params)
    checked = formulas_name_their_relations(
        s for s in scheduled.statements if s.kind is Kind.COPY)
    assert checked > 500

"""The tensor-core copies follow each operand, not the output (issue 37): a warp's copy of a
permuted operand reads consecutive elements of it (sectors per request at most 1.25 times the
ideal, from the copies' own access relations); K's fastest index rounded up to whole steps
(zeros, no division per element), an operand copied by cp.async beside one copied through
registers and 16-bit values copied as their bits all match numpy.einsum on PoCL and run
hazard-free in the emulator; and the grouped TCCG rows' SASS main loops issue at most three
other instructions per MMA (38 executed on tccg_20 before)."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import islpy as isl
import numpy as np
import pytest
from conftest import formulas_name_their_relations

import treduda
from treduda.codegen import ir
from treduda.frontend import dtypes
from treduda.model.gpus import gpu
from treduda.model.model import model_of
from treduda.polyhedral.lower import Program, Statement, plan
from treduda.polyhedral.strategy import get
from treduda.run.nvcc import nvcc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load

TCCG_20 = "C[a,b,c,d]=A[a,e,b,f]*B[d,f,c,e]"
TILES = {"warps_m": 1, "warps_n": 2, "frags_m": 2, "frags_n": 1, "frags_k": 2, "split": 1}
SECTOR = 32  # bytes


def _sectors_per_request(program: Program, copy: Statement, sample: dict[str, list[int]]
                         ) -> float:
    """Sectors a warp's request of ``copy`` touches in its tensor, over the ideal (the
    warp's bytes in whole sectors), at the coordinates ``sample`` (every thread)."""
    tensor = copy.name.removeprefix("copy_")
    indices = program.contraction.inputs[tensor]
    order = range(len(indices)) if program.layout == "F" else reversed(range(len(indices)))
    strides, stride = [0] * len(indices), 1
    for d in order:
        strides[d], stride = stride, stride * program.sizes[indices[d]]
    width, reads = ((copy.body.width, copy.body.reads) if isinstance(copy.body, ir.AsyncCopy)
                    else (1, None))
    size = dtypes.itemsize(program.dtype)
    fixed = " and ".join("(" + " or ".join(f"{name} = {v}" for v in values) + ")"
                         for name, values in sample.items())
    points: list[isl.Point] = []
    copy.accesses[1].intersect_domain(isl.Set(
        f"{{ {copy.name}[{', '.join(copy.indices)}] : {fixed} }}")).wrap().foreach_point(
        points.append)
    found, lanes = defaultdict(set), defaultdict(int)
    for p in points:
        values = [p.get_coordinate_val(isl.dim_type.set, d).to_python()
                  for d in range(len(copy.indices) + len(indices))]
        coordinates = dict(zip(copy.indices, values, strict=False))
        if reads is not None and not ir.evaluate(reads, coordinates):
            continue  # zero-fills: reads nothing
        request = (*(v for n, v in coordinates.items() if n != "t"), coordinates["t"] // 32)
        first = sum(i * s for i, s in zip(values[len(copy.indices):], strides, strict=True))
        found[request] |= set(range(first * size // SECTOR,
                                    ((first + width) * size - 1) // SECTOR + 1))
        lanes[request] += 1
    assert found
    return (sum(len(s) for s in found.values())
            / sum(math.ceil(n * width * size / SECTOR) for n in lanes.values()))


@pytest.mark.parametrize("async_copy", [True, False], ids=["async", "registers"])
@pytest.mark.parametrize(("expression", "sizes"), [
    # B's fastest index d is N's second in the output's order: read along c, 96 apart
    (TCCG_20, {"a": 32, "b": 3, "c": 3, "d": 32, "e": 17, "f": 3}),
    # B's fastest index f is K's second in A's order
    ("C[a,b,c,d]=A[a,e,d,f]*B[f,b,e,c]", {"a": 32, "b": 5, "c": 7, "d": 4, "e": 5, "f": 32})],
    ids=["tccg_20", "tccg_25"])
def test_a_warp_copies_consecutive_elements_of_each_operand(expression, sizes, async_copy):
    program = plan(expression, sizes, "F", "float16")
    params = {**TILES, "async_copy": async_copy, "stages": 1}
    statements = get("tensorcore").apply(program, params).statements
    sample = {"bm": [0, 1], "bn": [0, 1], "ks": [0, 1]}
    copies = [s for s in statements if s.name.startswith("copy_")]
    assert len(copies) == 2
    for copy in copies:
        assert _sectors_per_request(program, copy, sample) <= 1.25, copy.name


@pytest.mark.parametrize("layout", ["F", "C"])
@pytest.mark.parametrize(("async_copy", "stages", "warps_n"), [
    (True, 1, 2), (True, 2, 2), (False, 2, 2), (False, 1, 1), (True, 4, 2)])
def test_k_rounded_up_to_whole_steps_matches_einsum(layout, async_copy, stages, warps_n):
    """K = (e, f) with e = 28 and steps of 32 values: each step spans one f, its rows of e
    past 28 zeros (filled by the cp.async's read size, or by a zero-fill); one warp copies
    32 elements of A per step, in a loop, not unrolled."""
    sizes = {"a": 20, "b": 5, "c": 6, "d": 24, "e": 28, "f": 3}
    program = plan(TCCG_20, sizes, layout, "float16")
    space = get("tensorcore").space(program)
    async_copy = async_copy and True in space.parameter("async_copy").values  # C: A's f = 3
    if stages > 2 and not async_copy:
        pytest.skip("more than two stages need asynchronous copies")
    kernel = treduda.compile(TCCG_20, sizes, dtype="float16", layout=layout,
                             strategy="tensorcore", cache=False,
                             params={**TILES, "async_copy": async_copy, "warps_n": warps_n,
                                     "stages": stages})
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)


def _divided_per_thread(e: ir.Expr, divisor: int) -> bool:
    """Whether ``e`` divides (or takes the remainder of) a value that reads the thread id by
    ``divisor``."""
    if (isinstance(e, ir.Binary) and e.op in (ir.Op.DIV, ir.Op.MOD)
            and e.right == ir.Int(divisor) and ir.reads_thread_id(e.left)):
        return True
    return any(_divided_per_thread(child, divisor) for child in ir.children(e))


@pytest.mark.parametrize(("expression", "sizes", "dtype", "frags_k", "stages", "async_copy",
                          "carried"), [
    # K = (e, f), e = 21 in steps of 16: a step's row passes e's end at most once
    (TCCG_20, {"a": 20, "b": 5, "c": 6, "d": 24, "e": 21, "f": 5}, "float16", 1, 1, True, "e"),
    (TCCG_20, {"a": 20, "b": 5, "c": 6, "d": 24, "e": 21, "f": 5}, "float32", 2, 3, True, "e"),
    (TCCG_20, {"a": 20, "b": 5, "c": 6, "d": 24, "e": 21, "f": 5}, "float16", 1, 2, False,
     "e"),
    # K = (f, e, g) = 24 x 20 x 3 (B's order): carried twice, from f into e, from e into g
    ("C[a,b]=A[a,e,f,g]*B[f,b,e,g]", {"a": 24, "b": 20, "e": 20, "f": 24, "g": 3},
     "float16", 1, 4, True, "f"),
    # K = (f, e) = 9 x 7: a step of 16 spans several f, each copy divides its own value
    ("C[a,b]=A[a,e,f]*B[f,e,b]", {"a": 24, "b": 20, "e": 7, "f": 9}, "float16", 1, 2, True,
     None),
    # the warpgroup mapping's cp.async copies are the same statements
    pytest.param(TCCG_20, {"a": 20, "b": 5, "c": 6, "d": 24, "e": 21, "f": 5}, "float16", 1, 2,
                 True, "e", id="warpgroup"),
    # tccg_20's 84 x 84 in steps of 64, four stages
    pytest.param("C[a,b]=A[a,e,f]*B[f,e,b]", {"a": 40, "b": 24, "e": 84, "f": 84}, "float16",
                 4, 4, True, "f", marks=pytest.mark.matrix)])
def test_k_carried_from_the_step_matches_einsum(expression, sizes, dtype, frags_k, stages,
                                                async_copy, carried, request):
    """Where K is a group whose fastest extent the step does not divide (nor was rounded up
    to: stepped_k), a copy's K digits are the step's plus its row, carried into the next
    digit where they pass the extent, and no copy divides a value of its thread by the
    extent; where a step spans several of its values, each copy divides its own. Sizes not
    multiples of the step (a short last step zero-fills), fp16 and tf32, one to four stages,
    cp.async or registers, the warpgroup mapping's copies too: the copies' formulas name the
    elements their relations name (at the same offsets), PoCL matches numpy.einsum, and in
    one stage the emulator too."""
    warpgroup = request.node.callspec.id == "warpgroup"
    params = ({"warpgroups": 1, "frags_m": 1, "tile_n": 32, "tma": False} if warpgroup
              else TILES)
    kernel = treduda.compile(expression, sizes, dtype=dtype, layout="F",
                             strategy="warpgroup" if warpgroup else "tensorcore",
                             precision="tf32" if dtype == "float32" else "highest", cache=False,
                             params={**params, "frags_k": frags_k, "async_copy": async_copy,
                                     "stages": stages})
    sources = [s.source if isinstance(s, ir.AsyncCopy) else s.value
               for s in ir.nested(kernel.built.kernel.body)
               if isinstance(s, ir.AsyncCopy) or (isinstance(s, ir.Assign)
                                                  and isinstance(s.value, ir.Load))]
    sources = [load for load in sources if load.array in ("A", "B")]
    extent = sizes[carried or "f"]  # K's fastest (None: a step spans several f)
    assert sources and all(_divided_per_thread(load.offset, extent) != bool(carried)
                           for load in sources)
    copies = [dataclasses.replace(s, accesses=tuple(a.intersect_domain(isl.Set(
        f"{{ {s.name}[{', '.join(s.indices)}] : bm = 0 and bn = 0 and ks < 6 }}"))
        for a in s.accesses))  # the first block's first steps, past a carry or two
        for s in get(kernel.strategy).apply(kernel.program, kernel.params).statements
        if s.name.startswith("copy_")]
    assert formulas_name_their_relations(copies, kernel.program) > 500
    assert kernel.verify().ok
    if stages == 1:
        assert kernel.verify(backend="emulator").ok


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_each_operand_takes_cp_async_on_its_own(stages):
    """A's rows run along k = 41, which no run of 16-bit pairs divides: A is copied through
    registers (as 16-bit words), B by cp.async, in the same steps (as
    tests/test_async_copy.py shows), without a hazard and without losing a bit."""
    kernel = treduda.compile("C[i,j] = A[i,k] * B[k,j]", {"i": 40, "j": 48, "k": 41},
                             dtype="float16", strategy="tensorcore", cache=False,
                             params={**TILES, "async_copy": True,
                                     "stages": stages})
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)
    values = {"A": np.full((40, 41), 65504.0), "B": np.full((41, 48), 2.0**-24)}
    exact = np.asarray(kernel.run(**values, casting="unsafe"), dtype=np.float64)
    assert np.all(exact == np.float16(41 * 65504.0 * 2.0**-24))  # no bits lost on the way


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize(("row", "params", "most"), [
    ("tccg_20", {"warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 4}, 3.0),
    ("tccg_25", {"warps_m": 4, "warps_n": 1, "frags_m": 2, "frags_n": 4}, 3.0),
    ("gemm", {"warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 4}, 1.38)])
def test_the_main_loop_issues_few_instructions_beside_its_mmas(row, params, most):
    """The SASS main loop (sm_90) of full-size TCCG rows whose M, N and K are groups, at the
    H100 search's tiles, issues at most ``most`` other instructions per MMA, in one body
    without branches (tccg_20: 38 executed before: a copy per element through float, strided,
    with a division per element and a branch per copy); GEMM's no more than before."""
    if row == "gemm":
        expression, sizes, layout = "C[i,j]=A[i,k]*B[k,j]", {"i": 4096, "j": 4096,
                                                             "k": 4096}, "C"
    else:
        found = next(r for r in load("tccg_fp16") if r.id == row)
        expression, sizes, layout = found.expression, found.sizes, found.layout
    kernel = treduda.compile(expression, sizes, dtype="float16", layout=layout,
                             strategy="tensorcore", cache=False,
                             params={**params, "frags_k": 2, "split": 1,
                                     "stages": 1, "async_copy": True})
    report = sass_report(kernel.cuda_source, "sm_90")[0]
    branches = report.main_loop_opcodes.get("BRA", 0)
    assert branches == 1  # the loop's own
    mma = report.main_loop_mma
    assert (report.main_loop_instructions - mma) / mma <= most, report.main_loop_opcodes


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize("row", ["tccg_20", "tccg_25", "gemm"])
def test_the_models_step_counts_the_divisions_of_a_grouped_k(row):
    """At the H100 search's pick (2 x 4 warps of 4 x 4 fragments, steps of 64, two stages),
    the model's instructions per step are the SASS main loop's within 20%: where K is a
    group of indices whose fastest extent (84) the steps do not divide, each copy divides
    its K value (tccg_20's loop: 414 instructions, which the model put at 292 when it
    counted GEMM's copies alone; GEMM's 318)."""
    if row == "gemm":
        expression, sizes, layout = "C[i,j]=A[i,k]*B[k,j]", {"i": 4096, "j": 4096,
                                                             "k": 4096}, "C"
    else:
        found = next(r for r in load("tccg_fp16") if r.id == row)
        expression, sizes, layout = found.expression, found.sizes, found.layout
    params = {"warps_m": 2, "warps_n": 4, "frags_m": 4, "frags_n": 4, "frags_k": 4,
              "split": 1, "stages": 2, "async_copy": True, "mapping": "wmma",
              "shared_layout": "pad"}
    kernel = treduda.compile(expression, sizes, dtype="float16", layout=layout,
                             strategy="tensorcore", cache=False, params=params)
    report = sass_report(kernel.cuda_source, "sm_90")[0]
    model = model_of(kernel.program, gpu("H100"), "tensorcore")
    assert report.main_loop_mma == model.step_mmas(params)  # the loop is one step
    predicted = model.step_instructions(params)
    assert abs(predicted / report.main_loop_instructions - 1) < 0.2, (
        predicted, report.main_loop_instructions)


def test_a_copy_that_every_thread_of_a_step_reads_or_none_is_tested_on_the_step():
    """tccg_06's shape at small extents (K = f = 36 in steps of 16, N = c = 24 in a tile of
    32, M = 256 in tiles of 128, four stages, 64 threads): each of A's copies in the last
    step reads for all threads (rows 32-35) or none (36-47), so its condition names the step
    alone, which nvcc decides in each step it unrolls; B's columns past N (threads t % 4 = 3)
    keep their test. PoCL and the emulator match numpy.einsum."""
    kernel = treduda.compile("C[a,b,c,d,e]=A[e,f,b,a,d]*B[c,f]",
                             {"a": 2, "b": 2, "c": 24, "d": 4, "e": 16, "f": 36},
                             dtype="float16", layout="F", strategy="tensorcore", cache=False,
                             params={"warps_m": 2, "warps_n": 1, "frags_m": 4, "frags_n": 2,
                                     "frags_k": 1, "stages": 4, "split": 1, "mapping": "mma",
                                     "async_copy": True})
    conditions = defaultdict(list)
    for s in ir.nested(kernel.built.kernel.body):
        if isinstance(s, ir.AsyncCopy) and s.reads is not None:
            conditions[s.source.array].append(ir.reads_thread_id(s.reads))
    assert conditions["A"] and not any(conditions["A"]) and all(conditions["B"])
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    # (verify on the emulator ran every block: a hazard raises HazardError)

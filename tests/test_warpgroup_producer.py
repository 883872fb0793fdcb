"""The warpgroup mapping's warp specialisation (``producer``): its kernels against
numpy.einsum on PoCL (partial tiles, both layouts, alpha/beta, ``+=``), the emulator's run of
the two roles at once (no hazard, and the hazard each removed guard leaves), nvcc's sm_90a
build with HGMMA, UTMALDG and both setmaxnreg and no LDG of operands, NVRTC's, and the
offer: only beside ``tma``, never on the A100."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_warpgroup_tma import GEMM, PARTIAL, TILES
from treduda.strategies.warpgroup_roles import EMPTY

import treduda
from treduda.codegen import ir
from treduda.codegen.role_split import joined_roles
from treduda.errors import StrategyError
from treduda.model.gpus import gpu
from treduda.run.emulator import corners, emulate
from treduda.run.nvcc import nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.sass import find_disassembler, sass_report
from treduda.suites import load
from treduda.tuning.walk import launch

PRODUCER = {**TILES, "warpgroups": 2, "frags_m": 1, "stages": 2, "producer": True}


def _compile(expression: str = GEMM, sizes: dict | None = None, dtype: str = "float16",
             layout: str = "C", **params) -> treduda.Kernel:
    return treduda.compile(expression, sizes or PARTIAL, dtype=dtype, layout=layout,
                           strategy="warpgroup", params={**PRODUCER, **params})


def _split(kernel: treduda.Kernel) -> ir.If:
    (split,) = [s for s in ir.nested(kernel.built.kernel.body)
                if isinstance(s, ir.If) and ir.is_role_split(s)]
    return split


def _without(kernel: treduda.Kernel, removed) -> treduda.Kernel:
    """``kernel`` with each statement ``removed`` says so of left out."""
    def leave_out(s: ir.Stmt) -> ir.Stmt:
        return ir.Block(()) if removed(s) else ir.map_children(s, leave_out)

    first = kernel.signature.kernel
    return replace(kernel, signature=replace(kernel.signature, kernel=replace(
        first, body=leave_out(first.body))))


def _on_empty(kind: type):
    return lambda s: isinstance(s, kind) and s.barrier.array == EMPTY


@pytest.mark.parametrize("layout", ["C", "F"])  # K-major A and MN-major B, and the converse
def test_specialised_roles_match_einsum_without_hazards(layout):
    """Two consumer warpgroups and the producer after them (384 threads): one role split,
    the consumers' barriers theirs alone (named, 256 threads), none left in their loop."""
    kernel = _compile(layout=layout)
    assert kernel.built.block == (384, 1, 1)
    assert launch(kernel, gpu("H100")).blocks_per_sm == 1  # setmaxnreg's launch bounds
    split = _split(kernel)
    producer, consumers = split.then, split.otherwise
    assert [s.count for s in ir.nested(producer) if isinstance(s, ir.SetMaxRegisters)] == [40]
    assert [s.count for s in ir.nested(consumers)
            if isinstance(s, ir.SetMaxRegisters)] == [232]
    assert any(isinstance(s, ir.TensorCopy) for s in ir.nested(producer))
    assert not any(isinstance(s, ir.TensorCopy) for s in ir.nested(consumers))
    assert {s.threads for s in ir.nested(consumers) if isinstance(s, ir.Barrier)} == {256}
    assert kernel.verify().ok
    assert kernel.hazards() == []


def test_a_reduction_of_one_step_has_a_twin_and_no_hazard():
    """K of 40 in one step of 64: isl scans each role's step straight, no loop; the twin runs
    it as a loop of one round (the producer's copies, a barrier, the consumers' MMAs), as the
    bench verifies a searched producer kernel at its scaled sizes (gemm_1000: 72 x 72 x 40)."""
    kernel = _compile(sizes={"i": 72, "j": 72, "k": 40})
    assert not any(isinstance(s, ir.For) and any(isinstance(d, ir.MbarrierWait)
                                                 for d in ir.nested(s.body))
                   for s in ir.nested(_split(kernel)))
    assert kernel.verify().ok
    assert kernel.hazards() == []


@pytest.mark.parametrize(("removed", "hazard"), [
    # the consumers never release a stage: the producer waits for ever
    (_on_empty(ir.MbarrierArrive), "mbarrier never completes"),
    # the producer does not wait for the stage to empty: a box over one still landing
    (_on_empty(ir.MbarrierWait), "unfinished tensor copy"),
    # the consumers release a stage without waiting for the MMAs that read it
    (lambda s: isinstance(s, ir.WarpgroupWait) and s.pending == 1, "unfinished wgmma"),
])
def test_the_emulator_names_the_hazard_a_removed_role_guard_leaves(removed, hazard):
    kernel = _without(_compile(sizes={**PARTIAL, "k": 328}), removed)
    assert hazard in {h.kind for h in kernel.hazards()}


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "sizes", "dtype", "params"), [
    ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", PARTIAL, "bfloat16", {"stages": 3}),
    ("C[i,j] += A[k,i] * B[j,k]", PARTIAL, "float16", {"stages": 1}),
    ("C[i,j] += A[i,k] * B[k,j]", {**PARTIAL, "k": 328}, "float16",
     {"warpgroups": 1, "frags_m": 2, "stages": 4}),  # one consumer: no setmaxnreg
])
def test_updates_stages_and_one_consumer_match_einsum_without_hazards(expression, sizes,
                                                                       dtype, params):
    kernel = _compile(expression, sizes, dtype, **params)
    assert kernel.verify().ok and kernel.hazards() == []


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("producer", [False, True])
def test_a_later_parts_first_round_waits_for_its_copies(producer):
    """A split reduction's second part sums steps 5 to 8 of 9 in three stages: its waits
    name the parity of each stage's rounds from the part's first step. From step 0 (round
    1 at step 5) its first waits would name the phase before a fresh mbarrier's, which
    counts as completed: tiles read before their copies land ('uninitialised read')."""
    kernel = treduda.compile(GEMM, {**PARTIAL, "k": 520}, dtype="float16",
                             strategy="warpgroup", deterministic=True,
                             params={**TILES, "split": 2, "producer": producer})
    assert kernel.grid == (2 * 2, 1, 1)  # the tiles' two blocks, each in two parts
    assert kernel.hazards() == []  # the grid's corners: the second part's blocks


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_the_corners_sum_of_parts_reads_poison_whatever_the_workspace_held():
    """hazards() emulates the grid's corner blocks, then the sum of the parts, which reads the
    parts of the blocks in between too: from a workspace that np.empty leaves holding any
    bits, which overflowed float16 or, a signaling NaN, were an invalid operand of numpy's
    add (RuntimeWarnings on some runs). The emulator starts it from poison, as any memory no
    statement set: no warning, and the same output and hazards whatever the bits were."""
    kernel = treduda.compile(GEMM, {**PARTIAL, "k": 520}, dtype="float16", strategy="warpgroup",
                             deterministic=True, params={**TILES, "split": 2})
    sizes = kernel.sizes
    zeros = {"A": np.zeros((sizes["i"], sizes["k"])), "B": np.zeros((sizes["k"], sizes["j"]))}
    launch = kernel._prepare(sizes, zeros, {})
    (workspace,) = (launch.values[n] for n in launch.workspaces)
    runs = []
    for bits in (0x7F7FFFFF, 0x7F800001):  # float32's largest, a signaling NaN
        workspace.view(np.uint32)[:] = bits
        runs.append(emulate(kernel.built.kernel, launch, corners(launch.grid), kernel._later()))
    (first, found), (second, found_again) = runs
    np.testing.assert_array_equal(first, second)  # NaN where a part was not emulated
    assert found == found_again == []


@pytest.mark.matrix
@pytest.mark.parametrize(("expression", "dtype", "layout", "params"), [
    (GEMM, "float16", "C", {}),  # two consumers (setmaxnreg), two stages
    ("C[i,j] += alpha*A[i,k]*B[k,j]", "bfloat16", "F",
     {"warpgroups": 1, "frags_m": 2, "stages": 3}),
    ("C[i,j] += A[k,i] * B[j,k]", "float16", "C", {"stages": 1}),  # (beta: no split)
])
def test_the_parts_of_a_split_reduction_match_einsum_without_hazards(expression, dtype,
                                                                      layout, params):
    """Six steps (the last partial) in two parts: the second starts on an odd round of one,
    two and three stages; a deterministic sum of the parts (no 16-bit atomics in OpenCL)."""
    kernel = treduda.compile(expression, {**PARTIAL, "k": 360}, dtype=dtype, layout=layout,
                             strategy="warpgroup", deterministic=True,
                             params={**PRODUCER, "split": 2, **params})
    assert kernel.verify().ok and kernel.hazards() == []


@pytest.mark.matrix
@pytest.mark.parametrize("layout", ["C", "F"])
def test_the_consumers_wider_tile_matches_einsum_without_hazards(layout):
    """256 x 192: two 64 x 192 accumulators a consumer thread (192 registers of its 232),
    partial along both; alpha and beta."""
    kernel = _compile("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]",
                      {"i": 296, "j": 200, "k": 104}, layout=layout, frags_m=2, tile_n=192)
    assert kernel.verify().ok and kernel.hazards() == []


@pytest.mark.matrix
def test_a_tccg_rows_pick_matches_einsum_without_hazards():
    """tccg_13's H100 pick (64 x 64, one consumer warpgroup, 4 stages, a producer) at
    small sizes a tensor map takes (rows of 16-byte multiples; a step of 64 d: one box),
    partial along a and b, the steps over c and d."""
    row = next(r for r in load("tccg_fp16") if r.id == "tccg_13")
    kernel = treduda.compile(row.expression, {"a": 136, "b": 40, "c": 3, "d": 64},
                             dtype="float16", layout=row.layout, strategy="warpgroup",
                             params={**PRODUCER, "warpgroups": 1, "tile_n": 64, "stages": 4})
    assert kernel.verify().ok and kernel.hazards() == []


def test_the_h100_search_specialises_gemms_warps_for_the_wider_tile_they_allow():
    """GEMM 4096^3 fp16: without a producer, 128 x 256 (L2 binds); with one, the consumers'
    registers hold 256 x 192, which reads a fifth less from L2, and on the same 128 x 256
    the producer's steps wait for no block barrier (less latency beside L2)."""
    sizes = {"i": 4096, "j": 4096, "k": 4096}

    def best(**values):
        return treduda.search(GEMM, sizes, "H100", dtype="float16", strategy="warpgroup",
                              values={k: (v,) for k, v in values.items()} or None).best

    pick, without, same_tile = best(), best(producer=False), best(tile_n=256, producer=True)
    assert pick.params["producer"] and (pick.params["frags_m"], pick.params["tile_n"]) == (2, 192)
    assert (without.params["frags_m"], without.params["tile_n"]) == (1, 256)
    assert pick.prediction.resources["l2"] < 0.85 * without.prediction.resources["l2"]
    assert same_tile.prediction.binding == without.prediction.binding == "l2"
    assert same_tile.prediction.resources["latency"] < without.prediction.resources["latency"]
    assert pick.prediction.seconds < same_tile.prediction.seconds < without.prediction.seconds


def test_offered_beside_tma_only():
    with pytest.raises(StrategyError, match="producer warpgroup"):
        _compile(tma=False)


@pytest.mark.skipif(not nvcc_available() or find_disassembler() is None,
                    reason="nvcc and cuobjdump/nvdisasm (CUDA toolkit) not installed")
def test_nvcc_builds_both_roles_with_setmaxnreg_utmaldg_and_hgmma_and_no_ldg():
    """GEMM 4096^3's tile of 128 x 256: the consumers' loop holds the HGMMAs and no barrier
    or bulk copy; the producer's the UTMALDGs; no LDG of operands anywhere."""
    kernel = _compile(sizes={"i": 4096, "j": 4096, "k": 4096}, tile_n=256, stages=3)
    report, = sass_report(kernel.cuda_source, "sm_90")
    assert report.arch == "sm_90a" and report.register_limits == (40, 232)
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HGMMA": 4}
    assert not {"UTMALDG", "BAR", "LDGSTS"} & set(report.main_loop_opcodes)
    assert report.producer_loop_bulk_copies == 5  # A's box and B's four per step
    assert not report.global_load_widths


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (CUDA toolkit) not installed")
def test_nvrtc_compiles_the_roles_for_sm_90a():
    ptx = compile_nvrtc(_compile(dtype="bfloat16").cuda_source, "compute_90")
    assert ".target sm_90a" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    assert "bar.sync 1, 256" in ptx


def test_only_tests_that_split_the_threads_exactly_become_one_role_split():
    """``if (t >= 256) P; if (t <= 255) C;`` is one split of 384 threads; with ``t <= 200``
    some threads run neither, and with a loop iterator in a test it is no role test."""
    thread = ir.Index(ir.Builtin.THREAD_ID, 0)
    wait = ir.MbarrierWait(ir.Load("bar", ir.Int(0)), ir.Int(0))

    def tests(first: ir.Expr, second: ir.Expr) -> ir.Block:
        return ir.Block((ir.If(first, wait), ir.If(second, wait)))

    producer = ir.Binary(ir.Op.GE, thread, ir.Int(256))
    joined = joined_roles(tests(producer, ir.Binary(ir.Op.LE, thread, ir.Int(255))), 384)
    assert joined.body == (ir.If(producer, wait, wait),)
    for second in (ir.Binary(ir.Op.LE, thread, ir.Int(200)),
                   ir.Binary(ir.Op.LE, thread, ir.Var("ks"))):
        assert len(joined_roles(tests(producer, second), 384).body) == 2

"""The mbarrier statements and the bulk tensor copy (:data:`ir.MBARRIER_STATEMENTS`): one
warpgroup's tile of ``C = A B^T`` whose operand boxes the copy engine moves, checked against
numpy on PoCL (the twin) and in the emulator (their asynchrony), each guard removed in turn
for the hazard it prevents, the copy engine's swizzle against the tiles' and the
descriptors', and nvcc building UTMALDG and HGMMA for sm_90a with no LDG."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from treduda.codegen import ir, serial
from treduda.codegen.printer import CUDA, OPENCL, Printer
from treduda.codegen.unroll import unroll
from treduda.codegen.warpgroup import accumulator_column, accumulator_row
from treduda.errors import TredudaError
from treduda.kernel import _templates
from treduda.run.emulator import emulate
from treduda.run.launch import Launch
from treduda.run.nvcc import cubin, nvcc_available
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.run.opencl import run_opencl
from treduda.run.sass import find_disassembler, sass_report
from treduda.run.transactions import tensor_map_swizzle

M, N, K = 50, 30, 104  # partial boxes along every index: the copy engine's zero fill;
# rows of 208 bytes, a multiple of 16 as a tensor map's strides must be
BOX_M, BOX_N, BOX_K = 64, 32, 64  # one 128-byte swizzled line of K per row
THREADS = ir.WARPGROUP
THREAD = ir.Index(ir.Builtin.THREAD_ID, 0)
BOX_BYTES = (BOX_M + BOX_N) * BOX_K * 2


def _int(n: int) -> ir.Int:
    return ir.Int(n)


def _add(*terms: ir.Expr) -> ir.Expr:
    total = terms[0]
    for term in terms[1:]:
        total = ir.Binary(ir.Op.ADD, total, term)
    return total


def _loop(name: str, count: int, body: ir.Stmt) -> ir.For:
    return ir.For(name, _int(0), ir.Binary(ir.Op.LT, ir.Var(name), _int(count)), _int(1), body)


def _elected(*body: ir.Stmt) -> ir.If:
    return ir.If(ir.Binary(ir.Op.EQ, THREAD, _int(0)), ir.Block(body))


def tile_gemm(stages: int = 2, wait: bool = True, wgmma_wait: bool = True,
              parity: bool = True, arrive: bool = True, rewrite: bool = False,
              fence: bool = True, map_swizzle: int = 128) -> ir.KernelIR:
    """``C[m, n] = sum_k A[m, k] B[n, k]`` (both K-major, float16) in one block of one
    warpgroup: per step of 64 K, the elected thread expects the step's bytes on the stage's
    mbarrier and starts the copies of A's 64 x 64 box and B's 32 x 64 into the stage's
    128-byte swizzled tiles; every thread waits for the stage's phase (parity: the step's
    round of the stages), the warpgroup multiplies and waits for its MMAs. The flags remove
    one guard each; ``rewrite`` has each thread store its share of A's tile again after the
    wait (a generic-proxy write the MMAs read: it needs the proxy fence, ``fence``)."""
    ks = ir.Var("ks")
    stage = ir.Binary(ir.Op.MOD, ks, _int(stages))
    barrier = ir.Load("bar", stage)
    a_start = ir.Binary(ir.Op.MUL, stage, _int(BOX_M * BOX_K))
    b_start = ir.Binary(ir.Op.MUL, stage, _int(BOX_N * BOX_K))
    k0 = ir.Binary(ir.Op.MUL, ks, _int(BOX_K))
    issue = _elected(*((ir.MbarrierArrive(barrier, BOX_BYTES),) if arrive else ()),
                     ir.TensorCopy(ir.Load("sa", a_start), "map_a", (k0, _int(0)), barrier),
                     ir.TensorCopy(ir.Load("sb", b_start), "map_b", (k0, _int(0)), barrier))
    round_parity = ir.Binary(ir.Op.MOD, ir.Binary(ir.Op.DIV, ks, _int(stages)), _int(2))
    waits = (ir.MbarrierWait(barrier, round_parity if parity else _int(0)),) if wait else ()
    share = BOX_M * BOX_K // THREADS
    mine = _add(a_start, ir.Binary(ir.Op.MUL, THREAD, _int(share)), ir.Var("j"))
    rewrites = (_loop("j", share, ir.Assign(ir.Load("sa", mine), "=", ir.Binary(
        ir.Op.MUL, ir.Load("sa", mine), ir.Float(1.0)))),
        *((ir.ProxyFence(),) if fence else ()), ir.Barrier()) if rewrite else ()
    steps = -(-K // BOX_K)
    registers = BOX_N // 2
    step = ir.Block((issue, *waits, *rewrites, *_mmas(a_start, b_start),
                     *((ir.WarpgroupWait(0),) if wgmma_wait else ())))
    r = ir.Var("r")
    body = ir.Block((
        _elected(*(ir.MbarrierInit(ir.Load("bar", _int(s)), 1) for s in range(stages))),
        ir.Barrier(),
        _loop("r", registers, ir.Assign(ir.Load("acc", r), "=", ir.Float(0.0))),
        _loop("ks", steps, step), ir.WarpgroupWait(0), _store(registers)))
    return _kernel(body, stages, registers, K, (ir.Local("bar", ir.Space.MBARRIER, (stages,)),),
                   map_swizzle)


def _mmas(a_start: ir.Expr, b_start: ir.Expr, box_m: int = BOX_M) -> tuple[ir.Stmt, ...]:
    """A step's MMAs over the stage's tiles, fenced and committed as one group; each
    warpgroup multiplies its 64 rows of A's tile."""
    layout_a = ir.CoreMatrices(box_m * 128, 1024, True, 128)
    layout_b = ir.CoreMatrices(BOX_N * 128, 1024, True, 128)
    rows = ir.Binary(ir.Op.MUL, ir.Binary(ir.Op.DIV, THREAD, _int(ir.WARPGROUP)),
                     _int(64 * BOX_K))
    return (ir.WarpgroupFence(), *(ir.WarpgroupMultiply(
        ir.Load("acc", _int(0)), ir.Load("sa", _add(a_start, rows, _int(16 * kf))),
        ir.Load("sb", _add(b_start, _int(16 * kf))), (64, BOX_N, 16), layout_a, layout_b)
        for kf in range(BOX_K // 16)), ir.WarpgroupCommit())


def _store(registers: int, m: int = M) -> ir.Stmt:
    """Each thread's accumulators into C, inside the tensor (warpgroup w's rows from 64 w
    on, as the accumulator's row of a thread beyond the first warpgroup counts)."""
    r = ir.Var("r")
    row, column = accumulator_row(THREAD, r), accumulator_column(THREAD, r)
    inside = ir.Binary(ir.Op.AND, ir.Binary(ir.Op.LT, row, _int(m)),
                       ir.Binary(ir.Op.LT, column, _int(N)))
    return _loop("r", registers, ir.If(inside, ir.Assign(
        ir.Load("C", _add(ir.Binary(ir.Op.MUL, row, _int(N)), column)), "=",
        ir.Load("acc", r))))


def _kernel(body: ir.Stmt, stages: int, registers: int, k: int,
            barriers: tuple[ir.Local, ...], map_swizzle: int = 128, m: int = M,
            box_m: int = BOX_M) -> ir.KernelIR:
    sa = ir.Local("sa", ir.Space.SHARED, (stages * box_m * BOX_K,), stored=True, swizzle=6)
    sb = ir.Local("sb", ir.Space.SHARED, (stages * BOX_N * BOX_K,), stored=True, swizzle=6)
    maps = (ir.TensorMap("map_a", "A", (k, m), (1, k), (BOX_K, box_m), map_swizzle),
            ir.TensorMap("map_b", "B", (k, N), (1, k), (BOX_K, BOX_N), map_swizzle))
    return ir.KernelIR("tile_gemm", "float16", 32,
                       (ir.Param("C", ir.ParamKind.OUTPUT), ir.Param("A", ir.ParamKind.INPUT),
                        ir.Param("B", ir.ParamKind.INPUT)),
                       (sa, sb, *barriers, ir.Local("acc", ir.Space.REGISTER, (registers,))),
                       body, tensor_maps=maps)


SPECIALISED_K = 232  # four steps: two stages each filled twice, the empty barriers waited
TWO_CONSUMERS_M = 100  # the second consumer warpgroup's rows partial


def specialised_gemm(stages: int = 2, producer_waits: bool = True,
                     consumer_arrives: bool = True, wgmma_wait: bool = True,
                     cap: bool = True, pending: int = 0, released: int | None = None,
                     consumers: int = 1) -> ir.KernelIR:
    """:func:`tile_gemm`'s product, warp-specialised: warpgroup 1 gives registers up
    (setmaxnreg.dec) and its first thread, per step, waits until the stage is empty (the
    *empty* mbarrier's phase of the stage's previous round: none on the first), expects the
    step's bytes on the *full* mbarrier and starts both copies; warpgroup 0 takes registers
    (setmaxnreg.inc) and, per step, waits for the full phase, multiplies, waits for its MMAs
    and arrives (every thread) on the empty mbarrier. With ``pending`` 1 the consumer keeps
    a step's MMAs in flight: it waits until one group is pending and releases the stage of
    the step before (``released`` steps back: the wrong stage where it is not ``pending``).
    The flags remove one guard each; ``cap`` the register
    counts' rebalancing. ``consumers`` warpgroups each multiply 64 rows of A's box (the
    producer is the warpgroup after them), and all arrive on the empty mbarrier."""
    released = pending if released is None else released
    box_m, m = 64 * consumers, M if consumers == 1 else TWO_CONSUMERS_M
    producer_thread = consumers * ir.WARPGROUP
    ks = ir.Var("ks")
    stage = ir.Binary(ir.Op.MOD, ks, _int(stages))
    full, empty = ir.Load("full", stage), ir.Load("empty", stage)
    a_start = ir.Binary(ir.Op.MUL, stage, _int(box_m * BOX_K))
    b_start = ir.Binary(ir.Op.MUL, stage, _int(BOX_N * BOX_K))
    k0 = ir.Binary(ir.Op.MUL, ks, _int(BOX_K))
    round_parity = ir.Binary(ir.Op.MOD, ir.Binary(ir.Op.DIV, ks, _int(stages)), _int(2))
    before = ir.Binary(ir.Op.MOD, ir.Binary(ir.Op.ADD, ir.Binary(ir.Op.DIV, ks, _int(stages)),
                                            _int(1)), _int(2))
    steps = -(-SPECIALISED_K // BOX_K)
    issue = ir.Block((
        *((ir.MbarrierWait(empty, before),) if producer_waits else ()),
        ir.MbarrierArrive(full, (box_m + BOX_N) * BOX_K * 2),
        ir.TensorCopy(ir.Load("sa", a_start), "map_a", (k0, _int(0)), full),
        ir.TensorCopy(ir.Load("sb", b_start), "map_b", (k0, _int(0)), full)))
    produce = _loop("ks", steps, ir.If(ir.Binary(ir.Op.EQ, THREAD, _int(producer_thread)),
                                       issue))
    back = ir.Load("empty", ir.Binary(ir.Op.MOD, ir.Binary(ir.Op.ADD, ks, _int(
        stages - released)), _int(stages)))  # the stage of step ks - released
    release = ir.MbarrierArrive(back)
    if released:
        release = ir.If(ir.Binary(ir.Op.GE, ks, _int(released)), release)
    consume = _loop("ks", steps, ir.Block((
        ir.MbarrierWait(full, round_parity), *_mmas(a_start, b_start, box_m),
        *((ir.WarpgroupWait(pending),) if wgmma_wait else ()),
        *((release,) if consumer_arrives else ()))))
    registers = BOX_N // 2
    r = ir.Var("r")
    producer = ir.Block((*((ir.SetMaxRegisters(40, False),) if cap else ()), produce))
    consumer = ir.Block((*((ir.SetMaxRegisters(232, True),) if cap else ()),
                         _loop("r", registers, ir.Assign(ir.Load("acc", r), "=", ir.Float(0.0))),
                         consume, ir.WarpgroupWait(0), _store(registers, m)))
    body = ir.Block((
        _elected(*(ir.MbarrierInit(ir.Load(name, _int(s)), arrivals) for s in range(stages)
                   for name, arrivals in (("full", 1), ("empty", producer_thread)))),
        ir.Barrier(),
        ir.If(ir.Binary(ir.Op.GE, THREAD, _int(producer_thread)), producer, consumer)))
    return _kernel(body, stages, registers, SPECIALISED_K,
                   (ir.Local("full", ir.Space.MBARRIER, (stages,)),
                    ir.Local("empty", ir.Space.MBARRIER, (stages,))), m=m, box_m=box_m)


def _operands(k: int = K, m: int = M) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(39)  # small integers: every sum exact in float32
    return (generator.integers(-3, 4, (m, k)).astype(np.float16),
            generator.integers(-3, 4, (N, k)).astype(np.float16))


def _launch(k: int = K, threads: int = THREADS, m: int = M) -> Launch:
    a, b = _operands(k, m)
    return Launch("tile_gemm", (1, 1, 1), (threads, 1, 1),
                  (np.zeros(m * N, np.float16), a.ravel(), b.ravel()), 0, (m, N), "C")


def _expected(k: int = K, m: int = M) -> np.ndarray:
    a, b = _operands(k, m)
    return (a.astype(np.float32) @ b.astype(np.float32).T).astype(np.float16)


def _source(kernel: ir.KernelIR, cuda: bool, threads: int = THREADS) -> str:
    dialect, template = (CUDA, "kernel.cu.j2") if cuda else (OPENCL, "kernel.cl.j2")
    printer = Printer(kernel, dialect, (threads, 1, 1))
    return _templates().get_template(template).render(
        version="test", expression="C[m,n] = A[m,k]*B[n,k]", sizes="", merged="",
        dtype=kernel.dtype, precision="highest", layout="C", layout_note="", strategy="",
        params="", grid=[1, 1, 1], block=[threads, 1, 1], arguments=[],
        function=printer.function(), name=kernel.name,
        host_arguments=printer.arguments(host=True), grid_formulas=["1", "1", "1"],
        call_arguments=[p.name for p in kernel.params] + [m.name for m in kernel.tensor_maps],
        double=False, atomic_type="", output="C", zeroed_bytes=0, alignment=16,
        dynamic_shared=ir.dynamic_shared_bytes(kernel), parts=None, **printer.helpers())


@pytest.mark.parametrize("stages", [1, 2])
def test_tensor_copies_on_mbarriers_match_numpy_in_the_emulator_and_on_pocl(stages):
    kernel = tile_gemm(stages)
    result, found = emulate(kernel, _launch())
    assert found == []
    np.testing.assert_array_equal(result, _expected())
    np.testing.assert_array_equal(run_opencl(_source(kernel, cuda=False), _launch()),
                                  _expected())


@pytest.mark.parametrize(("guard", "hazard"), [
    ({"wait": False}, "unfinished tensor copy"),  # the MMAs read the boxes in flight
    ({"parity": False, "stages": 1}, "unfinished tensor copy"),  # step 2 waits for phase 0
    ({"wgmma_wait": False, "stages": 1}, "unfinished wgmma"),  # a copy over read operands
    ({"rewrite": True, "fence": False}, "missing proxy fence"),
    ({"arrive": False}, "mbarrier never completes"),  # nobody arrives: the phase never ends
])
def test_the_emulator_names_the_hazard_a_removed_guard_leaves(guard, hazard):
    found = {h.kind for h in emulate(tile_gemm(**guard), _launch())[1]}
    assert hazard in found, found
    if guard.get("rewrite"):  # with its fence the rewritten tile is read as it should be
        result, found = emulate(tile_gemm(rewrite=True), _launch())
        assert found == [] and np.array_equal(result, _expected())


def test_the_copy_engines_swizzle_is_the_tiles_and_the_descriptors():
    """The driver's swizzle of bytes (``CU_TENSOR_MAP_SWIZZLE_*``) places every 16-bit
    element of an atom where :func:`ir.swizzled` (the tiles, the printers, the bank counts)
    and so wgmma's descriptor modes place it; a map whose swizzle is not the tile's lands
    the box elsewhere, and the product is wrong."""
    for swizzle, bits in ((128, 3), (64, 2), (32, 1)):
        element = np.arange(8 * swizzle // 2 * 4)
        np.testing.assert_array_equal(tensor_map_swizzle(element * 2, swizzle) // 2,
                                      ir.swizzled(element, 6, 2, bits))
    result, found = emulate(tile_gemm(map_swizzle=0), _launch())
    assert found == [] and not np.array_equal(result, _expected())


def test_kernel_ir_with_tensor_copies_survives_storage():
    for kernel in (tile_gemm(), specialised_gemm()):
        assert serial.Decoder()(serial.encode(kernel)) == kernel


def test_the_twin_waits_with_a_barrier_and_cuda_says_ptx():
    kernel = tile_gemm()
    opencl, cuda = _source(kernel, cuda=False), _source(kernel, cuda=True)
    assert "map_a" not in opencl and "mbarrier" not in opencl
    assert opencl.count("barrier(CLK_LOCAL_MEM_FENCE)") >= 2
    for instruction in ("mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster",
                        "mbarrier.arrive.expect_tx.shared::cta.b64",
                        "mbarrier.try_wait.parity.shared::cta.b64",
                        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
                        "complete_tx::bytes", "const __grid_constant__ td_tensor_map map_a"):
        assert instruction in cuda, instruction


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_nvcc_builds_utmaldg_and_hgmma_for_sm_90a_with_no_ldg():
    (report,) = sass_report(_source(tile_gemm(), cuda=True), "sm_90")
    steps = -(-K // BOX_K)
    assert report.arch == "sm_90a" and report.mma == steps * BOX_K // 16
    assert report.bulk_copies == 2 * steps  # A's and B's box a step, nvcc unrolled the steps
    assert not report.global_load_widths  # no operand passes through registers


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_compiles_the_tensor_copies_for_sm_90a():
    ptx = compile_nvrtc(_source(tile_gemm(), cuda=True), "sm_90a")
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx


def test_unrolling_the_steps_rewrites_the_boxes_coordinates_and_the_phases_parity():
    """The unroller rewrites a bulk copy's coordinates and a wait's parity as it rewrites
    operands: the unrolled kernel copies the same boxes and computes the same tile."""
    kernel = tile_gemm(stages=1)
    unrolled = unroll(kernel, {"ks": (0, -(-K // BOX_K) - 1)}, {THREAD: (0, THREADS - 1)})
    copies = [s for s in ir.nested(unrolled.body) if isinstance(s, ir.TensorCopy)]
    waits = [s for s in ir.nested(unrolled.body) if isinstance(s, ir.MbarrierWait)]
    assert [c.coordinates[0] for c in copies] == [ir.Int(0), ir.Int(0), ir.Int(64), ir.Int(64)]
    assert [w.parity for w in waits] == [ir.Int(0), ir.Int(1)]
    result, found = emulate(unrolled, _launch())
    assert found == [] and np.array_equal(result, _expected())


SPECIALISED = {"k": SPECIALISED_K, "threads": 2 * ir.WARPGROUP}


@pytest.mark.parametrize(("stages", "pending", "consumers"), [(1, 0, 1), (2, 1, 1), (2, 1, 2)])
def test_warp_specialised_roles_run_at_once_in_the_emulator_and_step_by_step_on_pocl(
        stages, pending, consumers):
    """The producer's loop waits for the consumers' arrivals and theirs for the producer's
    copies: run one after the other they would wait for ever. The twin runs them a step at
    a time, between barriers."""
    kernel = specialised_gemm(stages, pending=pending, consumers=consumers)
    m = M if consumers == 1 else TWO_CONSUMERS_M
    threads = (consumers + 1) * ir.WARPGROUP
    launch = _launch(SPECIALISED_K, threads, m)
    result, found = emulate(kernel, launch)
    assert found == []
    np.testing.assert_array_equal(result, _expected(SPECIALISED_K, m))
    source = _source(kernel, cuda=False, threads=threads)
    np.testing.assert_array_equal(run_opencl(source, launch), _expected(SPECIALISED_K, m))


@pytest.mark.parametrize(("guard", "hazard"), [
    ({"consumer_arrives": False}, "mbarrier never completes"),  # the stage never empties
    ({"producer_waits": False}, "unfinished tensor copy"),  # a box over one in flight
    ({"wgmma_wait": False}, "unfinished wgmma"),  # arrived while its MMAs read the stage
    ({"pending": 1, "released": 0}, "unfinished wgmma"),  # released a stage still read
])
def test_the_emulator_names_the_hazard_a_removed_role_guard_leaves(guard, hazard):
    found = {h.kind for h in emulate(specialised_gemm(**guard), _launch(**SPECIALISED))[1]}
    assert hazard in found, found


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_nvcc_honours_setmaxnreg_in_both_roles():
    """Two consumer warpgroups and a producer (384 threads: 128 x 40 + 256 x 232 registers
    fit the 64K): under ``__launch_bounds__(384, 1)`` ptxas keeps both setmaxnreg
    (USETMAXREG in each branch) and says no C7508 (an info line, not a warning); HGMMA and
    UTMALDG as the plain kernel, no LDG. (Without the cap at entry, ``__launch_bounds__``
    of the threads alone, it drops both and says C7508: seen by hand with nvcc 13.0.)"""
    source = _source(specialised_gemm(consumers=2), cuda=True, threads=3 * ir.WARPGROUP)
    assert "__launch_bounds__(384, 1)" in source
    (report,) = sass_report(source, "sm_90")
    assert report.arch == "sm_90a" and report.register_limits == (40, 232)
    assert report.mma == -(-SPECIALISED_K // BOX_K) * BOX_K // 16
    assert report.bulk_copies and not report.global_load_widths
    with cubin(source) as (_, log):
        assert "C7508" not in log


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_compiles_the_warp_specialised_tile_for_sm_90a():
    ptx = compile_nvrtc(_source(specialised_gemm(), cuda=True, threads=2 * ir.WARPGROUP),
                        "sm_90a")
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232" in ptx


def test_the_twin_refuses_roles_that_loop_over_different_steps():
    """The twin interleaves the roles' loops a step at a time: roles whose loops differ
    have no such twin, and printing one says so."""
    kernel = specialised_gemm()
    split = kernel.body.body[-1]
    producer, consumer = split.then, split.otherwise
    shorter = replace(producer.body[-1], condition=ir.Binary(ir.Op.LT, ir.Var("ks"), _int(2)))
    body = replace(kernel.body, body=(*kernel.body.body[:-1], replace(
        split, then=ir.Block((*producer.body[:-1], shorter)), otherwise=consumer)))
    with pytest.raises(TredudaError, match="same steps"):
        _source(replace(kernel, body=body), cuda=False, threads=2 * ir.WARPGROUP)

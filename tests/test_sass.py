"""SASS reports: parsing hand-written listings (always runs), real compiles where CUDA is."""

from __future__ import annotations

import pytest

import treduda
from treduda.errors import BackendUnavailable, CompileError
from treduda.model.prediction import MmaEconomy, mma_economy
from treduda.run import nvcc, sass
from treduda.run.nvcc import nvcc_available
from treduda.run.sass import SassReport, find_disassembler, parse_sass, sass_report

needs_cuda = pytest.mark.skipif(
    not (nvcc_available() and find_disassembler()),
    reason="nvcc and nvdisasm (CUDA toolkit) not installed",
)

# A staged GEMM as cuobjdump -sass prints it: an outer loop over k tiles (global loads,
# shared stores, two barriers) around an inner loop of shared loads and FFMAs.
LISTING = """\

\tcode for sm_90
\t\tFunction : _Z4gemmPKfS0_Pf
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;               /* 0x00000a00ff017b82 */
                                                                        /* 0x000fe20000000800 */
        /*0010*/                   S2R R9, SR_TID.Y ;                   /* 0x0000000000097919 */
                                                                        /* 0x000e220000002200 */
        /*0020*/                   HFMA2.MMA R32, -RZ, RZ, 0, 0 ;       /* 0x00000000ff207435 */
                                                                        /* 0x000fe200000001ff */
        /*0030*/                 LDG.E.128.CONSTANT R4, desc[UR6][R24.64] ; /* 0x0000000618047981 */
                                                                        /* 0x000ea2000c1e9d00 */
        /*0040*/                   LDG.E.CONSTANT R8, desc[UR6][R22.64] ;  /* 0x0000000616087981 */
                                                                        /* 0x000ee8000c1e9900 */
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;        /* 0x0000000000007b1d */
                                                                        /* 0x000fec0000010000 */
        /*0060*/                   STS.128 [R6], R4 ;                   /* 0x0000000406007388 */
                                                                        /* 0x004fe80000000c00 */
        /*0070*/                   STS [R7], R8 ;                       /* 0x0000000807007388 */
                                                                        /* 0x008fe80000000800 */
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;        /* 0x0000000000007b1d */
                                                                        /* 0x000fec0000010000 */
        /*0090*/                   LDS R12, [R0] ;                      /* 0x00000000000c7984 */
                                                                        /* 0x000e280000000800 */
        /*00a0*/                   LDS.64 R14, [R7+0x40] ;              /* 0x00004000070e7984 */
                                                                        /* 0x000e680000000a00 */
        /*00b0*/                   FFMA R30, R12, R14, R30 ;            /* 0x0000000e0c1e7223 */
                                                                        /* 0x001fe2000000001e */
        /*00c0*/                   FFMA R31, R12, R15, R31 ;            /* 0x0000000f0c1f7223 */
                                                                        /* 0x000fe2000000001f */
        /*00d0*/                   FFMA R32, R13, R14, R32 ;            /* 0x0000000e0d207223 */
                                                                        /* 0x000fe20000000020 */
        /*00e0*/                   IADD3 R0, R0, 0x4, RZ ;              /* 0x0000000400007810 */
                                                                        /* 0x000fc80007ffe0ff */
        /*00f0*/                   ISETP.NE.AND P1, PT, R0, R2, PT ;    /* 0x000000020000720c */
                                                                        /* 0x000fda0003f25270 */
        /*0100*/               @P1 BRA 0x90 ;                           /* 0xfffffffc00e01947 */
                                                                        /* 0x000fea000383ffff */
        /*0110*/                   UIADD3 UR4, UR4, 0x1, URZ ;          /* 0x0000000104047890 */
                                                                        /* 0x000fc8000fffe03f */
        /*0120*/                   ISETP.NE.AND P0, PT, R3, UR4, PT ;   /* 0x0000000403007c0c */
                                                                        /* 0x000fda000bf05270 */
        /*0130*/              @!P0 BRA 0x30 ;                           /* 0xfffffffc00bc8947 */
                                                                        /* 0x000fea000383ffff */
        /*0140*/                   STG.E desc[UR6][R10.64], R30 ;       /* 0x0000001e0a007986 */
                                                                        /* 0x000fe2000c101906 */
        /*0150*/                   STG.E.64 desc[UR6][R10.64+0x40], R31 ;  /* 0x0000401f0a007986 */
                                                                        /* 0x000fe2000c101b06 */
        /*0160*/                   EXIT ;                               /* 0x000000000000794d */
                                                                        /* 0x000fea0003800000 */
        /*0170*/                   BRA 0x170;                           /* 0xfffffffc00fc7947 */
                                                                        /* 0x000fc0000383ffff */
        /*0180*/                   NOP;                                 /* 0x0000000000007918 */
                                                                        /* 0x000fc00000000000 */
\t\t..........


\t\tFunction : copy_bytes
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDG.E.U8.CONSTANT R2, desc[UR4][R2.64] ; /* 0x0000000402027981 */
        /*0010*/                   LDG.E.LTC128B.S16 R3, desc[UR4][R4.64] ; /* 0x0000000404037981 */
        /*0020*/                   DFMA R6, R2, R2, R6 ;                /* 0x0000000202067228 */
        /*0030*/                   STG.E.U8 desc[UR4][R4.64], R2 ;      /* 0x0000000204007986 */
        /*0040*/                   EXIT ;                               /* 0x000000000000794d */
        /*0050*/                   BRA 0x50;                            /* 0xfffffffc00fc7947 */
\t\t..........
"""

# The same inner loop as nvdisasm -c prints it: branch targets are labels.
NVDISASM = """\
//--------------------- .text.loop_k             --------------------------
\t.section\t.text.loop_k,"ax",@progbits
loop_k:
.text.loop_k:
        /*0000*/                   MOV R0, RZ ;
.L_x_0:
        /*0010*/                   FFMA R2, R3, R4, R2 ;
        /*0020*/                   FFMA R5, R3, R4, R5 ;
        /*0030*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0040*/              @P0 BRA `(.L_x_0) ;
        /*0050*/                   EXIT ;
.L_x_1:
        /*0060*/                   BRA `(.L_x_1);
"""


# A tensor-core main loop as nvdisasm prints it: two ldmatrix.x4 (one transposed), a cp.async of
# 16 bytes per thread, four MMAs and the loop's counter and branch.
MMA_LOOP = """\
//--------------------- .text.mma_k              --------------------------
mma_k:
        /*0000*/                   MOV R0, RZ ;
.L_x_0:
        /*0010*/                   LDSM.16.M88.4 R4, [R2] ;
        /*0020*/                   LDSM.16.MT88.4 R8, [R3] ;
        /*0030*/                   LDGSTS.E.BYPASS.LTC128B.128 [R5], desc[UR4][R6.64] ;
        /*0040*/                   HMMA.16816.F32 R12, R4, R8, R12 ;
        /*0050*/                   HMMA.16816.F32 R16, R4, R10, R16 ;
        /*0060*/                   HMMA.16816.F32 R20, R6, R8, R20 ;
        /*0070*/                   HMMA.16816.F32 R24, R6, R10, R24 ;
        /*0080*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0090*/              @P0 BRA `(.L_x_0) ;
        /*00a0*/                   EXIT ;
"""


def test_a_tensor_core_loop_counts_instructions_and_shared_bytes_per_mma() -> None:
    report = parse_sass(MMA_LOOP, "sm_90")[0]
    assert (report.main_loop_instructions, report.main_loop_mma) == (9, 4)
    assert report.non_mma_per_mma == pytest.approx(5 / 4)
    assert report.shared_bytes_per_mma == (512 + 512 + 512) / 4  # two x4 matrices, one copy
    assert report.non_fma_per_fma is None
    kinds = report.main_loop_kinds()
    assert kinds["tensor core"] == {"HMMA": 4} and kinds["shared memory"] == {"LDSM": 2}
    assert kinds["async copy"] == {"LDGSTS": 1} and kinds["integer and other"] == {"IADD3": 1}


# MMA_LOOP's kernel with a write after it: a partial tile's loop of one 16-bit STG and, where
# the tile is whole (P3), a loop of two.
WRITTEN = MMA_LOOP.replace("        /*00a0*/                   EXIT ;\n", """\
        /*00a0*/              @P3 BRA `(.L_x_3) ;
.L_x_2:
        /*00b0*/                   STG.E.U16 desc[UR4][R2.64], R3 ;
        /*00c0*/              @P2 BRA `(.L_x_2) ;
        /*00d0*/                   EXIT ;
.L_x_3:
        /*00e0*/                   STG.E.U16 desc[UR4][R2.64], R3 ;
        /*00f0*/                   STG.E.U16 desc[UR4][R2.64+0x2], R4 ;
        /*0100*/              @P1 BRA `(.L_x_3) ;
        /*0110*/                   EXIT ;
""")


def test_loops_say_what_they_hold_and_a_block_executes_each_as_often_as_it_runs() -> None:
    """The economy tables' exec/out (benchmarks/executed_instructions.py): code outside loops
    once, the MMA loop as often as the warp's MMAs take, the write loop that stores the most
    a pass as often as the thread's outputs take, the partial tile's write loop never."""
    import importlib.util
    from pathlib import Path

    report = parse_sass(WRITTEN, "sm_90")[0]
    assert [(loop.start, loop.end, loop.instructions, loop.mma, loop.store_bits)
            for loop in report.loops] == [(0x10, 0x90, 9, 4, 0), (0xb0, 0xc0, 2, 0, 16),
                                          (0xe0, 0x100, 3, 0, 32)]
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "executed_instructions.py"
    spec = importlib.util.spec_from_file_location("executed_instructions", path)
    executed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(executed)
    # 8 passes of 4 MMAs; 16 outputs of 16 bits a thread, 2 a pass: 8 passes
    per_warp = 18 + 9 * 7 + 3 * 7 - 2
    assert executed.warp_instructions_per_output(report, 32, 256, 2, 64) == 2 * per_warp / 64
    # the full tile's loop as nvcc may close it: its threads past the tile exit inside it, and
    # the branch back follows the guarded EXIT (no out-of-line return)
    exiting = parse_sass(WRITTEN.replace("@P1 BRA `(.L_x_3) ;", "@!P1 EXIT ;").replace(
        "/*0110*/                   EXIT ;", "/*0110*/                   BRA `(.L_x_3) ;"),
        "sm_90")[0]
    assert exiting.loops[-1] == sass.SassLoop(0xe0, 0x110, 4, 0, 32)
    assert exiting.main_loop_instructions == report.main_loop_instructions


# The same loop as ptxas writes it where a cp.async follows a generic shared store: three
# ``@!PT LDS RZ, [RZ]`` before the LDGSTS, guarded by "not true"; and after the loop a branch
# back that is never taken (it closes no loop).
PLACEHOLDERS = MMA_LOOP.replace(
    "        /*0030*/                   LDGSTS",
    "        /*0022*/              @!PT LDS RZ, [RZ] ;\n"
    "        /*0024*/              @!PT LDS RZ, [RZ] ;\n"
    "        /*0026*/              @!PT LDS RZ, [RZ] ;\n"
    "        /*0030*/                   LDGSTS").replace(
    "        /*00a0*/                   EXIT",
    "        /*0098*/              @!PT BRA `(.L_x_0) ;\n"
    "        /*00a0*/                   EXIT")


def test_never_executed_instructions_are_issued_but_counted_apart() -> None:
    plain, guarded = parse_sass(MMA_LOOP, "sm_90")[0], parse_sass(PLACEHOLDERS, "sm_90")[0]
    # issued: in the instruction totals and the instructions beside each MMA
    assert (guarded.instructions, guarded.main_loop_instructions) == (15, 12)
    assert guarded.non_mma_per_mma == pytest.approx(8 / 4)
    assert guarded.never_executed == 4
    assert guarded.main_loop_never_executed == {"LDS": 3}
    # but no loads: every count by kind, width or bytes is the plain loop's
    assert guarded.shared_bytes_per_mma == plain.shared_bytes_per_mma
    assert guarded.main_loop_opcodes == plain.main_loop_opcodes
    assert guarded.shared_load_widths == plain.shared_load_widths == {}
    assert guarded.main_loop_shared_load_widths == {}
    assert "LDS" not in guarded.main_loop_load_use
    kinds = guarded.main_loop_kinds()
    assert kinds["never executed"] == {"LDS": 3}
    assert kinds["shared memory"] == {"LDSM": 2}
    assert sum(sum(k.values()) for k in kinds.values()) == guarded.main_loop_instructions
    assert "never executed: 4" in str(guarded) and "never" not in str(plain)


def test_parse_listing_counts_the_whole_kernel() -> None:
    gemm, copy = parse_sass(LISTING, "sm_90")
    assert gemm.kernel == "gemm" and gemm.arch == "sm_90"
    assert gemm.instructions == 23  # the trailing BRA-to-itself and NOP are padding
    assert gemm.ffma == 3  # HFMA2.MMA zeroes a register; it is not an FMA
    assert gemm.global_load_widths == {32: 1, 128: 1}
    assert gemm.shared_store_widths == {32: 1, 128: 1}
    assert gemm.shared_load_widths == {32: 1, 64: 1}
    assert gemm.global_store_widths == {32: 1, 64: 1}
    assert gemm.barriers == 2
    assert gemm.read_only_loads == 2
    assert copy.kernel == "copy_bytes"
    assert copy.global_load_widths == {8: 1, 16: 1}  # .LTC128B is a cache hint, not a width
    assert copy.global_store_widths == {8: 1}
    assert copy.ffma == 1 and copy.shared_load_widths == {} and copy.barriers == 0
    assert copy.read_only_loads == 1  # the byte load; the 16-bit one is not .CONSTANT


def test_main_loop_is_the_innermost_loop_with_the_most_fmas() -> None:
    gemm = parse_sass(LISTING, "sm_90")[0]
    # Both loops hold the 3 FFMAs; the inner one, [0x90, 0x100], is the main loop.
    assert (gemm.main_loop_instructions, gemm.main_loop_ffma) == (8, 3)
    assert gemm.ffma_share == pytest.approx(3 / 8)


# The same kernel where ptxas spilled: the inner loop reloads two spilled values (LDL, LDL.64)
# and a third is stored once before it (STL).
SPILLED = (LISTING.replace("LDS R12, [R0] ;", "LDL R12, [R1+0x8] ;")
           .replace("LDS.64 R14, [R7+0x40] ;", "LDL.64 R14, [R1+0x10] ;")
           .replace("STS [R7], R8 ;", "STL [R1+0x8], R8 ;"))


def test_the_main_loops_local_bytes_are_its_spill_traffic() -> None:
    # per thread and pass of the loop: 4 + 8 bytes loaded; the store outside it moves once
    assert parse_sass(SPILLED, "sm_90")[0].main_loop_local_bytes == 12
    assert parse_sass(LISTING, "sm_90")[0].main_loop_local_bytes == 0


def test_without_a_loop_the_share_is_over_the_whole_kernel() -> None:
    copy = parse_sass(LISTING, "sm_90")[1]
    assert (copy.instructions, copy.main_loop_instructions, copy.main_loop_ffma) == (5, 5, 1)
    assert copy.ffma_share == pytest.approx(1 / 5)
    assert parse_sass("", "sm_90") == []


# A single-step reduction as nvdisasm prints it: a copy loop with no FFMA, then the unrolled
# FFMAs outside every loop, for full blocks and (after the branch) for edge blocks.
ONE_STEP = """\
//--------------------- .text.one_step           --------------------------
one_step:
        /*0000*/                   MOV R0, RZ ;
.L_x_0:
        /*0010*/                   LDG.E R6, desc[UR4][R8.64] ;
        /*0020*/                   STS [R0], R6 ;
        /*0030*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0040*/              @P0 BRA `(.L_x_0) ;
        /*0050*/              @P1 BRA `(.L_x_1) ;
        /*0060*/                   LDS R3, [R0] ;
        /*0070*/                   FFMA R2, R3, R4, R2 ;
        /*0080*/                   FFMA R5, R3, R4, R5 ;
        /*0090*/                   EXIT ;
.L_x_1:
        /*00a0*/                   FFMA R2, R3, R4, R2 ;
        /*00b0*/                   EXIT ;
"""


def test_without_an_fma_loop_the_main_code_is_the_straight_run_with_the_most_fmas() -> None:
    # The copy loop holds no FFMA; of the straight runs, the full blocks' one (no test
    # inside) has 2 FFMAs, the edge blocks' one 1.
    (report,) = parse_sass(ONE_STEP, "sm_90")
    assert (report.main_loop_instructions, report.main_loop_ffma) == (4, 2)
    assert report.ffma_share == pytest.approx(2 / 4)


SPIN_RETRY = """\
//--------------------- .text.unrolled           --------------------------
unrolled:
        /*0000*/                   MOV R0, RZ ;
.L_x_0:
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+UR6], R2 ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0030*/                   FFMA R2, R3, R4, R2 ;
        /*0040*/                   FFMA R5, R3, R4, R5 ;
        /*0050*/                   STS [R0], R2 ;
        /*0060*/                   STS [R0+0x4], R5 ;
        /*0070*/                   EXIT ;
.L_x_1:
        /*0080*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R3+UR6], R2 ;
        /*0090*/              @!P0 BRA `(.L_x_1) ;
        /*00a0*/                   BRA `(.L_x_2) ;
"""


# A one-step warpgroup kernel as nvdisasm prints it (tccg_42's, cut short): the step's copy,
# its two HGMMAs and their wait, then the C tile's stores, with no loop.
ONE_STEP_WGMMA = """\
//--------------------- .text.one_step_wgmma     --------------------------
one_step_wgmma:
        /*0000*/                   LDGSTS.E.BYPASS.128 [R17], desc[UR8][R4.64] ;
        /*0010*/                   LDGDEPBAR ;
        /*0020*/                   DEPBAR.LE SB0, 0x0 ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0040*/                   WARPGROUP.ARRIVE ;
        /*0050*/                   HGMMA.64x256x16.F32 R24, gdesc[UR12].tnspB, RZ, !UPT ;
        /*0060*/                   HGMMA.64x256x16.F32 R24, gdesc[UR12].tnspB, R24, gsb0 ;
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0080*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0090*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00a0*/                   STS.64 [R2], R24 ;
        /*00b0*/                   STS.64 [R2+0x2100], R26 ;
        /*00c0*/                   EXIT ;
"""


def test_without_a_loop_the_main_body_of_wgmmas_ends_at_their_wait() -> None:
    """What follows the wait for the last wgmma writes the C tile, after the main body as
    after a loop: the body's per-MMA figures are a step's."""
    (report,) = parse_sass(ONE_STEP_WGMMA, "sm_90a")
    assert not report.looped and report.main_loop_instructions == 9
    assert report.non_mma_per_mma == pytest.approx(7 / 2)
    assert "STS" not in report.main_loop_opcodes


def test_mma_economy_is_per_multiply_add_of_the_mmas_shapes() -> None:
    """Instructions and shared bytes beside the MMAs per multiply-add a warp's MMAs do, read
    from their shapes: an m16n8k16 does 2048, a warpgroup's 64x256x16 a quarter of its
    262144 per warp; an m16n8k8 loop issuing as much per MMA does half the work per
    instruction, so its economy is twice as dear."""
    loop = parse_sass(MMA_LOOP, "sm_90")[0]
    assert loop.main_loop_mma_macs == 4 * 2048
    assert mma_economy(loop) == MmaEconomy(5 / (4 * 2048), 1536 / (4 * 2048))
    wgmma = parse_sass(ONE_STEP_WGMMA, "sm_90a")[0]
    assert wgmma.main_loop_mma_macs == 2 * 64 * 256 * 16 // 4
    halved = parse_sass(MMA_LOOP.replace("HMMA.16816", "HMMA.1688"), "sm_90")[0]
    assert mma_economy(halved) == MmaEconomy(10 / (4 * 2048), 3072 / (4 * 2048))
    assert mma_economy(loop) < mma_economy(halved)
    unknown = parse_sass(MMA_LOOP.replace("HMMA.16816.F32 R12", "HMMA.SP.F32 R12"), "sm_90")
    assert unknown[0].main_loop_mma == 4 and mma_economy(unknown[0]) is None
    assert mma_economy(parse_sass(LISTING, "sm_90")[0]) is None  # FFMA, no MMA


def test_an_out_of_line_retry_returning_over_an_exit_closes_no_loop() -> None:
    """nvcc places an mbarrier wait's retry after the kernel's EXIT, branching back into
    it: no loop spans the kernel from the wait on, the FFMAs' straight run is the main
    code."""
    (report,) = parse_sass(SPIN_RETRY, "sm_90")
    assert not report.looped and report.main_loop_instructions == 5


def test_nvdisasm_labels_delimit_loops() -> None:
    (report,) = parse_sass(NVDISASM, "sm_80")
    assert (report.kernel, report.arch, report.instructions) == ("loop_k", "sm_80", 6)
    assert (report.main_loop_instructions, report.main_loop_ffma) == (4, 2)


def test_str_summarises() -> None:
    text = str(parse_sass(LISTING, "sm_90")[0])
    assert text.splitlines()[0] == "gemm (sm_90): 23 SASS instructions, 3 FFMA/DFMA, 2 barriers"
    assert "38% FMA" in text and "1 x 32-bit, 1 x 128-bit (2 read-only)" in text
    assert "main loop" in text and parse_sass(LISTING, "sm_90")[0].looped
    second = parse_sass(LISTING, "sm_90")[1]
    assert "main body" in str(second) and not second.looped


def test_missing_tools_raise_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sass, "find_disassembler", lambda: "/usr/bin/nvdisasm")
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: None)
    with pytest.raises(BackendUnavailable, match="nvcc was not found"):
        sass_report("__global__ void k() {}")
    monkeypatch.setattr(sass, "find_disassembler", lambda: None)
    with pytest.raises(BackendUnavailable, match="nvdisasm"):
        sass_report("__global__ void k() {}")


def test_invalid_arch_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match="invalid CUDA architecture"):
        sass_report("__global__ void k() {}", arch="90")


VECTOR_LOAD = """\
__global__ void scale4(const float4* __restrict__ in, float4* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float4 v = in[i];
    out[i] = make_float4(2.0f * v.x, 2.0f * v.y, 2.0f * v.z, 2.0f * v.w);
}
"""

FMA_LOOP = """\
__global__ void fma_chain(float* out, float x, int n) {
    float a = x, b = x + 1.0f, c = x + 2.0f, d = x + 3.0f;
    for (int t = 0; t < n; ++t) {
        #pragma unroll
        for (int u = 0; u < 16; ++u) {
            a = a * b + c; b = b * c + d; c = c * d + a; d = d * a + b;
        }
    }
    out[threadIdx.x] = a + b + c + d;
}
"""

SHARED = """\
__global__ void transpose(const float* __restrict__ in, float* __restrict__ out) {
    __shared__ float tile[32][33];
    tile[threadIdx.y][threadIdx.x] = in[threadIdx.y * 32 + threadIdx.x];
    __syncthreads();
    out[threadIdx.y * 32 + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
"""


@needs_cuda
def test_float4_load_is_one_128_bit_ldg() -> None:
    (report,) = sass_report(VECTOR_LOAD)
    assert report.kernel == "scale4" and report.arch == "sm_90"
    assert report.global_load_widths == {128: 1}
    assert report.global_store_widths == {128: 1}


@needs_cuda
def test_register_fma_loop_is_mostly_ffma() -> None:
    (report,) = sass_report(FMA_LOOP, "sm_80")
    assert report.main_loop_ffma >= 64
    assert report.ffma_share > 0.5


@needs_cuda
def test_shared_memory_and_barrier() -> None:
    (report,) = sass_report(SHARED)
    assert report.shared_load_widths and report.shared_store_widths
    assert report.barriers >= 1


@needs_cuda
def test_compile_failure_raises_compile_error() -> None:
    with pytest.raises(CompileError, match="broken"):
        sass_report("__global__ void broken(float* p) { p[0] = undefined_name; }")


@needs_cuda
def test_treduda_tiled_staged_gemm() -> None:
    kernel = treduda.compile(
        "C[i,j] = A[i,k]*B[k,j]", {"i": 256, "j": 256, "k": 256}, strategy="tiled+staged",
        params={"block_x": 16, "block_y": 16, "reg_x": 4, "reg_y": 4, "step": 16},
    )
    (report,) = sass_report(kernel.cuda_source)
    assert isinstance(report, SassReport) and report.kernel == kernel.name
    assert report.ffma > 0 and report.main_loop_ffma > 0
    assert report.barriers >= 2
    assert sum(report.shared_load_widths.values()) > 0


@needs_cuda
def test_a_threads_neighbours_in_global_memory_move_in_vector_accesses() -> None:
    """The kernel IR moves the four adjacent values of a thread's register tile along x (B's
    loads, C's stores) in one vector access each, read-only loads kept (.CONSTANT); left to
    nvcc, which cannot prove the pointers aligned, all 64 loads of B in a step and all 16
    stores were 32-bit."""
    kernel = treduda.compile(
        "C[i,j] = A[i,k]*B[k,j]", {"i": 256, "j": 256, "k": 256}, strategy="tiled+staged",
        params={"order": "j,i", "block_x": 16, "reg_x": 4, "assign_x": "adjacent",
                "block_y": 8, "reg_y": 4, "step": 16, "stage": "A"},
    )
    report = kernel.sass_report()
    assert report.global_load_widths[128] == 16  # one per summed value of a step
    assert report.global_store_widths == {128: 4}
    assert report.read_only_loads == sum(report.global_load_widths.values())


def test_load_to_use_distances_of_the_main_loop() -> None:
    # In LISTING's inner loop, LDS R12 is read by the FFMA two instructions on, and LDS.64's
    # R14 by the next one (its second register, R15, one later); IADD3 reads only R0.
    gemm = parse_sass(LISTING, "sm_90")[0]
    assert gemm.main_loop_load_use == {"LDS": 1.5}
    assert "LDS 1.5 instructions" in str(gemm)
    # a load whose value the loop body never reads is left out; a store reads its value
    loop = [sass._Instruction(0, "LDG.E.128", None, " R4, desc[UR4][R2.64]"),
            sass._Instruction(1, "FFMA", None, " R4, R8, R9, R10"),
            sass._Instruction(2, "STS.128", None, " [R0], R4"),
            sass._Instruction(3, "LDS", None, " R20, [R0]"),
            sass._Instruction(4, "LDS", None, " R21, [R0+0x4]"),
            sass._Instruction(5, "FFMA", None, " R22, R21, R21, R22")]
    assert sass._load_use(loop) == {"LDG": 2, "LDS": 1}


@needs_cuda
def test_only_the_sources_asked_for_are_disassembled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor-core model reads no SASS: ptxas's check of its kernels leaves the cubin
    undisassembled (nvdisasm spends a third of a CPU second on any cubin)."""
    shared, vector = (source.replace("(", "_asked(", 1) for source in (SHARED, VECTOR_LOAD))
    ran = []
    monkeypatch.setattr(sass, "run_tool", lambda command, failure: ran.append(command) or
                        nvcc.run_tool(command, failure))
    [[read], [unread]] = sass.compile_with_sass([shared, vector], "sm_80", [shared])
    assert read.sass is not None and read.sass.barriers >= 1
    assert unread.sass is None and unread.ptxas.registers > 0
    nvcc_alone = sass.compile_with_sass([vector], "sm_80", ())
    assert nvcc_alone[0][0].sass is None and len(ran) == 1  # shared's cubin alone


@needs_cuda
def test_a_kernel_compiled_again_is_neither_compiled_nor_disassembled_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The search's check, a model's refinement and a SASS report compile the same kernel:
    nvcc and nvdisasm run once for it, the reports are the same, and the check reads ptxas's
    log once."""
    source = FMA_LOOP.replace("fma_chain", "fma_chain_again")
    first = sass_report(source, "sm_86")
    ran, parsed = [], []
    monkeypatch.setattr(nvcc, "run_tool", lambda command, failure: ran.append(command))
    monkeypatch.setattr(sass, "run_tool", lambda command, failure: ran.append(command))
    assert sass_report(source, "sm_86") == first
    monkeypatch.setattr(sass, "parse_ptxas", lambda log: parsed.append(log) or
                        nvcc.parse_ptxas(log))
    assert sass.compile_with_sass([source], "sm_86")[0][0].sass == first[0]
    assert ran == [] and len(parsed) == 1

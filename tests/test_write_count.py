"""The tensor-core kernels' write (the C tile to the output): dealt so that no iteration
divides by the tile's row, unrolled whole by the kernel IR where a division reads the
write's loops and a thread stores up to :data:`WHOLE_WRITE` elements, else nvcc's loop, and
counted from its statement by the models
(:meth:`Builder.write_instructions`), checked against the PoCL run, the emulator and the
SASS."""

from __future__ import annotations

import re
import subprocess

import pytest
from treduda.strategies.tensorcore_kernel import Builder
from treduda.strategies.warpgroup_kernel import WarpgroupBuilder

import treduda
from treduda.codegen import ir
from treduda.codegen.simplify import plus, quotient, remainder, times
from treduda.frontend import dtypes
from treduda.model import iteration
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import cubin, nvcc_available
from treduda.run.sass import find_disassembler
from treduda.suites import load

GEMM = "C[i,j] = A[i,k] * B[k,j]"
TCCG = {r.id: r for r in load("tccg_fp16")}
# two consumer warpgroups (256 threads) and 192 columns: 64 threads a row, three stores a
# pass
WIDE = {"warpgroups": 2, "frags_m": 1, "tile_n": 192, "frags_k": 1, "split": 1, "stages": 2,
        "async_copy": True, "staged_b": False, "tma": True, "producer": True,
        "free_layout": "group"}


def _divisors(e: ir.Expr) -> set[int]:
    """The constants ``e`` divides by or takes a remainder of."""
    found = set()
    if isinstance(e, ir.Binary):
        found = _divisors(e.left) | _divisors(e.right)
        if e.op in (ir.Op.DIV, ir.Op.MOD) and isinstance(e.right, ir.Int):
            found.add(e.right.value)
    return found


def test_an_unrolled_copy_divides_once_what_its_constants_leave():
    """A division and its remainder beside it: 3 + 1, each with the sum it divides; by a
    power of two a shift; the same division in two copies once."""
    b = ir.Var("b")
    m = plus(times(64, b), ir.Int(5))
    assert iteration.divisions([quotient(m, 480), remainder(m, 480)]) == 3 + 1 + 1 + 1
    assert iteration.divisions([quotient(b, 480), quotient(b, 480)]) == 3 + 1
    assert iteration.divisions([quotient(m, 64)]) == 1 + 1
    assert iteration.divisions([plus(times(2, b), ir.Int(1))]) == 0


def test_a_row_of_192_is_written_without_dividing_by_it():
    """256 threads write a row of 192 positions 64 threads at a time, three stores a pass
    (the element ``e = 256 c + t`` took ``e / 192`` and ``e mod 192`` in each iteration):
    the write's indices divide by no 192, and partial tiles match numpy.einsum on PoCL and
    on the emulator, without hazards."""
    kernel = treduda.compile(GEMM, {"i": 150, "j": 232, "k": 40}, dtype="bfloat16",
                             strategy="warpgroup", params=WIDE)
    builder = WarpgroupBuilder(plan(GEMM, {"i": 150, "j": 232, "k": 40}, "C", "bfloat16"),
                               WIDE)  # bfloat16: a value at a time (write_vector)
    write = builder.write_statement()
    assert not write.divides and not write.whole  # 96 stores a thread, nvcc's loop
    assert not any(192 in _divisors(i) for a in write.accesses for i in a.indices)
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


# The bytes of a global store by its opcode's width suffix (none: 32 bits)
STORE_BYTES = {".U16": 2, ".64": 8, ".128": 16}


def _sass_per_element(kernel: treduda.Kernel, arch: str) -> float:
    """SASS instructions after the kernel's last barrier (the write, unrolled whole) per
    output element its global stores write (a vector store several)."""
    disassembler = find_disassembler()
    with cubin(kernel.cuda_source, arch) as (binary, _):
        listing = subprocess.run([disassembler, "-c" if "nvdisasm" in disassembler
                                  else "-sass", str(binary)],
                                 capture_output=True, text=True, check=True).stdout
    opcodes = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)",
                         listing)
    last = max(n for n, op in enumerate(opcodes) if op.startswith("BAR"))
    end = len(opcodes)
    while opcodes[end - 1] in ("NOP", "BRA"):
        end -= 1
    written = opcodes[last + 1:end]
    assert not any(op.startswith("BRA") for op in written)  # no loop: unrolled whole
    stored = sum(next((b for suffix, b in STORE_BYTES.items() if op.endswith(suffix)), 4)
                 for op in written if op.startswith("STG"))
    return len(written) * dtypes.itemsize(kernel.dtype) / stored


@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
@pytest.mark.parametrize(("row", "strategy", "params", "arch"), [
    # tccg_33's warpgroup 128 x 256 tile: 16 stores of 8 halves a thread, M's digits (by
    # 480) a division a copy as printed, one a thread simplified; SASS 1.38 an element,
    # counted 1.27 (a value at a time: 128 stores, SASS 4.0, counted 4.3; a loop of 13.9
    # an element before, counted 6)
    ("tccg_33", "warpgroup", {**WIDE, "tile_n": 256, "frags_k": 2, "tma": False,
                              "producer": False}, "sm_90a"),
    # tccg_35's mma.sync pick (divisions by 24, 20 and 240), 8 halves a store: SASS 1.4,
    # counted 2.1 (a value at a time: 5.2, counted 5.3)
    pytest.param("tccg_35", "tensorcore",
                 {"warps_m": 2, "warps_n": 3, "frags_m": 4, "frags_n": 4, "frags_k": 2,
                  "stages": 2, "split": 1, "mapping": "mma", "shared_layout": "pad",
                  "free_layout": "full", "async_copy": True}, "sm_80",
                 marks=pytest.mark.matrix),
])
def test_the_count_is_the_sass_of_the_write(row, strategy, params, arch):
    """The models' count of the write per element (:meth:`Builder.write_instructions`) is
    its SASS's within 1.5 instructions, where the write is unrolled whole."""
    case = TCCG[row]
    kernel = treduda.compile(case.expression, case.sizes, dtype="float16", layout=case.layout,
                             strategy=strategy, params=params)
    builder = (WarpgroupBuilder if strategy == "warpgroup" else Builder)(
        plan(case.expression, case.sizes, case.layout, "float16"), params)
    assert builder.write_statement().whole
    assert builder.write_instructions() == pytest.approx(_sass_per_element(kernel, arch),
                                                         abs=1.5)


def test_a_write_no_division_reads_is_left_to_nvcc():
    """A write whose indices divide neither ``c`` nor ``j`` stays the loop over ``c``,
    which nvcc unrolls (whole, or in copies with the steps folded into the stores'
    offsets), counted as unrolled: GEMM's 256 x 192 warpgroup tile in bfloat16 (192 stores
    a thread, SASS 3.6-3.9 an element; 28.75 dividing by 192 each element; float16's takes
    vectors of 8, 24 a thread unrolled whole, SASS 2.6) and its 128 x 256 mma.sync
    tile (16 stores of 8 halves, :func:`.tensorcore_tiles.write_vector`: SASS 0.94 an
    element, 119 instructions after the last barrier; a value at a time, 128 stores took
    3.44 as nvcc's loop of 16 copies, 3.88 unrolled by the kernel IR, which also cost
    tccg_02's main loop 0.24 instructions per MMA)."""
    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, "C", "float16")
    wide = WarpgroupBuilder(plan(GEMM, program.sizes, "C", "bfloat16"), {**WIDE, "frags_m": 2})
    mma = Builder(program, {"warps_m": 2, "warps_n": 4, "frags_m": 4, "frags_n": 4,
                            "frags_k": 4, "stages": 2, "split": 1, "mapping": "mma",
                            "shared_layout": "pad", "free_layout": "group",
                            "async_copy": True})
    for builder, counted in ((wide, 4.02), (mma, 1)):
        write = builder.write_statement()
        assert not write.divides and not write.whole
        assert builder.write_instructions() == pytest.approx(counted, abs=0.01)


def test_threads_dividing_the_row_keep_the_element_numbering():
    """128 threads, a row of 256 (tccg_07's mma.sync pick, a free box): the element
    ``e = 128 c + t`` divides ``c`` alone, which nvcc's unrolling folds, so the write keeps
    it, a store an iteration (dealt as 2 stores of ``j`` it took 200 SASS instructions a
    thread after the last barrier, 191 so), left to nvcc; partial tiles match
    numpy.einsum on PoCL and on the emulator."""
    row = TCCG["tccg_07"]
    sizes = {"a": 16, "b": 3, "c": 5, "d": 20, "e": 16, "f": 20}
    params = {"warps_m": 4, "warps_n": 1, "frags_m": 4, "frags_n": 2, "frags_k": 1,
              "stages": 4, "split": 1, "mapping": "mma", "shared_layout": "pad",
              "free_layout": "box", "async_copy": True}
    write = Builder(plan(row.expression, sizes, row.layout, "float16"),
                    params).write_statement()
    assert write.ranges[ir.Var("j")] == (0, 0)
    assert not write.divides and not write.whole
    kernel = treduda.compile(row.expression, sizes, dtype="float16", layout=row.layout,
                             strategy="tensorcore", params=params)
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok

"""The cases of the shared-memory rule (:func:`treduda.run.counters.shared_wavefronts`) as
kernels a GPU session profiles (issue 40): whether Hopper serves 8- and 16-byte accesses in
fixed half- and quarter-warp phases, and merges two where lane pairs ``i ^ 1`` (or ``i ^ 2``)
read one address, is what no source covers for compute capability 9.0, and what decides
whether the model should price a wide access by its phases (it prices one phase of the warp:
:meth:`treduda.model.counts.Counts.bank_conflicts`; docs/model-fidelity.md, "Wide shared
accesses").

Each case is one warp that fills a shared tile from its input, then reads it :data:`READS`
times at an address that is a function of its lane (:attr:`Case.terms`), ``width`` floats at
a time (LDS, LDS.64, LDS.128), and writes the sum of what it read. A barrier closes each read
so that the compiler neither hoists the read out of the loop nor merges two; the sum of all
``width`` values keeps the access as wide as written. Nsight Compute's shared wavefronts per
shared load instruction (``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum`` over
``smsp__inst_executed_op_shared_ld.sum``) is then the case's figure, which the bundle's
metadata sets beside the rule's, the rule's without the pair merge, and the model's.

    python -m treduda.app.ncu_profile cases -o .bundles/ncu/shared.zip   # here (isl)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codegen import ir
from ..run.counters import BANK_BYTES, WAVEFRONT_BYTES, shared_wavefronts

if TYPE_CHECKING:
    from ..kernel import Kernel

SUITE = "shared"
READS = 1000  # reads a case's warp makes: ncu's counts are then its own, not the fill's
ROWS, COLUMNS = 32, 33  # the input A[i, j] and the shared tile: 32 x 33 floats
TILE = ROWS * COLUMNS
EXPRESSION = "C[i] = A[i,j]"  # shapes the arguments only: C (32) and A (32 x 33) float32
SIZES = {"i": ROWS, "j": COLUMNS}
LANE = ir.Index(ir.Builtin.THREAD_ID, 0)


@dataclass(frozen=True)
class Case:
    """One read of the shared tile by a warp: lane ``t`` reads ``width`` floats from element
    ``sum(scale * (t // divisor % modulus) for divisor, modulus, scale in terms)``."""

    name: str
    width: int  # floats: 1, 2 or 4 (LDS, LDS.64, LDS.128)
    terms: tuple[tuple[int, int, int], ...]
    why: str

    def offsets(self) -> np.ndarray:
        """Each lane's first element."""
        lane = np.arange(ir.WARP)
        return sum((scale * (lane // divisor % modulus) for divisor, modulus, scale
                    in self.terms), np.zeros(ir.WARP, np.int64))

    def first(self) -> ir.Expr:
        """The IR of :meth:`offsets`."""
        terms = [ir.Binary(ir.Op.MUL, ir.Int(scale), ir.Binary(ir.Op.MOD, ir.Binary(
                     ir.Op.DIV, LANE, ir.Int(divisor)) if divisor > 1 else LANE,
                     ir.Int(modulus))) for divisor, modulus, scale in self.terms]
        return functools.reduce(lambda a, b: ir.Binary(ir.Op.ADD, a, b), terms) if terms \
            else ir.Int(0)

    def words(self) -> tuple[np.ndarray, np.ndarray]:
        """The 4-byte words the warp reads and the lane reading each."""
        return ((self.offsets()[:, None] + np.arange(self.width)).ravel(),
                np.repeat(np.arange(ir.WARP), self.width))

    def expected(self) -> dict[str, Any]:
        """Wavefronts per instruction: by the rule, by the rule without the pair merge (each
        fixed phase alone), and by the model (one phase of the warp); the rule's ideal."""
        words, lanes = self.words()
        rule, ideal, ways = shared_wavefronts(words, lanes, self.width * BANK_BYTES)
        size = WAVEFRONT_BYTES // max(self.width * BANK_BYTES, BANK_BYTES)  # lanes a phase
        unmerged = sum(shared_wavefronts(words[lanes // size == p], np.zeros_like(
            words[lanes // size == p]), BANK_BYTES)[0] for p in range(ir.WARP // size))
        model = shared_wavefronts(words, np.zeros_like(words), BANK_BYTES)[0]
        return {"rule": rule, "ideal": ideal, "ways": ways, "unmerged": unmerged,
                "model": model}

    def kernel_ir(self) -> ir.KernelIR:
        """One warp: fill the tile from A, then :data:`READS` reads, each closed by a
        barrier; lane ``t`` writes ``C[t]``, the sum of what it read."""
        tile = ir.Local("S", ir.Space.SHARED, (TILE,))
        total = ir.Local("acc", ir.Space.REGISTER, (1,))
        acc = ir.Load("acc", ir.Int(0))
        o, r = ir.Var("o"), ir.Var("r")
        fill = ir.For("o", LANE, ir.Binary(ir.Op.LT, o, ir.Int(TILE)), ir.Int(ir.WARP),
                      ir.Assign(ir.Load("S", o), "=", ir.Load("A", o)), ir.Unroll.NEVER)
        first = ir.Load("S", self.first())
        if self.width == 1:
            read: tuple[ir.Stmt, ...] = (ir.Assign(acc, "+=", first),)
        else:
            values = [ir.Lane("v", n) for n in range(self.width)]
            added = values[0]
            for value in values[1:]:
                added = ir.Binary(ir.Op.ADD, added, value)
            read = (ir.VectorLoad("v", first, self.width), ir.Assign(acc, "+=", added))
        reads = ir.For("r", ir.Int(0), ir.Binary(ir.Op.LT, r, ir.Int(READS)), ir.Int(1),
                       ir.Block((*read, ir.Barrier())), ir.Unroll.NEVER)
        body = ir.Block((ir.Assign(acc, "=", ir.Float(0.0)), fill, ir.Barrier(), reads,
                         ir.Assign(ir.Load("C", LANE), "=", acc)))
        params = (ir.Param("C", ir.ParamKind.OUTPUT), ir.Param("A", ir.ParamKind.INPUT))
        return ir.KernelIR(f"td_shared_{self.name}", "float32", 32, params, (tile, total),
                           body)

    def output(self, a: np.ndarray) -> np.ndarray:
        """What the kernel writes for the input ``a`` (32 x 33): exact where ``a`` holds
        small integers."""
        flat = np.asarray(a, np.float64).ravel()
        return READS * flat[self.offsets()[:, None] + np.arange(self.width)].sum(axis=1)


CASES = (
    Case("forum_quarters", 4, ((1, 4, 4),),
         "NVIDIA's forum case (cc 7.x): LDS.128 at byte 16 (lane % 4), four addresses; each "
         "quarter-warp a phase of its own"),
    Case("pairs_merged", 4, ((2, 16, 4),),
         "lanes i and i ^ 1 read one address: a half-warp's quarters merge"),
    Case("quarter_broadcast", 4, ((8, 4, 4),),
         "a vector a quarter-warp, i ^ 1 alike: a phase per half-warp"),
    Case("halves_1kb", 4, ((16, 2, 256),),
         "a vector a half-warp, 1 KB apart (the same banks): half-warps never merge"),
    Case("pairs_two_rows", 4, ((8, 4, 4), (4, 2, 32)),
         "pairs i, i ^ 1 alike, lanes 4-7 a row (128 B) below 0-3: two ways in each half"),
    Case("lds64_broadcast", 2, (),
         "LDS.64, one address for the whole warp: the half-warps merge"),
    Case("lds64_pairs", 2, ((1, 2, 2),),
         "LDS.64, lanes i and i ^ 2 alike: one phase a half-warp, merged"),
    Case("gemm_k_broadcast", 4, ((16, 2, 16),),
         "GEMM 4096's SIMT pick reading A along k: a half-warp one vector, the two 64 B "
         "apart (A_sh[(ty + 32 e) * 16 + k], nvcc's LDS.128): 2 by the rule, 4 without the "
         "merge, 1 by the model"),
    Case("lds32_32_ways", 1, ((1, 32, 32),),
         "control: LDS.32 down a column of an unpadded 32-wide tile, 32 ways"),
)
ENTRIES = tuple(f"{SUITE}:{SUITE}/{case.name}" for case in CASES)  # ncu_profile's selection


def kernel(case: Case) -> Kernel:
    """``case`` as a kernel to export and count: a compiled kernel of :data:`EXPRESSION`
    (for its arguments and launch) with the case's IR, one block of one warp (needs isl)."""
    from ..polyhedral.ast_build import Built

    base = _arguments()
    params = {"case": case.name, "reads": READS}
    one = ir.Int(1)
    return replace(base, identity=base.identity.generated(SUITE, params), strategy=SUITE,
                   params=params, signature=Built(case.kernel_ir(), (one, one, one),
                                                  (ir.WARP, 1, 1), ast=""))


@functools.cache
def _arguments() -> Kernel:
    """A kernel of :data:`EXPRESSION`: what the cases take their arguments and launch from."""
    from ..api import compile

    return compile(EXPRESSION, SIZES, strategy="thread_per_element", cache=False)


def export_cases(path: str | Path) -> dict[str, Any]:
    """Write every case into the bundle ``path`` as ``shared/NAME``, each with its expected
    wavefronts in its metadata (no cubins: the GPU's machine compiles them)."""
    from ..exporting import export

    kernels = {f"{SUITE}/{case.name}": kernel(case) for case in CASES}
    metadata = {f"{SUITE}/{case.name}": {"suite": SUITE, "case": case.name,
                                          "width_bytes": case.width * BANK_BYTES,
                                          "reads": READS, "why": case.why,
                                          "wavefronts": case.expected()}
                for case in CASES}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return export(kernels, path, targets=(), gpu=None, metadata=metadata)

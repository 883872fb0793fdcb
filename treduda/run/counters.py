"""Counts on the CPU that stand in for a profiler: the memory transactions a kernel's own
addresses cause, warp by warp, as Nsight Compute would count them on a GPU.

The emulator (:mod:`treduda.run.emulator`) runs one block (or a few) of the kernel IR and
tells a :class:`Tally` of every global and shared access as a warp executes it; nothing is
timed, so the counts depend on the kernel and its sizes only. The rules:

* **Global memory** (NVIDIA, CUDA C++ Best Practices Guide, "Coalesced Access to Global
  Memory"; Nsight Compute Profiling Guide, "Memory Tables"): a warp's load or store is one
  *request*; it costs one 32-byte *sector* per distinct sector its active threads touch (and
  one 128-byte line per distinct line). The ideal is what a fully coalesced access of that width
  needs: the threads' bytes in consecutive sectors, ``ceil(threads x width / 32)``: 4 for 32
  threads of 4 bytes, 16 for 16-byte vectors, 2 for 2-byte halves.
* **Shared memory** (CUDA C++ Programming Guide, "Shared Memory" for compute capability 5.x
  and later: 32 banks of 4-byte words, successive words in successive banks; threads reading
  the same word share it): a request is served in *wavefronts* of 128 bytes, the most the
  banks give, and return, in a cycle. :func:`shared_wavefronts` is the rule (the model and
  the walk call it at one phase of the warp: :meth:`~treduda.model.counts.Counts.bank_conflicts`).
  Accesses wider than a word are split into phases of lanes whose bytes fill one wavefront:
  the warp for 4 bytes (or less), its half-warps (lanes 0-15, 16-31) for 8, its quarter-warps
  for 16. The Programming Guide documents phases only for compute capability 2.x and says
  nothing of 64/128-bit accesses since 5.x; NVIDIA's answer on its developer forum
  ("Unexpected shared memory bank conflict", 2019, for cc 7.x) and Nsight Compute
  measurements published since (e.g. code.hitori.moe, "CUDA shared memory access mechanism
  with vectorized instructions") agree on fixed lane groups, not phases formed from distinct
  addresses: an LDS.128 at byte ``16 (lane % 4)`` (four addresses, 64 bytes) takes 4
  wavefronts, since the unit returns 128 bytes, one register per lane, a cycle. The one
  exception both give: where every active lane ``i``'s partner ``i ^ 1`` (or every one's
  ``i ^ 2``) is inactive or reads the same address, the two phases of a half-warp (LDS.128)
  or of the warp (LDS.64) are served together, their return registers packed. A phase takes
  as many wavefronts as the most distinct words one bank holds in it (its bank-conflict
  *ways*). The ideal is ``ceil(threads x width / 128)`` a warp, or its phases where fewer;
  Nsight Compute's bank conflicts are the wavefronts beyond it. Neither source covers
  compute capability 9.0: the GPU session's ncu check (``l1tex__data_pipe_lsu_wavefronts_mem_
  shared_op_ld``) on such patterns is the test.
* **Tensor-core fragments** from shared tiles: 16-bit ones are read as ``ldmatrix`` reads
  them (PTX ISA, "ldmatrix"): the tile's memory-contiguous lines (rows, or columns for a
  column-major tile) in 16-byte pieces, each 8x8 matrix (8 pieces of 8 consecutive lines) one
  phase, four matrices one request (``.x4``); so are TF32 ones of the "mma" mapping where
  ldmatrix reads them untransposed (:func:`~treduda.codegen.fragments.ldmatrix_transposed`),
  four values a piece. Other 32- and 64-bit ones (tf32, fp64) as ``mma.sync``'s fragments
  place their values (PTX ISA, "Matrix Fragments
  for mma"): per load, thread ``t`` one value, at ``t / 4`` of M or N and ``t % 4`` of K. WMMA
  does not document its own fragment layouts; these are the layouts the hardware's MMAs
  take. Accumulators are stored (and loaded) as ``mma.sync`` holds them: per 8x8 piece, thread
  ``t`` its two adjacent values of row ``t / 4`` at column ``2 (t % 4)``, one access of twice
  the element size.
* The shared side of an asynchronous copy (``cp.async``) is taken to be served as a store of
  its width (NVIDIA documents no rule for it; ncu's ``op_ldgsts`` metrics will tell).
* A compiler loads a value once: a load that repeats one since the last barrier or store to its
  array, by the same threads at the same addresses, is not counted again; and nvcc merges a
  thread's loads of a shared tile along a loop it unrolls where it can prove them aligned
  (GEMM's pick: ``A_sh[16 r + k]`` for 16 values of k by 4 LDS.128): :func:`count` counts
  the kernel IR with those merges written in
  (:func:`~treduda.codegen.vectorize.steps_merged`), as the SASS issues them.

Counts are per region: before the kernel's main loop (the outermost loop that accumulates
products), the main loop, and after it (the epilogue); a kernel whose steps are all written
out (:func:`steps_written_out`) has a main body instead, up to its output's first write.
Nsight Compute's names are kept: ``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`` and its
requests, wavefronts and bank conflicts of shared loads (``op_ld``, tf32 and fp64 fragments
too), stores (``op_st``), 16-bit fragment loads (``op_ldsm``), asynchronous copies
(``op_ldgsts``) and atomic additions (``op_red``).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..codegen import ir
from ..codegen.fragments import ldmatrix_transposed
from ..codegen.vectorize import steps_merged
from ..frontend.dtypes import compute, itemsize
from .emulator import observe
from .launch import Launch

SECTOR_BYTES = 32
LINE_BYTES = 128
BANKS, BANK_BYTES = 32, 4
WAVEFRONT_BYTES = BANKS * BANK_BYTES
MATRIX_ROW_BYTES, MATRIX_ROWS = 16, 8  # ldmatrix: an 8x8 matrix of 16-bit values per phase
MATRIX_VALUE_BYTES = 2
PIECE = 8  # an accumulator is stored in 8x8 pieces (mma.sync's layout)

GLOBAL, SHARED = "global", "shared"
# Nsight Compute's operations: loads, stores, ldmatrix, cp.async, atomic reductions
LOAD, STORE, FRAGMENT_LOAD, ASYNC_COPY, REDUCTION = "ld", "st", "ldsm", "ldgsts", "red"


class Region(enum.Enum):
    BEFORE = "before"
    MAIN_LOOP = "main loop"
    AFTER = "after"


@dataclass(frozen=True)
class Traffic:
    """One array's accesses of one kind in one region, summed over the warps that made them:
    ``transactions`` are 32-byte sectors (global) or 128-byte wavefronts (shared), ``ideal``
    what fully coalesced (or conflict-free) accesses of the same widths would take."""

    region: Region
    array: str
    space: str  # GLOBAL or SHARED
    operation: str  # LOAD, STORE, FRAGMENT_LOAD, ASYNC_COPY or REDUCTION
    width: int  # bytes per thread of its widest access
    requests: int
    transactions: int
    ideal: int
    lines: int = 0  # distinct 128-byte lines per request, summed (global)
    ways: int = 0  # the most distinct words one bank held in one phase of a request (shared)

    @property
    def per_request(self) -> float:
        return self.transactions / self.requests

    @property
    def ideal_per_request(self) -> float:
        return self.ideal / self.requests

    @property
    def excess(self) -> int:
        """Transactions beyond the ideal: bank conflicts (shared), wasted sectors (global)."""
        return self.transactions - self.ideal


@dataclass(frozen=True)
class Counters:
    """What :func:`count` found: every array's :class:`Traffic` per region and operation, for
    ``blocks``, each running ``steps`` iterations of its main loop (None: all)."""

    traffic: tuple[Traffic, ...]
    blocks: tuple[tuple[int, ...], ...]
    steps: int | None

    def of(self, array: str, operation: str = LOAD,
           region: Region = Region.MAIN_LOOP) -> Traffic | None:
        """The traffic of ``array``'s ``operation`` in ``region``; None if there is none."""
        return next((t for t in self.traffic if (t.array, t.operation, t.region)
                     == (array, operation, region)), None)

    def worst_ways(self, region: Region = Region.MAIN_LOOP) -> int:
        """The most distinct words a bank held in one phase of any shared request (1: no
        conflict anywhere; 0: no shared access)."""
        return max((t.ways for t in self.traffic if t.region is region and t.space == SHARED),
                   default=0)

    def metrics(self, region: Region = Region.MAIN_LOOP) -> dict[str, float]:
        """The totals of ``region`` under the names of Nsight Compute's metrics (``ncu
        --metrics NAME,...``), with the sectors per request it derives."""
        found: dict[str, float] = {}
        for t in self.traffic:
            if t.region is not region:
                continue
            if t.space == GLOBAL:
                names = {"t_sectors": t.transactions, "t_requests": t.requests}
                for name, value in names.items():
                    key = f"l1tex__{name}_pipe_lsu_mem_global_op_{t.operation}.sum"
                    found[key] = found.get(key, 0) + value
            else:
                names = {"data_pipe_lsu_wavefronts": t.transactions,
                         "data_bank_conflicts_pipe_lsu": t.excess}
                for name, value in names.items():
                    key = f"l1tex__{name}_mem_shared_op_{t.operation}.sum"
                    found[key] = found.get(key, 0) + value
        for key in [k for k in found if k.startswith("l1tex__t_sectors")]:
            requests = found[key.replace("t_sectors", "t_requests")]
            operation = key.split("_op_")[1].removesuffix(".sum")
            found[f"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{operation}"
                  ".ratio"] = found[key] / requests
        return found

    def table(self) -> str:
        """One line per array and operation, region by region, the ideal beside each."""
        columns = ("region", "array", "space", "op", "B/thread", "requests", "sectors|wavefr",
                   "per req", "ideal", "lines|ways")
        cells = [[t.region.value, t.array, t.space, t.operation, str(t.width), str(t.requests),
                  str(t.transactions), f"{t.per_request:.2f}", f"{t.ideal_per_request:.2f}",
                  f"{t.lines / t.requests:.2f}" if t.space == GLOBAL else str(t.ways)]
                 for t in self.traffic]
        widths = [max(len(row[n]) for row in [list(columns), *cells]) for n in range(len(columns))]
        return "\n".join("  ".join(cell.ljust(w) if n < 4 else cell.rjust(w)
                                   for n, (cell, w) in enumerate(zip(row, widths, strict=True)))
                         for row in [list(columns), *cells])

    def __str__(self) -> str:
        steps = "all" if self.steps is None else self.steps
        blocks = ", ".join(map(str, self.blocks))
        return (f"block(s) {blocks}, main-loop iterations run: {steps}\n{self.table()}\n"
                + "\n".join(f"  {name} = {value:g}" for name, value in self.metrics().items()))


class Tally:
    """The emulator's observer (:class:`treduda.run.emulator.Observer`): counts each access
    by the rules of this module's docstring, per region, array and operation."""

    def __init__(self, kernel: ir.KernelIR, steps: int | None = None):
        main, self.steps = main_loop(kernel), steps
        # steps written out (no step loop): the main body runs to the output's first write
        self.written_out = main is not None and steps_written_out(kernel)
        self.main = None if self.written_out else main
        self.ends = None if self.main or self.written_out else main_body_end(kernel)
        stored, computed = itemsize(kernel.dtype), itemsize(compute(kernel.dtype))
        self.places = {p.name: (GLOBAL, stored) for p in kernel.params
                       if p.kind in (ir.ParamKind.INPUT, ir.ParamKind.OUTPUT)}
        self.outputs = {p.name for p in kernel.params if p.kind is ir.ParamKind.OUTPUT}
        for local in kernel.locals:
            if local.space is ir.Space.SHARED:
                self.places[local.name] = (SHARED, stored if local.stored else computed)
            elif local.space is ir.Space.GLOBAL:
                self.places[local.name] = (GLOBAL, computed)
        self.sums: dict[tuple[Region, str, str], Traffic] = {}
        self.patterns: dict[tuple, tuple[int, int, int, int, int]] = {}  # see _add
        self.begin()

    def begin(self) -> None:
        self.where = Region.MAIN_LOOP if self.main is None else Region.BEFORE
        self.seen: set[tuple] = set()  # loads a compiler would not repeat

    def region(self, inside: bool) -> None:
        self.where = Region.MAIN_LOOP if inside else Region.AFTER

    def barrier(self) -> None:
        self.seen.clear()

    def access(self, array: str, offsets: np.ndarray, lanes: np.ndarray, width: int,
               write: bool, asynchronous: bool = False, atomic: bool = False) -> None:
        if array not in self.places or not lanes.size:
            return  # a register
        if write:
            self.seen = {key for key in self.seen if key[0] != array}
            if self.written_out and array in self.outputs:
                self.where = Region.AFTER
        else:
            key = (array, width, lanes.tobytes(), offsets.tobytes())
            if key in self.seen:
                return
            self.seen.add(key)
        element = self.places[array][1]
        operation = (ASYNC_COPY if asynchronous else REDUCTION if atomic else STORE if write
                     else LOAD)
        self._add(array, operation, offsets * element, lanes, width * element)

    def tile(self, kind: ir.Fragment, array: str, offsets: np.ndarray, row_major: bool,
             write: bool) -> None:
        element = self.places[array][1]
        grid = offsets.reshape(kind.rows_columns[0], -1)  # a B load's leading columns
        if kind.use is ir.Use.ACCUMULATOR:
            starts, lanes, width = _accumulator_accesses(grid, row_major)
            self._add(array, STORE if write else LOAD, starts * element, lanes, width * element)
            return
        by_ldmatrix = element == MATRIX_VALUE_BYTES or (
            kind.mapping == "mma" and not ldmatrix_transposed(kind.use, row_major))
        if not by_ldmatrix:  # tf32, fp64: loads of a value per thread
            starts, lanes = _operand_accesses(grid, kind.use is ir.Use.A)
            self._add(array, LOAD, starts * element, lanes, element)
            return
        lines = grid if row_major else grid.T  # memory-contiguous lines, one per row here
        per = MATRIX_ROW_BYTES // element
        starts = np.concatenate([lines[first:first + MATRIX_ROWS, piece]  # an 8x8 matrix:
                                 for piece in range(0, lines.shape[1], per)  # a phase
                                 for first in range(0, lines.shape[0], MATRIX_ROWS)])
        self._add(array, FRAGMENT_LOAD, starts * element, np.arange(starts.size),
                  MATRIX_ROW_BYTES)

    def _add(self, array: str, operation: str, starts: np.ndarray, lanes: np.ndarray,
             width: int) -> None:
        """One instruction: threads ``lanes`` each access ``width`` bytes from byte
        ``starts`` of ``array``."""
        space = self.places[array][0]
        # The counts are the same for starts moved by whole lines (a loop's steps through a
        # tile repeat the same patterns): computed once per pattern.
        moved = starts - int(starts.min()) // LINE_BYTES * LINE_BYTES
        pattern = (space, width, lanes.size, lanes.tobytes(), moved.tobytes())
        counted = self.patterns.get(pattern)
        if counted is None:
            warps = lanes // ir.WARP
            if space == GLOBAL:
                requests, transactions, ideal, lines = global_requests(moved, warps, width)
                counted = requests, transactions, ideal, lines, 0
            else:
                requests, transactions, ideal, ways = _shared(moved, lanes, warps, width)
                counted = requests, transactions, ideal, 0, ways
            self.patterns[pattern] = counted
        requests, transactions, ideal, lines, ways = counted
        key = (self.where, array, operation)
        total = self.sums.get(key)
        self.sums[key] = Traffic(*key[:2], space, operation, width, requests, transactions,
                                 ideal, lines, ways) if total is None else replace(
            total, width=max(total.width, width), requests=total.requests + requests,
            transactions=total.transactions + transactions, ideal=total.ideal + ideal,
            lines=total.lines + lines, ways=max(total.ways, ways))

    def counters(self, blocks: Sequence[tuple[int, ...]]) -> Counters:
        order = {region: n for n, region in enumerate(Region)}
        traffic = sorted(self.sums.values(),
                         key=lambda t: (order[t.region], t.space, t.array, t.operation))
        return Counters(tuple(traffic), tuple(blocks), self.steps)


def count(kernel: ir.KernelIR, launch: Launch, blocks: Iterable[tuple[int, ...]] | None = None,
          steps: int | None = None) -> Counters:
    """The accesses of ``blocks`` of ``launch`` (the first block by default), each running
    ``steps`` iterations of the main loop (None: all of them)."""
    blocks = [(0, 0, 0)] if blocks is None else [tuple(b) for b in blocks]
    kernel = steps_merged(kernel)  # the shared loads as nvcc issues them
    tally = Tally(kernel, steps)
    observe(kernel, launch, blocks, tally)
    return tally.counters(blocks)


def main_loop(kernel: ir.KernelIR) -> ir.For | None:
    """The outermost loop that accumulates products (a multiply-accumulate of fragments, a
    warpgroup's wgmma, or an update of a register), where a kernel spends its time, a step
    loop (with barriers) first: a step peeled off before it holds loops that accumulate; None
    where no loop does. The write of the output after it (a C tile's stores) is "after"."""
    loops = _accumulating_loops(kernel)
    return next((s for s in loops if ir.has_barrier(s.body)), next(iter(loops), None))


def _accumulating_loops(kernel: ir.KernelIR) -> list[ir.For]:
    """The loops that accumulate products (a multiply-accumulate of fragments, a warpgroup's
    wgmma, or an update of a register), outer ones first."""
    registers = {local.name for local in kernel.locals if local.space is ir.Space.REGISTER}

    def accumulates(s: ir.Stmt) -> bool:
        return isinstance(s, ir.MultiplyAccumulate | ir.WarpgroupMultiply) or (
            isinstance(s, ir.Assign) and s.op != "=" and (
                isinstance(s.target, ir.Var)
                or isinstance(s.target, ir.Load) and s.target.array in registers))

    return [s for s in ir.nested(kernel.body) if isinstance(s, ir.For)
            and any(accumulates(inner) for inner in ir.nested(s.body))]


def steps_written_out(kernel: ir.KernelIR) -> bool:
    """Whether the kernel's steps are written out, none looped: no loop that accumulates holds
    a barrier, and a barrier parts two of them, each a step's loop over its slice of the
    reduction (tccg_09~1: preload and double buffer over 3 steps peel them all). Such a
    kernel has no main loop: its main body is all of it before the output's first write.
    Its first step's inner loop taken for one, cut after ``steps`` iterations, held 32 of
    its 1536 A_sh loads, with 1024 after and 480 not run."""
    loops = _accumulating_loops(kernel)
    if any(ir.has_barrier(loop.body) for loop in loops):
        return False
    seen = parted = False
    for s in ir.nested(kernel.body):
        if isinstance(s, ir.Barrier):
            parted = seen
        elif any(s is loop for loop in loops):
            if parted:
                return True
            seen = True
    return False


def main_body_end(kernel: ir.KernelIR) -> ir.Stmt | None:
    """Where no loop accumulates (a reduction of one step, whose wgmmas are not looped), the
    statement that ends the kernel's main body: the last wait for a warpgroup's multiplies
    (wgmma.wait_group) after the last of them. What follows writes the C tile, as after a
    main loop (tccg_42: the C tile's stores, of 2 ways, were the main loop's). None where
    there is no such wait: the whole kernel is the main body."""
    statements = list(ir.nested(kernel.body))
    multiplies = [n for n, s in enumerate(statements) if isinstance(s, ir.WarpgroupMultiply)]
    waits = [s for s in statements[multiplies[-1]:] if isinstance(s, ir.WarpgroupWait)
             ] if multiplies else []
    return waits[-1] if waits else None


def _per_warp(warps: np.ndarray, width: int, unit: int) -> int:
    """What the threads' bytes of ``width`` each would take in whole ``unit``s, warp by warp:
    the ideal."""
    threads = np.unique(warps, return_counts=True)[1]
    return int(np.sum(-(-threads * width // unit)))


def _distinct(groups: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (group, value) pairs of non-negative integers, as two arrays (one key
    each: a 1-D unique is many times faster than one of rows, which the model's counts of
    every candidate's copies felt)."""
    groups, values = groups.astype(np.int64), values.astype(np.int64)
    span = int(values.max(initial=0)) + 1
    keys = np.unique(groups * span + values)
    return keys // span, keys % span


def global_requests(starts: np.ndarray, warps: np.ndarray, width: int
                    ) -> tuple[int, int, int, int]:
    """Requests, sectors, ideal sectors and lines of the global accesses of ``width`` bytes
    from byte ``starts`` that the requests ``warps`` make (one instruction's warps, or any
    numbering of several instructions' warps): the rule the emulator counts by, and the
    tensor-core model's count of its copies too
    (:meth:`~treduda.strategies.tensorcore_model.TensorCoreModel.copy_sectors`)."""
    ends = starts + width - 1
    both = np.concatenate([warps, warps])
    sectors = _distinct(both, np.concatenate([starts, ends]) // SECTOR_BYTES)[0].size
    lines = _distinct(both, np.concatenate([starts, ends]) // LINE_BYTES)[0].size
    return np.unique(warps).size, sectors, _per_warp(warps, width, SECTOR_BYTES), lines


def moved_requests(offsets: np.ndarray, warps: np.ndarray, width: int, copies: np.ndarray
                   ) -> tuple[int, int, int, int]:
    """:func:`global_requests` of the accesses of ``width`` bytes at element ``offsets`` by
    the requests ``warps``, summed over copies of each request moved by ``s`` elements,
    ``copies[r, s]`` of request ``r`` (the ``r``-th of ``warps``' distinct values, in
    order; ``s`` below ``copies.shape[1]``, a number of elements that fills whole 128-byte
    lines). A request's sectors and lines depend on its offsets from its least and where
    that starts in a line only, so they are counted once per distinct request and place (the
    tensor-core models' count of a grid's writes: thousands of blocks, tens of places)."""
    period = copies.shape[1]
    if np.any(np.diff(warps) < 0):
        order = np.argsort(warps, kind="stable")
        warps, offsets = warps[order], offsets[order]
    begins = np.flatnonzero(np.diff(warps, prepend=-1))
    held = np.diff(begins, append=warps.size)
    request = np.repeat(np.arange(held.size), held)
    least = np.minimum.reduceat(offsets, begins)
    # each request's offsets from its least, in a row; the rest of a short row repeats it
    rows = np.zeros((held.size, held.max(initial=1)), np.int64)
    rows[request, np.arange(request.size) - np.repeat(begins, held)] = offsets - least[request]
    keys = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.shape[1] * 8))).ravel()
    _, first, pattern = np.unique(keys, return_index=True, return_inverse=True)
    patterns = rows[first]
    first = (patterns[:, None, :] + np.arange(period)[None, :, None]) * width
    edges = np.concatenate([first, first + width - 1], axis=2)
    # requests of one pattern starting at one place in a line count alike: their copies
    # summed, each place they move to looked up once
    alike, kind = np.unique(pattern.ravel() * period + least % period, return_inverse=True)
    order = np.argsort(kind, kind="stable")
    summed = np.add.reduceat(copies[order], np.flatnonzero(np.diff(kind[order], prepend=-1)))
    places = (alike[:, None] % period + np.arange(period)[None, :]) % period
    patterns_of = alike[:, None] // period
    sectors = (_distinct_in_rows(edges // SECTOR_BYTES)[patterns_of, places] * summed).sum()
    lines = (_distinct_in_rows(edges // LINE_BYTES)[patterns_of, places] * summed).sum()
    made = copies.sum(axis=1)  # copies of each request
    ideal = -(-held * width // SECTOR_BYTES)  # _per_warp's, request by request
    return int(made.sum()), int(sectors), int((ideal * made).sum()), int(lines)


def _distinct_in_rows(values: np.ndarray) -> np.ndarray:
    """The distinct values along the last axis of ``values``."""
    ordered = np.sort(values, axis=-1)
    return 1 + np.count_nonzero(np.diff(ordered, axis=-1), axis=-1)


def _shared(starts: np.ndarray, lanes: np.ndarray, warps: np.ndarray, width: int
            ) -> tuple[int, int, int, int]:
    """Requests, wavefronts, ideal wavefronts and the worst ways of one shared instruction's
    warps (:func:`shared_wavefronts` of each thread's words from byte ``starts``)."""
    words = max(1, width // BANK_BYTES)
    addressed = (starts[:, None] // BANK_BYTES + np.arange(words)).ravel()
    wavefronts, ideal, ways = shared_wavefronts(addressed, np.repeat(lanes, words), width)
    return np.unique(warps).size, wavefronts, ideal, ways


def shared_wavefronts(words: np.ndarray, lanes: np.ndarray, width: int) -> tuple[int, int, int]:
    """Wavefronts, ideal wavefronts and the worst ways of one shared-memory instruction whose
    threads each access ``width`` bytes: ``lanes[n]`` (a thread's number; ``// 32`` its warp)
    touches 4-byte word ``words[n]``, a thread's lowest word its address. By the rule of this
    module's docstring: phases of 32, 16 or 8 lanes by the width, two merged where every
    lane's partner ``i ^ 1`` or ``i ^ 2`` reads its address or nothing; each phase as many
    wavefronts as the most distinct words one bank holds in it."""
    size = WAVEFRONT_BYTES // max(width, BANK_BYTES)  # lanes a phase
    if size == ir.WARP and int(lanes.min()) // ir.WARP == int(lanes.max()) // ir.WARP:
        # one phase, a warp's (the model's counts of every candidate): Python sets beat
        # numpy's sorting at a warp's few hundred words
        held = Counter(word % BANKS for word in set(words.tolist()))
        ways = max(held.values())
        threads = len(set(lanes.tolist()))
        return ways, min(-(-threads * width // WAVEFRONT_BYTES), 1), ways
    words, lanes = words.astype(np.int64), lanes.astype(np.int64)
    warp, lane = np.divmod(lanes, ir.WARP)
    if size < ir.WARP:
        size = np.where(_pairs_agree(words, warp, lane), 2 * size, size)
    phase = warp * ir.WARP + lane // size  # a number per phase of the instruction
    phase, addressed = _distinct(phase, words)
    banks, held = np.unique(phase * BANKS + addressed % BANKS, return_counts=True)
    phases, starts = np.unique(banks // BANKS, return_index=True)  # banks sorted by phase
    worst = np.maximum.reduceat(held, starts)
    threads = np.unique(np.unique(lanes) // ir.WARP, return_counts=True)[1]
    served = np.unique(phases // ir.WARP, return_counts=True)[1]
    ideal = np.minimum(-(-threads * width // WAVEFRONT_BYTES), served)
    return int(worst.sum()), int(ideal.sum()), int(worst.max())


def _pairs_agree(words: np.ndarray, warp: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """For each access (``warp``, ``lane``, word), whether its warp's lanes agree in pairs:
    every active lane's partner ``i ^ 1`` (or every one's ``i ^ 2``) inactive or at the same
    address (its lowest word)."""
    none = np.iinfo(np.int64).max
    warps, of = np.unique(warp, return_inverse=True)
    address = np.full((warps.size, ir.WARP), none, np.int64)
    np.minimum.at(address, (of, lane), words)
    address[address == none] = -1  # an inactive lane
    every, paired = np.arange(ir.WARP), np.zeros(warps.size, bool)
    for step in (1, 2):
        partner = address[:, every ^ step]
        paired |= np.all((address < 0) | (partner < 0) | (address == partner), axis=1)
    return paired[of]


def _operand_accesses(grid: np.ndarray, a: bool) -> tuple[np.ndarray, np.ndarray]:
    """The loads of a warp that reads an A (``a``) or B operand tile of 32- or 64-bit values
    (offsets ``grid``, row by row) as mma.sync's fragments hold them (PTX ISA, "Matrix
    Fragments for mma.m16n8k8" and ".m8n8k4" with .f64): per load, thread ``t`` one value,
    at index ``t / 4`` of M (A's rows) or N (B's columns) and ``t % 4`` of K. Returns the
    offsets and the lanes (one warp per load)."""
    t = np.arange(ir.WARP)
    outer, inner = t // 4, t % 4
    rows, columns = grid.shape
    if a:
        blocks = [grid[r + outer, c + inner] for r in range(0, rows, 8)
                  for c in range(0, columns, 4)]
    else:
        blocks = [grid[r + inner, c + outer] for r in range(0, rows, 4)
                  for c in range(0, columns, 8)]
    return np.concatenate(blocks), np.arange(len(blocks) * ir.WARP)


def _accumulator_accesses(grid: np.ndarray, row_major: bool
                          ) -> tuple[np.ndarray, np.ndarray, int]:
    """The accesses of a warp that stores (or loads) the accumulator tile ``grid`` (offsets
    of its elements, row by row) as mma.sync holds it: per 8x8 piece, thread ``t`` the two
    values of row ``t / 4`` from column ``2 (t % 4)``, one access where they are adjacent in
    memory (else one per value). Returns the first offsets, the lanes (one warp per piece:
    each piece is one instruction) and the elements per access."""
    t = np.arange(ir.WARP)
    row, column = t // 4, 2 * (t % 4)
    starts, lanes = [], []
    rows, columns = grid.shape
    pieces = [(r, c) for r in range(0, rows, PIECE) for c in range(0, columns, PIECE)]
    pairs = 1 if row_major else 2
    for n, (r, c) in enumerate(pieces):
        for value in range(pairs):
            starts.append(grid[r + row, c + column + value])
            lanes.append(t + (n * pairs + value) * ir.WARP)
    return np.concatenate(starts), np.concatenate(lanes), 2 // pairs

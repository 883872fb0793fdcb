"""What warp 0's accesses of a candidate cost: LSU wavefronts of loads, copies and stores.

From the threads, registers and assignment of each axis the warp spans, :class:`_Accesses`
lays out warp 0's lanes and the element offsets each touches, then counts an access's LSU
wavefronts: distinct 128-byte lines in global memory (coalescing), the busiest bank's
distinct words in shared memory (padding, conflicts), shared by a 16-byte vector's values
where the kernel's loads merge. Open decisions take their cheapest value, as in
:class:`~treduda.model.tiles._Tiles`, whose tiles and footprints these build on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..codegen.ir import VECTOR_BYTES
from ..once import once_per_key
from ..polyhedral import geometry
from ..polyhedral.geometry import dealt
from ..run.counters import SECTOR_BYTES
from .counts import _Read
from .tiles import ASSIGN, BLOCK, REG, _Tiles, candidate_property


class _Accesses(_Tiles):
    """A candidate's tiles (:class:`~treduda.model.tiles._Tiles`) and the wavefronts of its
    warps' accesses."""

    @candidate_property
    def warp_shape(self) -> tuple:
        """The decisions warp 0's lanes (:attr:`lanes`) depend on: the order, and the threads,
        registers and assignment of each axis the warp spans (x, then y and z while fewer
        lanes than a warp's precede them), up to the first that is open (None)."""
        shape: tuple = (self.p["order"],)
        lanes = 1
        for names in zip(BLOCK, REG, ASSIGN, strict=True):
            if lanes >= self.m.gpu.warp_size:
                break
            axis = tuple(self.p.get(name) for name in names)
            shape += axis
            if None in axis:
                break
            lanes *= axis[0]
        return shape

    @candidate_property
    def lanes(self) -> np.ndarray | None:
        """Warp 0's lanes, each as its registers along x, each register as its values along
        the axes the warp spans (x first, relative to the tile's origin): an array of lanes x
        registers x axes; None while a decision the warp's shape depends on is open.

        Lanes are threads in x-fastest order; a thread's coordinate along an axis is ``t``
        (cyclic, register ``r`` at ``t + r * block``) or ``t * reg`` (adjacent, ``+ r``); along
        a group it is decoded into the group's indices (:meth:`offsets`): block 0's tile starts
        at 0, so warp 0 sees where its values wrap from one index to the next. Remembered per
        process for the decisions they depend on (:func:`_warp_lanes`)."""
        shape = self.warp_shape
        if None in shape:  # an axis the warp spans is open
            return None
        # the model's own memo first: the process's takes locks, for thousands of candidates
        return self.memo(("lanes", shape), lambda: _warp_lanes(
            self.m.gpu.warp_size, self.m.vector_run, bool(self.order), shape[1:]))

    def offsets(self, strides: Mapping[str, int], group: int) -> np.ndarray:
        """The element offsets, at ``strides`` (a read's, indexed by its indices), of the first
        ``group`` registers of each lane of warp 0 (:attr:`lanes`; lanes x registers): a
        group's value X along its axis is c + S_c * (a + S_a * ..), its indices found by div
        and mod as the kernel does; an index the strides lack, or on an axis the warp does not
        span, adds nothing."""
        lanes = self.lanes[:, :group]
        if not self.order:
            return np.zeros(lanes.shape[:2], dtype=np.int64)
        found = 0
        for n in range(min(len(self.order), lanes.shape[2])):
            # a lane's registers differ along x alone: the other axes' values of its first
            values = lanes[:, :, 0] if n == 0 else lanes[:, :1, n]
            *faster, slowest = self.order[n]
            for i in faster:
                found = found + values % self.m.sizes[i] * strides.get(i, 0)
                values = values // self.m.sizes[i]
            found = found + values * strides.get(slowest, 0)
        return found

    def wavefronts(self, read: _Read, exact: bool = False) -> float:
        """LSU wavefronts per value a thread loads of ``read`` in the compute statement, from
        the addresses warp 0 loads: distinct cache lines (global) or the busiest bank's
        distinct words (shared). A thread's registers along x count as one access of up to 16
        bytes where they sit side by side (the kernel IR merges such neighbours into vector
        loads, :mod:`treduda.codegen.vectorize`). ``exact`` (the estimate), those that do not
        in a staged tile are accesses of their own, each with its conflicts
        (:meth:`_side_by_side`), unless the tile's fastest index is an unrolled summed one,
        along which ptxas merges a thread's loads as far as their alignment allows (GEMM
        4096^3 on the H100, A's tile read by 4 adjacent registers along i at 4 ways in
        Kernel.counters: 19.3 ms measured, 19.6 predicted with them merged, 44 apart; its SASS
        loads A by LDS.128 and LDS.32 mixed); the bound counts them as one, the fewest any
        schedule costs. In a staged tile whose rows are 16-byte aligned, neighbours along the
        reduction merge too (see :meth:`vectorisable`). An access's wavefronts are shared by
        its values, no fewer than a 16-byte vector's. While what decides it is open, the least
        any access costs: a wavefront shared by a 16-byte vector (for an open padding, the
        better of its values)."""
        staged = self.staged(read)
        if staged is None or self.lanes is None or (staged and not self.tiles_decided()):
            return self.m.least_wavefronts
        key = ("read", read, self.warp_shape, staged, exact, self.vectorisable(read))
        if staged:  # its tile, its padding
            key += (self.tile_decisions, self.options("pad"))
        return self.memo(key, lambda: self._wavefronts(read, staged, exact))

    def _wavefronts(self, read: _Read, staged: bool, exact: bool) -> float:
        least = self.m.least_wavefronts
        warp = self.lanes
        values = self.m.per_access(staged)
        grouped = bool(self.order) and self.order[0][0] in read.indices
        # a staged tile's registers whose loads stay apart: not where ptxas merges a thread's
        # neighbours along an unrolled reduction itself, as far as their alignment allows
        # (vectorisable); global reads pay per request (Model._request_wavefronts)
        separate = exact and staged and not self.vectorisable(read)

        def cost(strides: Mapping[str, int], reduction_vector: bool) -> float:
            group = len(warp[0][:values]) if grouped else 1
            fronts = self._fronts(read, strides, staged, group) / group
            if separate and not self._side_by_side(strides, group):
                fronts = max(fronts, self._fronts(read, strides, staged, 1))
            return max(least, fronts * (least if reduction_vector else 1.0))

        if not staged:
            return cost(read.strides, False)
        vector = self.vectorisable(read)
        return min(cost(self.tile_strides(read, pad), vector and self._aligned(read, pad))
                   for pad in self.options("pad"))

    def _inside(self, group: int) -> np.ndarray:
        """Which of the first ``group`` registers of warp 0's lanes (:attr:`lanes`) lie inside
        the output along every axis the warp spans: where an axis's extent is less than its
        tile, the others load nothing (tccg_07's rival: a of 48 on tiles of 64, 12 of x's 16
        threads load, 12-way conflicts in Kernel.counters where all 16 would make 16)."""
        lanes = self.lanes[:, :group]
        inside = np.ones(lanes.shape[:2], dtype=bool)
        for n in range(min(len(self.order), lanes.shape[2])):
            inside &= (lanes[:, :, 0] if n == 0 else lanes[:, :1, n]) < self.extents[n]
        return inside

    def _side_by_side(self, strides: Mapping[str, int], group: int) -> bool:
        """Whether each lane's first ``group`` registers along x sit side by side at
        ``strides``, so that one vector access loads them (:mod:`~treduda.codegen.vectorize`
        merges only such runs); else each register is an access of its own, with its own
        conflicts (one register's: the others' are its addresses shifted). tccg_07's rivals
        on the H200 read a staged tile of A by 4 adjacent registers along a, not the tile's
        fastest index: their SASS loads each by a scalar LDS, and their warps meet 12-way
        conflicts (Kernel.counters; 4 in the pick). They ran 1.33 ms, the pick 0.59 ms, where
        a merged access rated all three within 18%."""
        if group == 1:
            return True
        offsets = self.offsets(strides, group)
        return bool(np.all(offsets - offsets[:, :1] == np.arange(group)))

    def _fronts(self, read: _Read, strides: Mapping[str, int], staged: bool, group: int) -> int:
        """LSU wavefronts of warp 0's access to ``read`` at ``strides`` (the first ``group``
        registers of each lane's along x): distinct lines (global) or the busiest bank's
        words (shared); remembered per model for the warp's shape and the strides."""
        key = ("fronts", self.warp_shape, read, tuple(strides.items()), staged, group)

        def fronts() -> int:
            offsets = self.offsets(strides, group)[self._inside(group)]
            return self.m.lines(offsets) if not staged else self.m.bank_conflicts(offsets)

        return self.memo(key, fronts)

    def request_values(self, tensor: _Read) -> int:
        """Values one lane moves in one global request of ``tensor`` (outside a staged copy):
        its registers along x merged into one aligned vector access
        (:mod:`treduda.codegen.vectorize`) where they are adjacent along the tensor's fastest
        index and it has that index on x, as many as fill 16 bytes and divide the registers;
        else one (a scalar: one)."""
        if not tensor.indices:
            return 1
        fastest = geometry.fastest(self.m.program, tensor.indices)
        if not (self.m.vectorised and self.order and self.order[0][0] == fastest
                and self.p["assign_x"] == "adjacent"):
            return 1
        return math.gcd(self.p["reg_x"], self.m.per_access(False))

    def request_sectors(self, tensor: _Read) -> int:
        """Sectors of warp 0's first global request of ``tensor`` (Counts.sectors): each lane
        its :meth:`request_values` first registers along x; 0 while the warp is open."""
        if self.lanes is None:
            return 0
        values = self.request_values(tensor)
        key = ("request sectors", self.warp_shape, tensor, values)
        return self.memo(key, lambda: self.m.sectors(self.offsets(tensor.strides, values)))

    def sector_overhead(self, tensor: _Read) -> float:
        """Bytes moved between L2 and the SM per byte of ``tensor``'s block footprint per step
        (1 or more): the sectors of that box (Counts.box_sectors), each fetched once for the
        whole block, as a staged copy or the block's warps sharing L1 fetch it; 1 while the
        tiles are open, the least any completion moves."""
        if not self.tiles_decided():
            return 1.0
        box = {i: self.tile[i] for i in tensor.distinct}
        key = ("sector overhead", tensor, tuple(box.values()))
        return self.memo(key, lambda: self.m.box_sectors(tensor, box) * SECTOR_BYTES
                         / (math.prod(box.values()) * self.m.bytes))

    def request_overhead(self, tensor: _Read) -> float:
        """Bytes warps' global requests of ``tensor`` move between L2 and the SM per byte a
        thread loads or stores: :meth:`request_sectors` per request of a warp's
        :meth:`request_values` values each (below 1 where lanes share values); 0 while the
        warp is open."""
        values = self.m.gpu.warp_size * self.request_values(tensor)
        return self.request_sectors(tensor) * SECTOR_BYTES / (values * self.m.bytes)

    def _aligned(self, read: _Read, pad: int) -> bool:
        """Whether the rows of ``read``'s staged tile start on 16-byte boundaries."""
        row = self.tile_strides(read, pad)
        slowest = max(row.values())
        return slowest == 1 or all(v * self.m.shared_value % VECTOR_BYTES == 0
                                   for v in row.values() if v > 1)

    def vectorisable(self, read: _Read) -> bool:
        """Whether a thread may read neighbours of ``read`` in one vector access: its fastest
        index in memory (and in its tile) is a summed index the step's loop unrolls (or the
        unrolling is still open); a scalar (no index) has no neighbours."""
        if not read.indices:
            return False
        fastest = geometry.fastest(self.m.program, read.indices)
        return fastest in self.m.unrolled and self.p.get("unroll", True) is not False

    def tile_strides(self, read: _Read, pad: int) -> dict[str, int]:
        """Elements between neighbours along each index in the staged (padded) tile;
        remembered per model for the tile's extents and the padding."""
        key = ("strides", read, tuple(self.footprint(read).values()), self.vector_held, pad)
        return self.memo(key, lambda: {i: self._tile_stride(read, i, pad) for i in read.indices})

    def _tile_stride(self, read: _Read, index: str, pad: int) -> int:
        """Elements between neighbours along ``index`` in the staged (padded) tile."""
        if index not in read.indices:
            return 0
        extents = self.footprint(read)
        tile = geometry.padded(self.m.program, read.indices, [extents[i] for i in read.indices],
                               pad, self.p)
        pairs = list(zip(read.indices, tile, strict=True))
        stride = 1
        for i, extent in pairs if self.m.program.layout == "F" else reversed(pairs):
            if i == index:
                return stride
            stride *= extent
        return stride

    def copy_wavefronts(self, exact: bool = True) -> float:
        """Per FMA: LSU wavefronts of the copies into shared memory (a warp copies consecutive
        elements of the tile: the global lines they read, the bank conflicts of their stores),
        0 while undecided; not ``exact`` (for the bound), the least a load and a store cost:
        a wavefront shared by the values of a 16-byte vector access."""
        if not self.tiles_decided() or "stage" not in self.p:
            return 0.0
        threads = self.threads()
        pads = self.options("pad") if exact else None
        total = 0.0
        for r in self.m.reads:
            if self.staged(r):  # remembered for what the copy of its tile depends on
                key = ("copy", r, exact, threads, tuple(self.footprint(r).values()),
                       self.vector_held, pads)
                total += self.memo(key, lambda r=r: self._copy_wavefronts(r, exact))
        return total / self.fmas_per_block_step()

    def _copy_wavefronts(self, r: _Read, exact: bool) -> float:
        """The copy wavefronts of ``r``'s tile per block and step."""
        threads = self.threads()
        lanes = min(self.m.gpu.warp_size, threads)
        if not exact:  # the least a load and a store cost, whatever the elements
            volume = math.prod(self.copy_extents(r))
            return math.ceil(volume / threads) * math.ceil(threads / lanes) * (
                1 / self.m.per_access(False) + 1 / self.m.per_access(True))
        extents = self.footprint(r)
        padded = dict(zip(self.fastest_first(r), self.copy_extents(r), strict=True))
        volume = math.prod(padded.values())
        # warp 0's elements, the fastest index first, but for the padding's
        element = np.arange(min(lanes, volume))
        point, kept = {}, np.ones(element.size, dtype=bool)
        for i, extent in padded.items():
            point[i], element = element % extent, element // extent
            kept &= point[i] < extents[i]

        def offsets(strides: Mapping[str, int]) -> np.ndarray:
            found = np.zeros(int(kept.sum()), dtype=np.int64)
            for i in r.distinct:
                if i in point:
                    found += point[i][kept] * strides.get(i, 0)
            return found.reshape(-1, 1)

        read = self.m.lines(offsets(r.strides))
        write = min(self.m.bank_conflicts(offsets(self.tile_strides(r, pad)))
                    for pad in self.options("pad"))
        return math.ceil(volume / threads) * math.ceil(threads / lanes) * (read + write)

    def store_wavefronts(self, exact: bool = True) -> float:
        """LSU wavefronts per output value a thread stores; while the warp is open, and for
        the bound, the least a warp's store can cost per value: one, or where a warp's values
        fill less than a line (float16: 32 x 2 bytes of 128), that share of one (a thread's
        registers along x share lines: an estimate of 0.5 for a float16 GEMM's 4 registers,
        below the 1 the bound used to take)."""
        if self.lanes is None or not exact:
            g = self.m.gpu
            return min(1.0, g.warp_size * self.m.bytes / g.cache_line_bytes)
        return self.memo(("store", self.warp_shape), self._store_wavefronts)

    def _store_wavefronts(self) -> float:
        warp = self.lanes
        out = self.m.output
        group = warp[0] if self.order else warp[0][:1]
        return self.m.lines(self.offsets(out.strides, len(group))) / len(group)


@once_per_key(4096)
def _warp_lanes(warp: int, run: int, ordered: bool, shape: tuple) -> np.ndarray:
    """Warp 0's lanes x registers along x x values along each axis the warp spans
    (:attr:`_Accesses.lanes`), for ``shape``: the threads, registers and assignment of each
    spanned axis, x first (``run``: :func:`~treduda.polyhedral.geometry.vector_run`; not
    ``ordered``, no axis: every register at its thread's values). The same for every model
    with a warp of that shape, so remembered per process: read-only, the last 4096 shapes,
    each made once however many threads ask (:func:`~treduda.once.once_per_key`)."""
    axes = [shape[n:n + 3] for n in range(0, len(shape), 3)]
    count = min(math.prod(block for block, _, _ in axes), warp)
    lane = np.arange(count)
    values, below = [], 1
    for block, reg, assign in axes:
        values.append(dealt(assign, lane // below % block, 0, block, reg, run))
        below *= block
    block_x, reg_x, assign_x = axes[0]
    registers = np.arange(reg_x)
    x = dealt(assign_x, (lane % block_x)[:, None], registers[None, :], block_x, reg_x, run)
    found = np.empty((count, reg_x, len(axes)), dtype=np.int64)
    found[:, :, 0] = x if ordered else values[0][:, None]
    for n, along in enumerate(values[1:], 1):
        found[:, :, n] = along[:, None]
    found.flags.writeable = False
    return found

"""What one program costs on one GPU, whatever the candidate: the model's per-kernel counts.

A program's sizes, its multiply-adds and FLOPs, its reads and their strides in global memory,
the bytes every tensor moves at least, and how the addresses of one warp's access fall on
cache lines and shared-memory banks. :class:`Counts` holds them once per program and GPU;
each candidate's quantities (:class:`~treduda.model.optimist._Optimist`) are counted from
them, and :class:`~treduda.model.model.Model` adds the strategy and its predictions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codegen.ir import VECTOR_BYTES
from ..frontend import dtypes
from ..polyhedral import geometry
from ..polyhedral.lower import Kind, Program
from ..run.counters import SECTOR_BYTES, shared_wavefronts
from .gpus import Gpu

# Each lane's element offsets in one warp access: a lane per row, as lists or an array.
Offsets = Sequence[Sequence[int]] | np.ndarray


def _flat(accesses: Offsets) -> list[int]:
    """Every lane's offsets in one list (an array's, converted at once: counting them in
    Python sets beats numpy's sorting at a warp's few hundred values)."""
    if isinstance(accesses, np.ndarray):
        return accesses.ravel().tolist()
    return [offset for lane in accesses for offset in lane]


@dataclass(frozen=True, eq=False)
class _Read:
    """One tensor read inside a reduction: its indices and its memory strides (compared by
    identity: each is one read of one model, a key of the terms remembered for it)."""

    tensor: str
    indices: tuple[str, ...]
    strides: dict[str, int]  # index -> elements between neighbours in global memory

    @functools.cached_property
    def distinct(self) -> tuple[str, ...]:
        """Its indices, each once (a diagonal read repeats one)."""
        return tuple(dict.fromkeys(self.indices))


class Counts:
    """The counts of one fixed-size program on one GPU (what its model's candidates share)."""

    def __init__(self, program: Program, gpu: Gpu):
        self.program, self.gpu = program, gpu
        c = program.contraction
        self.sizes = program.sizes
        self.bytes = dtypes.itemsize(program.dtype)  # of a tensor's element, as stored
        self.shared_value = dtypes.itemsize(dtypes.compute(program.dtype))  # in a staged tile
        self.lanes = gpu.fma_lanes(dtypes.compute(program.dtype))
        self.fmas = dtypes.fmas(program.dtype)  # real FMAs per multiply-add
        # FP32 instructions per multiply-add (3xTF32: four), instructions per operand a thread
        # loads (TF32 rounding), and per element loaded from or stored to a stored type's
        # tensor (its conversion)
        self.fp_ops = self.fmas * dtypes.PRODUCT_OPERATIONS[program.precision]
        self.operand_ops = dtypes.OPERAND_OPERATIONS[program.precision]
        self.conversions = dtypes.CONVERSION_OPERATIONS if program.dtype in dtypes.STORED else 0
        # float16 and bfloat16 elements are converted one by one: no vector accesses
        # (treduda.codegen.vectorize)
        self.vectorised = program.dtype not in dtypes.STORED
        self.vector_run = geometry.vector_run(program)  # values of a `vector` assignment's run
        self.outputs = c.output_indices
        self.elements = math.prod(self.sizes[i] for i in self.outputs)
        reductions = [s for s in program.statements if s.kind == Kind.REDUCE]
        self.summed = [[self.sizes[i] for i in s.summed] for s in reductions]  # extents
        self.unrolled = geometry.unrolled_indices(program)  # what an unrolled step unrolls
        self.innermost = {s.summed[-1] for s in reductions if s.summed}  # per reduction point
        self.iterations = sum(math.prod(extents) for extents in self.summed)
        self.reads = [_Read(r.tensor, r.indices, self._strides(r.indices))
                      for r in geometry.summed_reads(program)]
        self.output = _Read(c.output, self.outputs, self._strides(self.outputs))
        # Terms the search asks for at many nodes, each remembered under the decisions it
        # depends on (see _Tiles.memo in treduda.model.tiles).
        self._known: dict[tuple, Any] = {}
        self.groups = max(1, len(program.accumulators))
        # the least LSU wavefronts a value loaded can cost: a 16-byte vector's share of one
        self.least_wavefronts = 1 / max(self.per_access(s) for s in (False, True))
        self.flops = 2.0 * self.fmas * self.elements * max(self.iterations, 1)
        touched = sum(math.prod(self.sizes[i] for i in idx) for idx in c.inputs.values())
        written = self.elements * (2 if c.reads_output or c.op != "=" else 1)
        self.compulsory = (touched + written) * self.bytes

    def _strides(self, indices: tuple[str, ...]) -> dict[str, int]:
        order = list(indices) if self.program.layout == "F" else list(reversed(indices))
        strides, stride = {}, 1
        for index in order:
            strides.setdefault(index, stride)
            stride *= self.sizes[index]
        return strides

    def per_access(self, staged: bool) -> int:
        """Values one access of a thread moves at most: a 16-byte vector's (of a staged
        tile's float32 values, or of a tensor's elements), or one where nothing is vectorised."""
        size = self.shared_value if staged else self.bytes
        return max(1, VECTOR_BYTES // size) if self.vectorised else 1

    def lines(self, accesses: Offsets) -> int:
        """Distinct cache lines one warp access touches, given each lane's element offsets:
        global loads are served per 128-byte line (CUDA C++ Best Practices Guide, "Coalesced
        Access to Global Memory"), one LSU wavefront each."""
        line = self.gpu.cache_line_bytes
        return max(1, len({offset * self.bytes // line for offset in _flat(accesses)}))

    def sectors(self, accesses: Offsets) -> int:
        """Distinct 32-byte sectors one warp request touches, given each lane's element
        offsets: what it moves between L2 and L1 (Nsight Compute's ``l1tex__t_sectors``; CUDA
        C++ Best Practices Guide, "Coalesced Access to Global Memory": 32-byte segments), so a
        coalesced fp32 warp takes 4, a float4 warp 16, a transposed one 32."""
        return max(1, len({byte // SECTOR_BYTES for offset in _flat(accesses)
                           for byte in (offset * self.bytes, (offset + 1) * self.bytes - 1)}))

    def box_sectors(self, tensor: _Read, box: Mapping[str, int]) -> float:
        """Sectors a block's box of ``tensor``'s elements covers (``box``: values per index,
        from a tile's origin), averaged over where its tiles and rows start within a sector:
        the box's contiguous runs (its fastest indices, as far as it spans them whole) each
        take the sectors from their first byte to their last. What moves between L2 and the
        SM when every warp of the block that needs a sector finds it there once."""
        order = list(tensor.distinct if self.program.layout == "F" else
                     reversed(tensor.distinct))
        if not order:  # a scalar: one element
            return 1.0
        # the run: the fastest indices the box spans whole, up to the first it does not
        last = next((n for n, i in enumerate(order) if box[i] < self.sizes[i]), len(order) - 1)
        run = math.prod(box[i] for i in order[:last + 1])
        rows = math.prod(box[i] for i in order[last + 1:])
        ends = order[last]
        # elements between the runs of neighbouring tiles, and between the rows of one box
        tiled = box[ends] * tensor.strides[ends] if box[ends] < self.sizes[ends] else 0
        row = tensor.strides[order[last + 1]] if last + 1 < len(order) else 0
        # offsets modulo a sector repeat after at most this many tiles or rows
        phases = SECTOR_BYTES // math.gcd(self.bytes, SECTOR_BYTES)
        starts = [(t * tiled + r * row) * self.bytes % SECTOR_BYTES
                  for t in range(phases) for r in range(phases)]
        size = run * self.bytes
        per_run = sum(-(-(start + size) // SECTOR_BYTES) for start in starts) / len(starts)
        return rows * per_run

    def bank_conflicts(self, accesses: Offsets) -> int:
        """Wavefronts of one warp's shared-memory access, given each lane's element offsets:
        the most distinct 32-bit words any bank holds (CUDA C++ Programming Guide, "Shared
        Memory" of compute capability 5.x and later: a word read by several lanes is broadcast,
        distinct words in one bank are serialised). The counters' rule
        (:func:`~treduda.run.counters.shared_wavefronts`) for an access of one word a lane:
        one phase of the whole warp, whatever its width. A 64- or 128-bit access is served in
        half- or quarter-warp phases, but pricing it so (tccg_09: -51% -> -2% on the H200)
        moved 27 of the SIMT economy table's 49 picks to kernels of a lower FFMA share
        (branch ulds, 2026-11-29), so the model keeps the one phase until ncu has measured
        the rule on cc 9.0."""
        offsets = _flat(accesses)
        if not offsets:
            return 1
        words = max(1, self.shared_value // self.gpu.shared_bank_bytes)
        addressed = np.array(offsets, np.int64) * words
        if words > 1:
            addressed = np.add.outer(addressed, np.arange(words)).ravel()
        lanes = np.zeros(addressed.size, np.int64)  # one phase: the whole warp
        return shared_wavefronts(addressed, lanes, self.gpu.shared_bank_bytes)[0]

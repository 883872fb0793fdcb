"""The emulator's mbarriers and bulk tensor copies (:data:`ir.MBARRIER_STATEMENTS`), run with
the asynchrony the hardware allows them.

Each mbarrier holds what PTX ISA 9.7.13.15.1 ("Contents of the mbarrier object") lists: its
phase (here the number of phases completed), the arrivals pending and expected per phase, and
the transaction count. A bulk tensor copy reads its box when it starts (inputs are read-only)
and keeps it in flight; its bytes complete on its mbarrier as late as the kernel lets them:
when a thread waits for a phase that cannot complete without them, one copy after another in
the order they started. In flight, its elements hold no value; once landed, only threads that
waited for the phase they landed in may touch them. So a kernel that reads a tile before its
phase completes is told so, as a GPU would let it read stale data.

Hazards (:class:`treduda.run.emulator.Hazard` kinds it adds):

* **unfinished tensor copy**: a shared element a bulk copy writes is accessed while the copy
  is in flight, or by a thread that has not waited for the phase in which it landed (a tile
  read before its barrier phase completes);
* **mbarrier never completes**: a wait for a phase that neither the arrivals to come nor the
  copies in flight complete (a GPU would spin for ever);
* **uninitialised mbarrier**: an arrive, wait or copy on an mbarrier no thread initialised,
  or that another thread initialised since the last barrier.

A copy's start is checked as the block checks every write (an MMA still reading the tile:
"unfinished wgmma"; a cp.async in flight to it: "unfinished async copy"); its landing writes
through the async proxy, so wgmma may read it with no proxy fence, while a thread's own store
into such a tile needs one again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..codegen import ir
from ..errors import TredudaError
from ..frontend.dtypes import itemsize
from .tensor_maps import encoding

if TYPE_CHECKING:
    from .emulator import _Block

# rows of an mbarrier array's state
COMPLETED, PENDING, EXPECTED, TRANSACTIONS = range(4)
CHUNK = 16  # bytes of a swizzle's unit, and the line the XOR reads starts at bit 7
SWIZZLE_ROW_SHIFT = 7


def tensor_map_swizzle(byte: np.ndarray, swizzle: int) -> np.ndarray:
    """Where the copy engine puts the byte at ``byte`` of a box landing in shared memory
    with the map's swizzle (``CU_TENSOR_MAP_SWIZZLE_32B/64B/128B``, CUDA driver API
    "cuTensorMapEncodeTiled": the 16-byte chunk's number within a 32-, 64- or 128-byte span
    XOR'd with the 128-byte row's number modulo 2, 4 or 8; the pattern repeats every 256, 512
    or 1024 bytes). Written here from the driver's description, apart from
    :func:`ir.swizzled`, so that the emulator checks one against the other."""
    if not swizzle:
        return byte
    chunks = swizzle // CHUNK
    row = (byte >> SWIZZLE_ROW_SHIFT) % chunks
    chunk = (byte // CHUNK) % chunks
    return byte - chunk * CHUNK + (chunk ^ row) * CHUNK


@dataclass
class _Flight:
    """A bulk copy in flight: what it will write where, its barrier and its bytes."""

    barrier: str
    number: int
    bytes: int
    array: str
    offsets: np.ndarray
    values: np.ndarray
    thread: int


class Transactions:
    """The mbarriers and bulk copies of one emulated block (see the module's doc)."""

    def __init__(self, block: _Block):
        self.block = block
        kernel = block.kernel
        self.maps = {m.name: m for m in kernel.tensor_maps}
        for tensor_map in kernel.tensor_maps:
            encoding(tensor_map, kernel.dtype)  # raises where the driver would refuse it
        self.barriers = {local.name: local.size for local in kernel.locals
                         if local.space is ir.Space.MBARRIER}
        # each barrier's number among all of them: what a landed element remembers
        self.first, total = {}, 0
        for name, size in self.barriers.items():
            self.first[name], total = total, total + size
        self.state = {name: np.zeros((4, size), np.int64) for name, size in self.barriers.items()}
        self.initialised = {name: np.full(size, -1) for name, size in self.barriers.items()}
        self.init_epoch = {name: np.full(size, -1) for name, size in self.barriers.items()}
        self.seen = np.zeros((block.count, max(total, 1)), np.int64)  # phases waited for
        tiles = {s.target.array for s in ir.nested(kernel.body) if isinstance(s, ir.TensorCopy)}
        self.in_flight = {t: np.zeros(block.arrays[t].shape, np.int64) for t in tiles}
        # per element: the barrier (number) of the phase it landed in (-1: none), and that
        # phase's number plus one, which a thread must have waited for
        self.landed_on = {t: np.full(block.arrays[t].shape, -1, np.int64) for t in tiles}
        self.landed_phase = {t: np.zeros(block.arrays[t].shape, np.int64) for t in tiles}
        self.flights: list[_Flight] = []

    def check(self, array: str, offsets: np.ndarray, lanes: np.ndarray, write: bool,
              started: bool) -> None:
        """An access of a tile bulk copies write: not in flight, and landed in a phase the
        accessing thread has waited for; a thread's own store clears that mark. A copy's
        start over landed elements (``started``) is ordered by other means: a barrier, or
        the wait for a stage's consumers (whose MMAs still reading it are "unfinished
        wgmma", a read of the new box before its phase this check's)."""
        flying = self.in_flight[array][offsets] > 0
        if flying.any():
            self.block.report("unfinished tensor copy", array, offsets, lanes, flying)
        on = self.landed_on[array][offsets]
        landed = on >= 0
        if landed.any() and not started:
            late = landed & (self.seen[lanes, np.maximum(on, 0)]
                             < self.landed_phase[array][offsets])
            if late.any():
                self.block.report("unfinished tensor copy", array, offsets, lanes, late)
        if write and not started:
            self.landed_on[array][offsets] = -1

    def run(self, s: ir.Stmt, active: np.ndarray) -> None:
        block = self.block
        threads = np.flatnonzero(active)
        name = s.barrier.array
        numbers = block.index(s.barrier.offset, active)[threads].astype(np.int64)
        outside = (numbers < 0) | (numbers >= self.barriers[name])
        if outside.any():
            block.report("out of bounds", name, numbers, threads, outside)
            return
        if isinstance(s, ir.MbarrierInit):
            state = self.state[name]
            state[:, numbers] = 0
            state[PENDING, numbers] = state[EXPECTED, numbers] = s.arrivals
            self.initialised[name][numbers] = threads
            self.init_epoch[name][numbers] = block.epoch
            if block.roles is not None:
                block.roles.changed()
            return
        unready = ((self.initialised[name][numbers] < 0)
                   | ((self.init_epoch[name][numbers] == block.epoch)
                      & (self.initialised[name][numbers] != threads)))
        if unready.any():
            block.report("uninitialised mbarrier", name, numbers, threads, unready)
            return
        if isinstance(s, ir.MbarrierArrive):
            for number, count in zip(*np.unique(numbers, return_counts=True), strict=True):
                self.state[name][TRANSACTIONS, number] += s.expect_bytes * count
                self.state[name][PENDING, number] -= count
                self.complete(name, int(number))
        elif isinstance(s, ir.MbarrierWait):
            parities = block.index(s.parity, active)[threads].astype(np.int64) % 2
            for number in np.unique(numbers):
                for parity in np.unique(parities[numbers == number]):
                    self.wait(name, int(number), int(parity),
                              threads[(numbers == number) & (parities == parity)])
        else:
            for thread in threads:
                self.start(s, int(thread), active, name, int(numbers[threads == thread][0]))

    def complete(self, name: str, number: int) -> None:
        """The phase completes where no arrival and no transaction byte is pending (a
        role waiting for another may go on: :mod:`.roles`)."""
        if self.block.roles is not None:
            self.block.roles.changed()
        state = self.state[name]
        if state[PENDING, number] <= 0 and state[TRANSACTIONS, number] == 0:
            state[COMPLETED, number] += 1
            state[PENDING, number] += state[EXPECTED, number]

    def wait(self, name: str, number: int, parity: int, threads: np.ndarray) -> None:
        """``threads`` wait until the phase of ``parity`` completed: copies on the barrier
        land, oldest first, while it is the current phase."""
        state = self.state[name]
        while state[COMPLETED, number] % 2 == parity:
            flight = next((f for f in self.flights
                           if f.barrier == name and f.number == number), None)
            if flight is None:
                roles = self.block.roles  # another role may yet arrive (warp specialisation)
                if roles is not None and roles.wait_for_others():
                    continue
                self.block.report("mbarrier never completes", name, np.array([number]),
                                  threads[:1], np.ones(1, bool))
                return
            self.land(flight)
        seen = self.seen[threads, self.first[name] + number]
        self.seen[threads, self.first[name] + number] = np.maximum(seen,
                                                                   state[COMPLETED, number])

    def land(self, flight: _Flight) -> None:
        """A copy's bytes complete on its barrier: its values are in shared memory, written
        through the async proxy, in the barrier's current phase."""
        self.flights.remove(flight)
        block, array, offsets = self.block, flight.array, flight.offsets
        block.arrays[array][offsets] = flight.values
        np.subtract.at(self.in_flight[array], offsets, 1)
        block.written[array][offsets] = True
        if array in block.unfenced:
            block.unfenced[array][offsets] = False
        self.landed_on[array][offsets] = self.first[flight.barrier] + flight.number
        self.landed_phase[array][offsets] = self.state[flight.barrier][COMPLETED,
                                                                       flight.number] + 1
        self.state[flight.barrier][TRANSACTIONS, flight.number] -= flight.bytes
        self.complete(flight.barrier, flight.number)

    def start(self, s: ir.TensorCopy, thread: int, active: np.ndarray, name: str,
              number: int) -> None:
        """``thread`` starts a copy of its box: read now, zeros outside the tensor, each
        element bound for where the map's swizzle puts it in the tile."""
        block = self.block
        tensor_map = self.maps.get(s.map)
        if tensor_map is None:
            raise TredudaError(f"the bulk copy reads tensor map '{s.map}', which the kernel "
                               "does not declare (KernelIR.tensor_maps)")
        coordinates = [int(block.index(c, active)[thread]) for c in s.coordinates]
        start = int(block.index(s.target.offset, active)[thread])
        size = itemsize(block.kernel.dtype)
        element = np.arange(tensor_map.box_elements)
        source, inside, rest = np.zeros_like(element), np.ones(element.size, bool), element
        for extent, stride, box, first in zip(tensor_map.extents, tensor_map.strides,
                                              tensor_map.box, coordinates, strict=True):
            along = first + rest % box
            rest = rest // box
            inside &= (along >= 0) & (along < extent)
            source += along * stride
        tensor = block.arrays[tensor_map.tensor]
        values = np.zeros(element.size, block.compute)
        values[inside] = tensor[source[inside]]
        offsets = self.placed(s.target.array, start + element, tensor_map.swizzle, size)
        if block.touch(s.target.array, offsets, np.full(offsets.size, thread), True,
                       started=True, raced=False) is None:
            return
        # 128 bytes (PTX ISA 9.7.9.25.5.1), and where the map swizzles, its pattern's whole
        # repeat of 8 lines, so that the XOR sees the lines the tile's swizzle sees
        if start * size % (8 * tensor_map.swizzle or ir.SHARED_ALIGNMENT):
            block.report("misaligned tensor copy", s.target.array, np.array([start]),
                         np.array([thread]), np.ones(1, bool))
        inside = (offsets >= 0) & (offsets < block.arrays[s.target.array].shape[-1])
        np.add.at(self.in_flight[s.target.array], offsets[inside], 1)
        self.flights.append(_Flight(name, number, tensor_map.box_elements * size,
                                    s.target.array, offsets[inside], values[inside], thread))

    def placed(self, array: str, offsets: np.ndarray, swizzle: int, size: int) -> np.ndarray:
        """The elements of ``array`` (as accesses name them, before its swizzle) that the
        copy engine writes for box elements at ``offsets``: the map's swizzle places them in
        memory, the tile's (an involution) names what is there."""
        physical = tensor_map_swizzle(offsets * size, swizzle) // size
        if array not in self.block.swizzles:
            return physical
        shift, bits = self.block.swizzles[array]
        return ir.swizzled(physical, shift, size, bits)

    def finish(self) -> None:
        """Copies still in flight when the block ends: nobody waited for them."""
        for flight in self.flights[:1]:
            self.block.report("unfinished tensor copy", flight.array, flight.offsets,
                              np.full(flight.offsets.size, flight.thread),
                              np.ones(flight.offsets.size, bool))

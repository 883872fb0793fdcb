"""A third backend: the kernel IR executed in numpy, block by block, with hazard checks.

PoCL runs the work-items of a group one after another between barriers, so a missing barrier
shows there only when that order happens to expose it, guard zones watch global buffers only,
and PoCL itself has miscomputed barrier kernels (see :mod:`treduda.run.opencl`). The emulator
is a second opinion that depends on no compiler. It runs every thread of a block at once, the
way a GPU runs a warp: iterators are numpy arrays over the block's threads and a mask says which
threads are active in a branch or loop. Integer arithmetic follows C (division truncates), so
what runs is what the printed kernel means. Between two barriers (an *epoch*) it records every
shared-memory access and reports, as :class:`Hazard`:

* a **race**: two threads touch the same shared element in one epoch and one of them writes;
* an **out-of-bounds** access to a shared, register or global array;
* a **divergent barrier**: a barrier that some threads of the block do not reach;
* an **uninitialised read** of a shared element no thread has written, or of a register
  element its own thread has not written;
* a **divergent warp**: a warp-collective statement (tensor cores) that only some threads of a
  warp reach, or whose operands differ between them;
* an **unfinished async copy**: an access to a shared element that an asynchronous copy
  (:class:`ir.AsyncCopy`) writes, after the copy started and before the wait of its thread that
  covers it has returned;
* an **unfinished wgmma**: a write of a shared element that a warpgroup MMA
  (:class:`ir.WarpgroupMultiply`) reads, after the MMA started and before a wait of its
  warpgroup (:class:`ir.WarpgroupWait`) covers its group;
* a **missing proxy fence**: a warpgroup MMA reads a shared element written through the
  generic proxy (a store, a cp.async once waited for) whose writer has not executed
  :class:`ir.ProxyFence` since;
* an **unfinished tensor copy**, a **misaligned tensor copy**, an **mbarrier** that **never
  completes** or is **uninitialised**: the mbarriers and bulk tensor copies, run with their
  asynchrony by :mod:`treduda.run.transactions`; the two roles of a warp-specialised split
  (:func:`ir.is_role_split`) run at once (:mod:`treduda.run.roles`).

A warpgroup statement runs once per warpgroup (128 threads), which must all reach it with the
same operands. An MMA computes its product when it starts and counts as its warpgroup's first
thread reading its operand tiles; its reads stay pending, for the hazard above, until a wait
retires its group.

Asynchronous copies are modelled as the hardware allows them to behave, not as the OpenCL twin
runs them: a copy reads its source when it starts, but its data land in shared memory only
when a :class:`ir.WaitCopies` of its thread covers its group (committed by
:class:`ir.CommitCopies`), recorded there as that thread's write. So a kernel that reads a
destination before the wait reads what was there before (and is told so), and one that reads
it in another thread without a barrier after the wait races.

A warp-collective statement runs once per warp, with its meaning in :mod:`treduda.codegen.ir`:
fragments are arrays of the warp, and the elements of a shared tile it reads or writes count as
accesses of the warp's threads (written: element ``e`` of the tile by thread ``e mod 32`` of the
warp, as the OpenCL twin does; read: by every thread of the warp, as any may).

It is slow (a Python step per IR statement executed), so it suits test sizes, not benchmarks.

It is also where the CPU counts what a profiler would: an *observer*
(:class:`treduda.run.counters.Tally`) sees every global and shared access of the warps as it is
executed, and may stop the kernel's main loop after a few steps.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..codegen import ir
from ..codegen.warpgroup import accumulator_column, accumulator_row
from ..errors import HazardError
from ..frontend.dtypes import compute, is_integer, itemsize, poison
from .launch import Launch
from .roles import Roles
from .transactions import Transactions

SHOWN = 3  # hazards of one kind reported per kernel; more add nothing a reader can use
ALL = slice(None)  # an index of every element: where an access falls inside its array


def _tf32(x: np.ndarray) -> np.ndarray:
    """``td_tf32`` of templates/precision.j2 on float32 values: the same bit operations."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(bits & np.uint32(0x7F800000) == 0x7F800000, x, rounded)


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a*b + c rounded once to float32, but for rare double roundings (the product of two
    float32 values is exact in float64, the sum rounds to float64 first)."""
    return (np.float64(a) * b + c).astype(np.float32)


def _tf32x3(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``td_tf32x3`` of templates/precision.j2."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    a_hi, b_hi = _tf32(a), _tf32(b)
    a_lo, b_lo = _tf32(a - a_hi), _tf32(b - b_hi)
    return _fma(a_hi, b_hi, _fma(a_hi, b_lo, a_lo * b_hi))


def _tf32_residual(x: np.ndarray) -> np.ndarray:
    """``td_tf32_lo`` of templates/precision.j2."""
    x = np.asarray(x, np.float32)
    return _tf32(x - _tf32(x))


CALLS = {ir.Function.TF32: _tf32, ir.Function.TF32X3: _tf32x3,
         ir.Function.TF32_RESIDUAL: _tf32_residual}


@dataclass(frozen=True)
class Hazard:
    """One problem found in block ``block``: ``kind`` is "race", "out of bounds", "divergent
    barrier", "uninitialised read", "divergent warp", "unfinished async copy", "unfinished
    wgmma", "missing proxy fence", "unfinished tensor copy", "misaligned tensor copy",
    "mbarrier never completes", "uninitialised mbarrier" (:mod:`.transactions`) or "reused
    memory" (a tile accessed after a tile that takes over its memory was written, or while
    that was written: no barrier between; :attr:`ir.Local.reuses`); ``threads`` are linear
    thread ids (x fastest)."""

    kind: str
    block: tuple[int, ...]
    array: str = ""
    offset: int = -1
    epoch: int = 0  # barriers passed before the access
    threads: tuple[int, ...] = ()

    def __str__(self) -> str:
        where = f"block {self.block}, after {self.epoch} barrier(s)"
        if self.kind == "divergent barrier":
            return f"{where}: a barrier is reached by only some threads"
        return (f"{where}: {self.kind} on {self.array}[{self.offset}] "
                f"(thread{'s' if len(self.threads) > 1 else ''} "
                f"{', '.join(map(str, self.threads))})")


class Observer(Protocol):
    """What a counter of accesses sees of an emulated block (:mod:`treduda.run.counters`):
    ``main``, the loop it calls the main loop (None: none), and ``steps``, how many of its
    iterations to run (None: all); where none, ``ends``, the statement after which the main
    body (from the kernel's start) ends (None: the kernel's end)."""

    main: ir.For | None
    steps: int | None
    ends: ir.Stmt | None

    def begin(self) -> None:
        """A block starts."""

    def region(self, inside: bool) -> None:
        """The main loop starts (``inside``) or ends."""

    def barrier(self) -> None:
        """The block passed a barrier."""

    def access(self, array: str, offsets: np.ndarray, lanes: np.ndarray, width: int,
               write: bool, asynchronous: bool = False, atomic: bool = False) -> None:
        """Threads ``lanes`` access ``array[offsets .. offsets + width - 1]``, one instruction
        (an asynchronous copy's, an atomic update's)."""

    def tile(self, kind: ir.Fragment, array: str, offsets: np.ndarray, row_major: bool,
             write: bool) -> None:
        """A warp loads or stores the fragment-shaped tile whose elements, row by row, are
        ``array[offsets]``, its rows (``row_major``) or columns adjacent in memory."""


def run_emulated(kernel: ir.KernelIR, launch: Launch,
                 then: Sequence[ir.KernelIR] = ()) -> np.ndarray:
    """Run every block of ``launch`` (and of the kernels ``then`` it runs after ``kernel``);
    raise :class:`HazardError` if any hazard is found."""
    result, found = emulate(kernel, launch, then=then)
    if found:
        raise HazardError(f"{launch.name}: " + "; ".join(map(str, found)))
    return result


def corners(grid: tuple[int, int, int]) -> list[tuple[int, ...]]:
    """The blocks at the corners of the grid: the first, and those holding partial tiles."""
    return sorted(set(itertools.product(*({0, g - 1} for g in grid))))


def emulate(kernel: ir.KernelIR, launch: Launch,
            blocks: Iterable[tuple[int, ...]] | None = None,
            then: Sequence[ir.KernelIR] = ()) -> tuple[np.ndarray, list[Hazard]]:
    """Run ``blocks`` (all of the grid by default) on a copy of the launch's arguments, then
    the kernels ``then`` of ``launch.then`` in order (all their blocks, or where ``blocks`` are
    given their :func:`corners`); the output they computed and the hazards found, at most
    :data:`SHOWN` of a kind."""
    memory = {p.name: np.array(v, copy=True) for p, v in zip(kernel.params, launch.values,
                                                              strict=True)}
    for p in kernel.params:
        if p.kind is ir.ParamKind.WORKSPACE:
            # Poison, as in any memory no statement set, not what np.empty left there: a later
            # kernel reads the parts of blocks left out of ``blocks`` too (a split's sum),
            # and arbitrary bits overflow, or meet their own infinities, in its arithmetic.
            memory[p.name].fill(poison(memory[p.name].dtype.name))
    every = blocks is None
    if every:
        blocks = itertools.product(*map(range, launch.grid))
    shared = _Shared(kernel)
    found = [h for b in blocks
             for h in _Block(kernel, launch.block, b, memory, shared).run()]
    for later, call in zip(then, launch.then, strict=True):
        grid = itertools.product(*map(range, call.grid)) if every else corners(call.grid)
        shared = _Shared(later)
        found += [h for b in grid
                  for h in _Block(later, call.block, b, memory, shared).run()]
    shown, per_kind = [], Counter()
    for hazard in found:
        per_kind[hazard.kind] += 1
        if per_kind[hazard.kind] <= SHOWN:
            shown.append(hazard)
    return launch.result(memory[kernel.params[launch.output_position].name]), shown


def observe(kernel: ir.KernelIR, launch: Launch, blocks: Iterable[tuple[int, ...]],
            observer: Observer) -> None:
    """Run ``blocks`` of ``launch`` for ``observer``'s sake: on the launch's own arrays (the
    output is written into its array; inputs are only read, so they may be read-only views),
    hazards left unreported (a main loop cut short leaves copies in flight)."""
    memory = {p.name: v for p, v in zip(kernel.params, launch.values, strict=True)}
    shared = _Shared(kernel)
    for block in blocks:
        observer.begin()
        _Block(kernel, launch.block, block, memory, shared, observer).run()


class _Shared:
    """What the blocks of one kernel share, found once for it: its loop iterators, whether it
    has warpgroup MMAs or mbarriers, and the index expressions' evaluators
    (:func:`ir.evaluator`, by id). Walking the kernel's body for every block took a tenth of a
    small kernel's emulation."""

    def __init__(self, kernel: ir.KernelIR):
        statements = list(ir.nested(kernel.body))
        self.iterators = {s.iterator for s in statements if isinstance(s, ir.For)}
        self.proxied = any(isinstance(s, ir.WarpgroupMultiply) for s in statements)
        self.transacted = any(isinstance(s, ir.MBARRIER_STATEMENTS) for s in statements)
        self.compiled: dict[int, tuple[ir.Expr, ir.Evaluator, bool]] = {}


class _Block:
    """The emulation of one block: every thread at once, a mask for the active ones."""

    def __init__(self, kernel: ir.KernelIR, shape: tuple[int, int, int],
                 block: tuple[int, ...], memory: dict[str, Any], shared: _Shared,
                 observer: Observer | None = None):
        """``shared``: what the blocks of ``kernel`` share."""
        self.kernel, self.block, self.observer = kernel, block, observer
        self.widened = False  # in a vector access or copy, whose lanes the observer sees once
        bx, by, bz = shape
        self.count = bx * by * bz
        lane = np.arange(self.count)
        self.threads = (lane % bx, lane // bx % by, lane // (bx * by))
        dtype = self.compute = np.dtype(compute(kernel.dtype))  # tensors may be stored narrower
        unset = poison(kernel.dtype)  # NaN, or an integer type's most negative value
        self.unread = poison(self.compute.name)  # what a thread reads where it reads nothing
        self.integer = is_integer(self.compute.name)
        self.env: dict[str, Any] = {p.name: int(memory[p.name]) for p in kernel.params
                                    if p.kind is ir.ParamKind.SIZE}  # integers: sizes, loops
        # the sizes no loop iterator shadows: fixed in a block, as thread ids are
        self.fixed = set(self.env) - shared.iterators
        self.compiled = shared.compiled
        self.memo: dict[int, Any] = {}  # the values of the parts fixed in this block
        self.statics: dict[int, np.ndarray] = {}  # index expressions fixed in this block
        self.mask: tuple[np.ndarray, np.ndarray, bool] | None = None  # see lanes_of
        self.scalars = {p.name: dtype.type(memory[p.name]) for p in kernel.params
                        if p.kind is ir.ParamKind.SCALAR}
        self.arrays = {p.name: memory[p.name] for p in kernel.params
                       if p.kind in (ir.ParamKind.INPUT, ir.ParamKind.OUTPUT,
                                     ir.ParamKind.WORKSPACE)}
        self.shared, self.registers = set(), set()
        # tiles whose memory a later one takes over: reused tile -> the tile that takes it
        self.taken_by = {name: local.name for local in kernel.locals for name in local.reuses}
        self.taken: set[str] = set()  # tiles whose memory was taken over (written since)
        self.takers = set(self.taken_by.values())
        self.fragments: dict[str, tuple[ir.Local, np.ndarray]] = {}  # [warp, fragment, element]
        self.swizzles = {local.name: (local.swizzle, local.swizzle_bits)
                         for local in kernel.locals if local.swizzle}
        warps = -(-self.count // ir.WARP)
        for local in kernel.locals:
            if local.space in (ir.Space.GLOBAL, ir.Space.MBARRIER):
                continue  # a workspace: an argument, in memory already; mbarriers: Transactions
            if local.space is ir.Space.FRAGMENT:
                self.fragments[local.name] = (local, np.full(
                    (warps, local.size, local.fragment.elements), unset, dtype))
                continue
            if not local.shape:  # a scalar register: one value per thread
                self.scalars[local.name] = np.full(self.count, unset, dtype)
            elif local.space is ir.Space.SHARED:
                self.arrays[local.name] = np.full(local.size, unset, dtype)
                self.shared.add(local.name)
            else:
                self.arrays[local.name] = np.full((self.count, local.size), unset, dtype)
                self.registers.add(local.name)
        # Which elements hold a value: shared ones for the block, registers for each thread.
        self.written = {name: np.zeros(self.arrays[name].shape, dtype=bool)
                        for name in self.shared | self.registers}
        self.sizes = {name: np.uint64(array.shape[-1]) for name, array in self.arrays.items()}
        self.vectors: dict[str, np.ndarray] = {}  # per thread, the lanes of a VectorLoad
        self.epoch = 0
        # the shared accesses since the last barrier, by array: offsets, threads, write
        self.accesses: dict[str, list[tuple[np.ndarray, np.ndarray, bool]]] = {}
        self.hazards: list[Hazard] = []
        # Asynchronous copies in flight: per copy its array, offsets, threads, values and each
        # element's group (-1 until its thread commits); per thread the groups it committed;
        # per shared element the copies in flight to it.
        self.copies: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.committed = np.zeros(self.count, dtype=np.int64)
        self.in_flight = {name: np.zeros(self.arrays[name].shape, dtype=np.int64)
                          for name in self.shared}
        # Warpgroup MMAs not yet waited for: their warpgroup, group (-1 until committed),
        # array and the offsets they read; per warpgroup the groups it committed; per shared
        # element the MMAs reading it.
        self.mmas: list[tuple[int, int, str, np.ndarray]] = []
        self.mma_groups = np.zeros(-(-self.count // ir.WARPGROUP), dtype=np.int64)
        self.mma_reading = {name: np.zeros(self.arrays[name].shape, dtype=np.int64)
                            for name in self.shared}
        # per shared element: written through the generic proxy, its writer unfenced since
        # (asked only by warpgroup MMAs, so kept only in kernels that have them)
        self.unfenced = {name: np.zeros(self.arrays[name].shape, dtype=bool)
                         for name in self.shared if shared.proxied}
        self.writer = {name: np.zeros(self.arrays[name].shape, dtype=np.int64)
                       for name in self.shared if shared.proxied}
        self.transactions = Transactions(self) if shared.transacted else None
        self.bulk_tiles = self.transactions.in_flight if self.transactions else {}
        self.roles: Roles | None = None  # the role split running (warp specialisation)
        self.splits: dict[int, bool] = {}  # by the If's id: whether it is one

    def role_split(self, s: ir.If) -> bool:
        """Whether the branches of ``s`` run at once (:func:`ir.is_role_split`)."""
        if self.transactions is None:
            return False
        found = self.splits.get(id(s))
        if found is None:
            found = self.splits[id(s)] = ir.is_role_split(s)
        return found

    def run(self) -> list[Hazard]:
        # an integer kernel's values wrap on purpose (numpy warns where scalars overflow)
        with np.errstate(over="ignore" if is_integer(self.compute.name) else "warn"):
            self.walk(self.kernel.body, np.ones(self.count, dtype=bool))
        if self.transactions is not None:
            self.transactions.finish()
        self.end_epoch()
        return self.hazards

    def index(self, e: ir.Expr, active: np.ndarray) -> np.ndarray:
        """The value of integer expression ``e`` per thread (:func:`ir.evaluate`), read-only
        where it depends on no loop iterator (computed once, at its first use)."""
        _, function, varies = self.evaluator(e)
        if not varies:
            value = self.statics.get(id(e))
            if value is None:
                value = self.statics[id(e)] = np.broadcast_to(
                    function(self.env, self.threads, self.block, self.memo), active.shape)
            return value
        value = function(self.env, self.threads, self.block, self.memo)
        if type(value) is np.ndarray and value.shape == active.shape:
            return value
        return np.broadcast_to(value, active.shape)

    def uniform(self, e: ir.Expr) -> Any:
        """The value of integer expression ``e`` where it is one integer for every thread
        (it depends on no thread id, and loop iterators it reads are integers); else None."""
        value = self.evaluator(e)[1](self.env, self.threads, self.block, self.memo)
        return value if np.ndim(value) == 0 else None

    def evaluator(self, e: ir.Expr) -> tuple[ir.Expr, ir.Evaluator, bool]:
        """``e``, its evaluator and whether it varies in a block (:func:`ir.evaluator`),
        made once for the kernel."""
        found = self.compiled.get(id(e))
        if found is None:  # e kept with it: its id stays its own
            found = self.compiled[id(e)] = (e, *ir.evaluator(e, self.fixed))
        return found

    def lanes_of(self, active: np.ndarray) -> tuple[np.ndarray, bool]:
        """The threads of mask ``active`` and whether it holds all of them, remembered for
        the last mask asked about (masks are never changed in place)."""
        if self.mask is None or self.mask[0] is not active:
            self.mask = (active, np.flatnonzero(active), bool(active.all()))
        return self.mask[1], self.mask[2]

    def walk(self, s: ir.Stmt, active: np.ndarray) -> None:
        if not active.any():
            return
        if type(s) is ir.Assign:  # the most frequent statement first
            self.assign(s, active)
        elif isinstance(s, ir.Block):
            for child in s.body:
                self.walk(child, active)
        elif isinstance(s, ir.Barrier):
            if not (active.all() if s.threads is None
                    else active[:s.threads].all() and not active[s.threads:].any()):
                self.hazards.append(Hazard("divergent barrier", self.block, epoch=self.epoch))
            self.end_epoch()
            if self.observer is not None:
                self.observer.barrier()
        elif isinstance(s, ir.If):
            taken = self.index(s.condition, active).astype(bool)
            if self.role_split(s) and (active & taken).any() and (active & ~taken).any():
                Roles(self).run([(s.then, active & taken), (s.otherwise, active & ~taken)],
                                self.walk)
                return
            self.walk(s.then, active & taken)
            if s.otherwise is not None:
                self.walk(s.otherwise, active & ~taken)
        elif isinstance(s, ir.For):
            self.loop(s, active)
        elif isinstance(s, ir.WARP_STATEMENTS):
            for warp in np.unique(np.flatnonzero(active) // ir.WARP):
                self.warp_statement(s, active, int(warp))
        elif isinstance(s, ir.VectorLoad):  # lane by lane: each element checked on its own
            self.observe(s.first, active, s.width, False)
            self.vectors[s.vector] = np.stack([self.value(lane, active)
                                               for lane in ir.lanes(s.first, s.width)], axis=1)
            self.widened = False
        elif isinstance(s, ir.VectorStore):
            # its values first: the loads they make lane by lane (the tensor-core write's C
            # tile where its lanes lie apart) are accesses of their own, which the vector
            # store's single observation would hide
            values = [self.value(value, active) for value in s.values]
            self.observe(s.first, active, len(s.values), True)
            for lane, value in zip(ir.lanes(s.first, len(s.values)), values, strict=True):
                self.store(lane, value, active)
            self.widened = False
        elif isinstance(s, ir.AsyncCopy) and s.source.array in self.shared:
            self.scatter(s, active)
        elif isinstance(s, ir.AsyncCopy):
            self.start_copy(s, active)
        elif isinstance(s, ir.CommitCopies):
            for _, _, lanes, _, group in self.copies:
                opened = active[lanes] & (group < 0)
                group[opened] = self.committed[lanes[opened]]
            self.committed[active] += 1
        elif isinstance(s, ir.WaitCopies):
            self.finish_copies(s.pending, active)
        elif isinstance(s, ir.WARPGROUP_STATEMENTS):
            for group in np.unique(np.flatnonzero(active) // ir.WARPGROUP):
                self.warpgroup_statement(s, active, int(group))
            if self.observer is not None and s is self.observer.ends:
                self.observer.region(False)
        elif isinstance(s, ir.ProxyFence):
            for name, unfenced in self.unfenced.items():
                unfenced &= ~active[self.writer[name]]
        elif isinstance(s, ir.MBARRIER_STATEMENTS):
            self.transactions.run(s, active)
        else:
            self.assign(s, active)

    def loop(self, s: ir.For, active: np.ndarray) -> None:
        outer = self.env.get(s.iterator)
        # An iterator the same for every thread is one integer (its arithmetic then costs no
        # array operation), until the threads part ways.
        start = self.uniform(s.start)
        self.env[s.iterator] = start if start is not None else self.index(s.start,
                                                                            active).copy()
        main = self.observer is not None and s is self.observer.main
        steps = self.observer.steps if main else None
        if main:
            self.observer.region(True)
        while steps is None or steps > 0:
            running = active & self.index(s.condition, active).astype(bool)
            if not running.any():
                break
            self.walk(s.body, running)
            at, step = self.env[s.iterator], self.uniform(s.step)
            if np.ndim(at) == 0 and step is not None and np.array_equal(running, active):
                self.env[s.iterator] = at + step
            else:
                self.env[s.iterator] = np.where(running, at + self.index(s.step, active), at)
            steps = None if steps is None else steps - 1
        if main:
            self.observer.region(False)
        if outer is None:
            del self.env[s.iterator]
        else:
            self.env[s.iterator] = outer

    def assign(self, s: ir.Assign, active: np.ndarray) -> None:
        value = self.value(s.value, active)
        if not (type(value) is np.ndarray and value.shape == active.shape):
            value = np.broadcast_to(value, active.shape)
        if s.op != "=":
            sign = 1 if s.op == "+=" else -1
            widened, self.widened = self.widened, self.widened or s.atomic  # an atomic
            value = self.value(s.target, active) + sign * value  # addition loads nothing
            self.widened = widened
        if isinstance(s.target, ir.Var):
            self.scalars[s.target.name] = np.where(active, value, self.scalars[s.target.name])
            return
        found = self.locate(s.target, active, write=True, atomic=s.atomic)
        if found is not None:
            where, inside = found
            if not self.lanes_of(active)[1]:
                value = value[active]
            self.arrays[s.target.array][where] = value[inside]

    def value(self, e: ir.Expr, active: np.ndarray) -> Any:
        """A value of the kernel's dtype, per thread (NaN, or an integer type's most negative
        value, where a thread reads nothing); integer arithmetic wraps as the kernel's does."""
        if isinstance(e, ir.Load):
            found = self.locate(e, active, write=False)
            if found is None:
                return np.full(self.count, self.unread, self.compute)
            where, inside = found
            threads, every = self.lanes_of(active)
            if every and inside is ALL:  # every thread reads: nothing left unread
                return self.arrays[e.array][where].astype(self.compute, copy=False)
            read = np.full(self.count, self.unread, self.compute)  # converted
            read[threads[inside]] = self.arrays[e.array][where]
            return read
        if isinstance(e, ir.Float):
            return self.compute.type(e.value) if self.integer else e.value
        if isinstance(e, ir.Lane):
            return self.vectors[e.vector][:, e.lane]
        if isinstance(e, ir.Var) and e.name in self.scalars:
            return self.scalars[e.name]
        if isinstance(e, ir.Binary) and e.op in (ir.Op.ADD, ir.Op.SUB, ir.Op.MUL, ir.Op.DIV):
            return ir.apply(e.op, self.value(e.left, active), self.value(e.right, active))
        if isinstance(e, ir.Neg):
            return -self.value(e.operand, active)
        if isinstance(e, ir.Call):
            return CALLS[e.function](*(self.value(a, active) for a in e.args))
        if isinstance(e, ir.Select):
            return np.where(self.index(e.condition, active).astype(bool),
                            self.value(e.if_true, active), self.value(e.if_false, active))
        return self.index(e, active)  # an integer used as a value

    def warp_statement(self, s: ir.Stmt, active: np.ndarray, warp: int) -> None:
        """One warp-collective statement for the threads of ``warp``, which must all be
        active and agree on its operands."""
        lanes = np.arange(warp * ir.WARP, min((warp + 1) * ir.WARP, self.count))
        operands = {}
        for field in ("fragment", "first", "accumulator", "a", "b", "addend"):
            operand = getattr(s, field, None)
            if operand is not None:
                values = self.index(operand.offset, active)[lanes]
                if not (active[lanes].all() and (values == values[0]).all()):
                    self.hazards.append(Hazard("divergent warp", self.block, operand.array,
                                               int(values[0]), self.epoch, (int(lanes[0]),)))
                    return
                if operand.array in self.fragments and not (
                        0 <= values[0] < self.fragments[operand.array][0].size):
                    self.hazards.append(Hazard("out of bounds", self.block, operand.array,
                                               int(values[0]), self.epoch, (int(lanes[0]),)))
                    return
                operands[field] = (operand.array, int(values[0]))
        if isinstance(s, ir.FillFragment):
            self.fragment(*operands["fragment"], warp)[:] = s.value.value
        elif isinstance(s, ir.LoadFragment):
            kind = self.fragments[s.fragment.array][0].fragment
            values = self.tile(kind, operands["first"], s.ld, kind.row_major, lanes, False,
                               columns=s.columns)
            if s.rounding is not None:
                values = CALLS[s.rounding](values)
            rows, columns = kind.rows_columns
            filled = self.fragment(*operands["fragment"], warp).reshape(rows, columns)
            filled[:, :s.columns] = values.reshape(rows, -1)
        elif isinstance(s, ir.MultiplyAccumulate):
            kind = self.fragments[s.accumulator.array][0].fragment
            m, n, k = kind.shape
            a = self.fragment(*operands["a"], warp).reshape(m, k).astype(np.float64)
            b = self.fragment(*operands["b"], warp).reshape(k, n).astype(np.float64)
            accumulator = self.fragment(*operands["accumulator"], warp).reshape(m, n)
            accumulator[:, :s.columns] += a @ b[:, :s.columns]  # its leading columns only
        elif isinstance(s, ir.AddFragment):
            self.fragment(*operands["accumulator"], warp)[:] += self.fragment(
                *operands["addend"], warp)
        else:
            kind = self.fragments[s.fragment.array][0].fragment
            values = self.fragment(*operands["fragment"], warp)
            self.tile(kind, operands["first"], s.ld, s.row_major, lanes, True, values)

    def warpgroup_statement(self, s: ir.Stmt, active: np.ndarray, group: int) -> None:
        """One warpgroup statement for the threads of ``group``, which must all be active
        and agree on its operands (:class:`ir.WarpgroupMultiply` for the MMA's meaning)."""
        lanes = np.arange(group * ir.WARPGROUP, min((group + 1) * ir.WARPGROUP, self.count))
        if not active[lanes].all():
            self.hazards.append(Hazard("divergent warp", self.block, type(s).__name__, -1,
                                       self.epoch, (int(lanes[0]),)))
            return
        if isinstance(s, ir.WarpgroupCommit):
            opened = [n for n, mma in enumerate(self.mmas) if mma[0] == group and mma[1] < 0]
            for n in opened:
                self.mmas[n] = (group, int(self.mma_groups[group]), *self.mmas[n][2:])
            self.mma_groups[group] += 1
            return
        if isinstance(s, ir.WarpgroupWait):
            kept = []
            for mma in self.mmas:
                owner, number, array, offsets = mma
                if owner == group and 0 <= number < self.mma_groups[group] - s.pending:
                    np.subtract.at(self.mma_reading[array], offsets, 1)
                else:
                    kept.append(mma)
            self.mmas = kept
            return
        if isinstance(s, (ir.WarpgroupFence, ir.SetMaxRegisters)):
            return  # an order, a register budget: no value changes
        starts = {}
        for field in ("accumulator", "a", "b"):
            operand = getattr(s, field)
            values = self.index(operand.offset, active)[lanes]
            if not (values == values[0]).all():
                self.hazards.append(Hazard("divergent warp", self.block, operand.array,
                                           int(values[0]), self.epoch, (int(lanes[0]),)))
                return
            starts[field] = int(values[0])
        m, n, k = s.shape
        size = itemsize(self.kernel.dtype)
        operands = []
        for field, rows, layout in (("a", m, s.a_layout), ("b", n, s.b_layout)):
            array = getattr(s, field).array
            row, kk = np.divmod(np.arange(rows * k), k)
            offsets = starts[field] + ir.evaluate(
                layout.offset(ir.Var("row"), ir.Var("k"), size), {"row": row, "k": kk})
            unfenced = self.unfenced[array][offsets]
            if unfenced.any():
                self.report("missing proxy fence", array, offsets,
                            np.repeat(lanes[:1], offsets.size), unfenced)
            self.touch(array, offsets, np.repeat(lanes[:1], offsets.size), False)
            operands.append(self.arrays[array][offsets].reshape(rows, k).astype(np.float64))
            np.add.at(self.mma_reading[array], offsets, 1)
            self.mmas.append((group, -1, array, offsets))
        product = operands[0] @ operands[1].T
        thread = np.repeat(np.arange(lanes.size), n // 2)
        register = np.tile(np.arange(n // 2), lanes.size)
        env = {"thread": thread, "register": register}
        rows, columns = (ir.evaluate(place(ir.Var("thread"), ir.Var("register")), env)
                         for place in (accumulator_row, accumulator_column))
        accumulator = s.accumulator.array
        where = (lanes[thread], starts["accumulator"] + register)
        self.touch(accumulator, where[1], where[0], False)
        self.arrays[accumulator][where] += product[rows, columns]

    def start_copy(self, s: ir.AsyncCopy, active: np.ndarray) -> None:
        """Each active thread's copy starts: its source is read now (inputs are read-only),
        its destination, which no access may touch until the copy is waited for, is marked in
        flight, and what it will write is kept for the wait."""
        threads = np.flatnonzero(active)
        reading = np.zeros_like(active) if s.zero else active.copy()
        if s.reads is not None:  # the others zero-fill, their sources never read
            reading &= self.index(s.reads, active).astype(bool)
        asynchronous = s.stride == 1  # else a vector load, its elements stored one by one
        if reading.any():  # a copy of src-size 0 reads nothing
            self.observe(s.source, reading, s.width, False, asynchronous=asynchronous)
        targets = ir.lanes(s.target, s.width, s.stride)
        for target in targets if not asynchronous else targets[:1]:
            self.observe(target, active, s.width if asynchronous else 1, True,
                         asynchronous=asynchronous)
        for target, source in zip(targets, ir.lanes(s.source, s.width), strict=True):
            values = np.zeros(self.count, self.compute)
            if reading.any():
                values = np.where(reading, self.value(source, reading), values)
            values = values[threads]
            offsets = self.index(target.offset, active)[active].astype(np.int64)
            if self.touch(target.array, offsets, threads, True, started=True) is None:
                continue
            inside = (offsets >= 0) & (offsets < self.arrays[target.array].shape[-1])
            where = offsets[inside]
            np.add.at(self.in_flight[target.array], where, 1)
            self.copies.append((target.array, where, threads[inside], values[inside],
                                np.full(where.size, -1)))
        self.widened = False

    def scatter(self, s: ir.AsyncCopy, active: np.ndarray) -> None:
        """A strided copy from a staged shared tile (:attr:`ir.AsyncCopy.stride`): one vector
        load of the source (and of its paired run) and a store per element (per pair), now,
        as the thread's own accesses (the source must have landed, the targets are the
        generic proxy's writes)."""
        runs = (s.source,) if s.paired is None else (s.source, s.paired)
        values = []
        for run in runs:
            self.observe(run, active, s.width, False)
            values.append([self.value(lane, active) for lane in ir.lanes(run, s.width)])
            self.widened = False
        for n, target in enumerate(ir.lanes(s.target, s.width, s.stride)):
            if len(runs) > 1:  # one 32-bit store of the pair, its elements seen as one access
                self.observe(target, active, len(runs), True)
            for place, run in zip(ir.lanes(target, len(runs)), values, strict=True):
                self.store(place, run[n], active)
            self.widened = False

    def store(self, target: ir.Load, value: np.ndarray, active: np.ndarray) -> None:
        """The active threads' ``value`` into ``target``, a write of their own."""
        found = self.locate(target, active, write=True)
        if found is not None:
            where, inside = found
            value = np.broadcast_to(value, active.shape)
            if not self.lanes_of(active)[1]:
                value = value[active]
            self.arrays[target.array][where] = value[inside]

    def finish_copies(self, pending: int, active: np.ndarray) -> None:
        """The copies of each active thread's groups but its ``pending`` most recent land in
        shared memory, written by that thread now."""
        kept = []
        for array, offsets, lanes, values, group in self.copies:
            done = active[lanes] & (group >= 0) & (group < self.committed[lanes] - pending)
            if done.any():
                np.subtract.at(self.in_flight[array], offsets[done], 1)
                self.arrays[array][offsets[done]] = values[done]
                self.touch(array, offsets[done], lanes[done], True)
            if not done.all():
                kept.append((array, offsets[~done], lanes[~done], values[~done], group[~done]))
        self.copies = kept

    def fragment(self, name: str, number: int, warp: int) -> np.ndarray:
        """The elements of fragment ``number`` of ``name`` held by ``warp`` (a view)."""
        return self.fragments[name][1][warp, number]

    def tile(self, kind: ir.Fragment, first: tuple[str, int], ld: int, row_major: bool,
             lanes: np.ndarray, write: bool, values: np.ndarray | None = None,
             columns: int | None = None) -> np.ndarray:
        """Read (or write ``values`` into) the fragment-shaped tile of a shared array that
        starts at ``first``, its elements row by row (of its leading ``columns``, None: all);
        each access is checked and recorded."""
        array, start = first
        rows, whole = kind.rows_columns
        columns = whole if columns is None else min(columns, whole)
        row, column = np.divmod(np.arange(rows * columns), columns)
        offsets = start + (row * ld + column if row_major else column * ld + row)
        if self.observer is not None:
            self.observer.tile(kind, array, self.held(array, offsets), row_major, write)
        if write:
            found = self.touch(array, offsets, lanes[np.arange(offsets.size) % lanes.size], True)
            if found is not None:
                where, inside = found
                self.arrays[array][where] = values[inside]
            return values
        # any thread of the warp may read any element: each is checked as read by all
        self.touch(array, np.tile(offsets, lanes.size), np.repeat(lanes, offsets.size), False)
        inside = (offsets >= 0) & (offsets < self.arrays[array].shape[-1])
        read = np.full(offsets.size, self.unread, self.compute)
        read[inside] = self.arrays[array][offsets[inside]]
        return read

    def locate(self, e: ir.Load, active: np.ndarray, write: bool, atomic: bool = False
               ) -> tuple[tuple, np.ndarray] | None:
        """Where the active threads' access ``e`` falls inside its array (a numpy index) and
        which of the active threads that is; None if for none. Checks and records it."""
        offsets = self.offsets(e.offset, active)
        threads = self.lanes_of(active)[0]
        if self.observer is not None and not self.widened:
            self.observer.access(e.array, self.held(e.array, offsets), threads, 1, write,
                                 atomic=atomic)
        return self.touch(e.array, offsets, threads, write)

    def offsets(self, e: ir.Expr, active: np.ndarray) -> np.ndarray:
        """The offsets ``e`` of the active threads, as 64-bit integers."""
        offsets = self.index(e, active)
        if not self.lanes_of(active)[1]:
            offsets = offsets[active]
        return offsets if offsets.dtype == np.int64 else offsets.astype(np.int64)

    def observe(self, first: ir.Load, active: np.ndarray, width: int, write: bool,
                asynchronous: bool = False) -> None:
        """Tell the observer of one access of ``width`` elements from ``first`` by the
        active threads; its lanes, executed one by one, are not told of again."""
        if self.observer is not None:
            offsets = self.offsets(first.offset, active)
            self.observer.access(first.array, self.held(first.array, offsets),
                                 self.lanes_of(active)[0], width, write, asynchronous)
            self.widened = True

    def held(self, array: str, offsets: np.ndarray) -> np.ndarray:
        """Where ``array`` holds the elements ``offsets`` (a swizzled tile moves them,
        :attr:`ir.Local.swizzle`): what the observer's bank counts read. The hazard checks
        keep the elements' own offsets, a swizzle being a permutation."""
        if array not in self.swizzles:
            return offsets
        shift, bits = self.swizzles[array]
        return ir.swizzled(offsets, shift, itemsize(self.kernel.dtype), bits)

    def touch(self, array: str, offsets: np.ndarray, lanes: np.ndarray, write: bool,
              started: bool = False, raced: bool = True) -> tuple[tuple, np.ndarray] | None:
        """:meth:`locate` for threads ``lanes`` accessing ``array[offsets]``; ``started``: the
        write of an asynchronous copy that started, which gives the element no value yet;
        ``raced`` False: one that an mbarrier orders, not barriers (a bulk tensor copy's),
        left out of the epoch's race check."""
        # negative offsets, seen as unsigned, lie beyond any array's end too
        inside = offsets.astype(np.int64, copy=False).view(np.uint64) < self.sizes[array]
        if inside.all():
            inside = ALL
        else:
            self.report("out of bounds", array, offsets, lanes, ~inside)
            offsets, lanes = offsets[inside], lanes[inside]
        if not offsets.size:
            return None
        if array in self.in_flight:
            if self.copies:  # else no element is in flight
                unfinished = self.in_flight[array][offsets] > 0
                if unfinished.any():
                    self.report("unfinished async copy", array, offsets, lanes, unfinished)
            if write and self.mmas:  # else no element is read by an MMA
                read = self.mma_reading[array][offsets] > 0
                if read.any():
                    self.report("unfinished wgmma", array, offsets, lanes, read)
            if write and not started and array in self.unfenced:
                self.unfenced[array][offsets] = True
                self.writer[array][offsets] = lanes
            if array in self.bulk_tiles:
                self.transactions.check(array, offsets, lanes, write, started)
        if array in self.taken:
            self.report("reused memory", array, offsets, lanes, np.ones(offsets.size, bool))
        if write and array in self.takers:
            self.take_over(array, offsets, lanes)
        where = (lanes, offsets) if array in self.registers else (offsets,)
        if array in self.written:
            written = self.written[array]
            if write:
                if not started:  # a copy that started gives its elements no value yet
                    written[where] = True
            elif not written[where].all():
                self.report("uninitialised read", array, offsets, lanes, ~written[where])
        if array in self.shared and raced:
            self.accesses.setdefault(array, []).append((offsets, lanes, write))
        return where, inside

    def take_over(self, array: str, offsets: np.ndarray, lanes: np.ndarray) -> None:
        """A write of ``array``, which takes over the memory of the tiles it reuses: none of
        them may have been accessed since the last barrier, nor have copies in flight."""
        for reused in (name for name, by in self.taken_by.items() if by == array):
            if reused in self.taken:
                continue
            busy = (reused in self.accesses
                    or bool(self.in_flight[reused].any()))
            if busy:
                self.report("reused memory", array, offsets, lanes, np.ones(offsets.size, bool))
            self.taken.add(reused)

    def report(self, kind: str, array: str, offsets: np.ndarray, lanes: np.ndarray,
               which: np.ndarray) -> None:
        n = int(np.argmax(which))
        self.hazards.append(Hazard(kind, self.block, array, int(offsets[n]), self.epoch,
                                   (int(lanes[n]),)))

    def end_epoch(self) -> None:
        """Report the elements that one thread wrote and another touched since the barrier."""
        for array, accesses in self.accesses.items():
            if not any(w and o.size for o, _, w in accesses):  # reads alone never race
                continue
            # each access as one sorted key, (element, thread) pair and write bit: a pair's
            # last key says whether it wrote (a plain sort, not np.unique's argsort, which
            # took a third of a tensor-core kernel's emulation)
            keys = np.sort(np.concatenate([(o * self.count + t) * 2 + w
                                           for o, t, w in accesses]))
            last = np.r_[keys[1:] >> 1 != keys[:-1] >> 1, True]
            pairs, written = keys[last] >> 1, (keys[last] & 1).astype(bool)
            # the pairs are sorted: each element's threads are one run of them
            elements = pairs // self.count
            starts = np.flatnonzero(np.r_[True, elements[1:] != elements[:-1]])
            touching = np.diff(np.r_[starts, elements.size])
            element_written = np.logical_or.reduceat(written, starts)
            for n in np.flatnonzero(element_written & (touching > 1))[:SHOWN]:
                run = pairs[starts[n]:starts[n] + touching[n]]
                threads = tuple(int(t) for t in run % self.count)
                self.hazards.append(Hazard("race", self.block, array, int(elements[starts[n]]),
                                           self.epoch, threads[:2]))
        self.accesses = {}
        self.epoch += 1


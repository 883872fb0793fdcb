"""What each thread of a compiled kernel executes, counted by walking its IR (SAAKE-style).

The analytic model (:mod:`treduda.model.model`) predicts from the strategy's parameters; this
module reads the code instead (issue #4), so it sees what the parameters do not say: the actual
index expressions, copies, guards and barriers. The walk makes these choices:

* The representative block is ``blockIdx = 0``; control flow (trip counts, guards) follows
  thread (0,0,0), so counts are per thread of a full tile.
* Access costs come from warp 0 of that block: each offset is evaluated for its lanes (x
  fastest), iterators per lane, lanes narrowed by the guards thread 0 passes. Global: 32-byte
  sectors touched / 4 per wavefront; shared: distinct words in the busiest bank.
* Identical loads in straight-line code count once, as nvcc reuses them: until a barrier, a
  store to that array, or the next iteration of a loop that stays a loop (not ``unroll``).
* Index ops: each distinct varying subexpression of an offset or condition once per iteration
  of the innermost runtime loop it depends on (invariant code is hoisted, unrolled loops fold).
* Loops of more than :data:`SAMPLED` iterations are sampled: the first, second, middle,
  second-to-last and last iterations are walked; if the three inner ones agree, the second
  stands for every inner iteration. Where only the second differs (a pipelined loop starts
  at -1 for its prologue, so its ``c == 0`` guard falls there), the third is walked too and,
  if it agrees, stands for every iteration from it to the second-to-last. Otherwise all
  iterations are walked.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codegen import ir
from ..errors import CompileError, MissingSize, StrategyError
from ..frontend import dtypes
from ..model.gpus import Gpu
from ..model.gpus import gpu as find_gpu
from ..model.interface import capable
from ..model.model import Model, model_of
from ..model.occupancy import blocks_per_sm
from ..model.prediction import Prediction, combined, unfit
from ..polyhedral.lower import accumulator_name, plan
from ..run.counters import BANK_BYTES, shared_wavefronts
from ..run.nvcc import nvcc_available

FIELDS = ("fma", "flops_other", "global_loads", "global_stores", "shared_loads",
          "shared_stores", "global_wavefronts", "shared_wavefronts", "barriers", "index_ops")
BASE_REGISTERS = 16  # beyond the register locals: indices, pointers, loaded operands
SAMPLED = 5  # loops with more iterations are sampled (see the module docstring)
SECTOR_BYTES, SECTORS_PER_WAVEFRONT = 32, 4


@dataclass(frozen=True)
class Counts:
    """Per thread of the representative block, dynamic (loops multiplied out)."""

    fma: float  # multiplications feeding an add (or a += / -=): four real FMAs if complex
    flops_other: float  # other arithmetic, per part of a complex value
    global_loads: float  # load instructions: a vector load is one
    global_stores: float  # elements stored: a vector store counts each (points per thread)
    shared_loads: float
    shared_stores: float
    global_wavefronts: float  # LSU wavefronts of the warp's global loads
    shared_wavefronts: float  # bank-conflict degree of the warp's shared loads and stores
    barriers: float
    index_ops: float  # integer ops of offsets and loop/guard arithmetic (a rough count)
    registers: int  # ptxas's count, or a conservative estimate without nvcc

    @property
    def instructions(self) -> float:
        """Warp instructions per thread that the schedulers issue."""
        return sum(getattr(self, f) for f in FIELDS if not f.endswith("wavefronts"))


def count(kernel, use_nvcc: bool = True, *, sizes: Mapping[str, int] | None = None,
          arch: str = "sm_90") -> Counts:
    """Walk ``kernel`` (symbolic kernels need ``sizes``) and count per thread."""
    tally = _Walker(kernel, _sizes(kernel, sizes)).run()
    return Counts(**{f: float(tally[f]) for f in FIELDS},
                  registers=_registers(kernel, use_nvcc, arch))


def estimate(kernel, gpu: str | Gpu = "H100", *, sizes: Mapping[str, int] | None = None,
             use_nvcc: bool = True) -> Prediction:
    """What :meth:`treduda.kernel.Kernel.estimate` answers: its strategy's model of the
    kernel refined by ptxas's report (``refine``), the number the search's check of its
    finalists gives the same parameters; for a strategy without a model (one that does not
    describe itself), the walk's estimate (:func:`estimate_kernel`)."""
    g = find_gpu(gpu)
    try:
        model = model_of(_program(kernel, _sizes(kernel, sizes)), g, kernel.strategy)
    except StrategyError:
        return estimate_kernel(kernel, g, sizes=sizes, use_nvcc=use_nvcc)
    return model.refine(kernel, use_nvcc)


def estimate_kernel(kernel, gpu: str | Gpu = "H100", *, sizes: Mapping[str, int] | None = None,
                    use_nvcc: bool = True) -> Prediction:
    """The model's resources with ``fma``, ``issue`` and ``memory`` from the walked counts and
    occupancy from the counted registers: a cross-check of the model on the generated code.
    For strategies the model describes, its bound is a floor per resource, so
    ``estimate_kernel >= Model.bound`` as branch and bound needs."""
    g = find_gpu(gpu)
    sizes = _sizes(kernel, sizes)
    program = _program(kernel, sizes)
    try:  # the strategy's model, where it has one
        model = model_of(program, g, kernel.strategy)
    except StrategyError:  # one that does not describe itself: the walk alone
        model = None
    if model is not None and not capable(model, "walkable"):
        # A warp's fragment statements have no per-thread counts to walk: its model, with
        # ptxas's registers where nvcc is present.
        return model.refine(kernel, use_nvcc)
    c = count(kernel, use_nvcc, sizes=sizes, arch=g.arch)
    if model is None:  # nor a split it describes
        model, analytic, floor, split = Model(program, g), {}, {}, 1
    else:
        analytic = model.estimate(kernel.params).resources
        floor = model.bound(kernel.params).resources
        (split,) = model.describe(kernel.params)["split"]  # the geometry's, by any name
    blocks, threads = math.prod(kernel.grid_for(sizes)), math.prod(kernel.block)
    occupancy = blocks_per_sm(g, threads, c.registers, shared_bytes(kernel))
    if occupancy == 0:
        return unfit(model.flops)
    clock = g.clock_ghz * 1e9
    lanes = g.fma_lanes(kernel.dtype)
    # The busiest SM runs ceil(blocks / SMs) blocks of ceil(threads / 32) warps each.
    warps = math.ceil(blocks / g.sm_count) * math.ceil(threads / g.warp_size)
    waves = math.ceil(blocks / (g.sm_count * occupancy))
    accumulators = sum(local.size for local in kernel.built.kernel.locals if local.name in
                       {accumulator_name(n) for n in range(len(program.accumulators))})
    # independent FMA chains: one per accumulator, one per part of a complex one
    chains = accumulators * dtypes.fmas(kernel.dtype) // dtypes.chain(kernel.dtype)
    walked = {
        "fma": warps * c.fma * g.warp_size / lanes / clock,
        "issue": warps * c.instructions / g.schedulers_per_sm / clock,
        "memory": warps * (c.global_wavefronts + c.shared_wavefronts) / clock,
        "l2": analytic.get("l2", (c.global_loads + c.global_stores) * blocks * threads
                           * model.bytes / g.l2_bandwidth),  # without a model: no L2 reuse
        "dram": model.compulsory / g.dram_bandwidth,
        "latency": max(waves * c.fma / max(1, chains) * g.fma_latency_cycles / clock,
                       analytic.get("latency", 0.0)),  # the walk's: its dependent FMAs
    }
    seconds = {r: max(v, floor.get(r, 0.0)) for r, v in walked.items()}
    binding, total = combined(seconds)
    total += model.parts_seconds(split)  # a deterministic split's sum
    because = _because(binding, seconds[binding], c, occupancy)
    if seconds[binding] > walked[binding]:
        because += " (the model's bound: the walk counts less here)"
    return Prediction(total, binding, seconds, because, model.flops)


def _because(binding: str, seconds: float, c: Counts, occupancy: int) -> str:
    fma = max(c.fma, 1.0)
    reasons = {
        "fma": "FMA throughput binds",
        "issue": f"instruction issue binds: {c.instructions / fma:.2f} instructions per FMA, "
                 f"{c.index_ops / fma:.2f} of them index ops",
        "memory": f"load/store units bind: {c.global_wavefronts / fma:.2f} global and "
                  f"{c.shared_wavefronts / fma:.2f} shared wavefronts per FMA",
        "l2": "L2 bandwidth binds: blocks re-read their footprints",
        "dram": "DRAM bandwidth binds: every tensor moves once",
        "latency": f"latency binds: {occupancy} block(s) per SM",
    }
    return (f"{binding} {seconds * 1e3:.3g} ms: {reasons[binding]}; per thread {c.fma:g} FMAs, "
            f"{c.global_loads:g} global / {c.shared_loads:g} shared loads, {c.barriers:g} "
            f"barriers, {c.index_ops:g} index ops, {c.registers} registers")


@dataclass(frozen=True)
class Launch:
    """How a launch fills a GPU: what ``treduda bench`` shows beside the times."""

    blocks: int
    blocks_per_sm: int  # resident at once, by the limits of registers, shared memory, threads
    waves: float  # blocks / (SMs x blocks_per_sm): below 1, SMs stay idle
    output_points_per_thread: float  # output elements a thread stores, walked from the IR


def launch(kernel, gpu: str | Gpu = "H100", *, sizes: Mapping[str, int] | None = None,
           use_nvcc: bool = False) -> Launch:
    """The launch of ``kernel`` on ``gpu``; registers are estimated unless ``use_nvcc``."""
    g = find_gpu(gpu)
    sizes = _sizes(kernel, sizes)
    c = count(kernel, use_nvcc, sizes=sizes, arch=g.arch)
    blocks, threads = math.prod(kernel.grid_for(sizes)), math.prod(kernel.block)
    # a kernel whose roles set their registers (setmaxnreg) is declared one block per SM:
    # each thread starts at that block's cap, whatever the roles then take
    registers = (g.register_cap(threads) if ir.has_register_roles(kernel.signature.kernel)
                 else c.registers)
    resident = blocks_per_sm(g, threads, registers, shared_bytes(kernel))
    return Launch(blocks, resident, blocks / (g.sm_count * resident) if resident else math.inf,
                    c.global_stores)


def _sizes(kernel, sizes: Mapping[str, int] | None) -> dict[str, int]:
    if sizes is None and kernel.symbolic:
        raise MissingSize("this kernel has symbolic sizes; pass sizes={...} to walk it")
    return dict(kernel.sizes if sizes is None else sizes)


def _program(kernel, sizes: Mapping[str, int]):
    """The kernel's program at ``sizes``: its own, or a symbolic kernel's planned there."""
    if not kernel.symbolic:
        return kernel.program
    return plan(kernel.contraction, sizes, kernel.layout, kernel.dtype,
                precision=kernel.precision)


def shared_bytes(kernel) -> int:
    """Shared memory one block of ``kernel`` takes (:func:`ir.shared_offsets`)."""
    return ir.shared_offsets(kernel.built.kernel)[1]


def _registers(kernel, use_nvcc: bool, arch: str) -> int:
    if use_nvcc and nvcc_available():
        try:
            return _ptxas_registers(kernel.cuda_source, kernel.name, arch)
        except CompileError:  # an architecture this nvcc no longer knows: count conservatively
            pass
    return BASE_REGISTERS + dtypes.registers(kernel.dtype) * sum(
        local.size for local in kernel.built.kernel.locals if local.space is ir.Space.REGISTER)


@functools.lru_cache(maxsize=64)
def _ptxas_registers(source: str, name: str, arch: str) -> int:
    from ..run.nvcc import compile_cuda

    return next(r.registers for r in compile_cuda(source, arch) if r.kernel == name)


_ARITHMETIC = {ir.Op.ADD, ir.Op.SUB, ir.Op.MUL, ir.Op.DIV, ir.Op.MIN, ir.Op.MAX}
_Parts = tuple[tuple[tuple[int, frozenset], ...], tuple[ir.Load, ...], frozenset]


def _flops(e: ir.Expr) -> tuple[int, int]:
    """(FMAs, other flops) of a value expression: a product feeding an add fuses."""
    if isinstance(e, ir.Binary) and e.op in (ir.Op.ADD, ir.Op.SUB):
        for product, other in ((e.left, e.right), (e.right, e.left)):
            if isinstance(product, ir.Binary) and product.op is ir.Op.MUL:
                parts = [_flops(x) for x in (product.left, product.right, other)]
                return 1 + sum(p[0] for p in parts), sum(p[1] for p in parts)
    parts = [_flops(x) for x in ir.children(e)[-2:]]  # a Select's condition is no flop
    if isinstance(e, ir.Call) and e.function is ir.Function.TF32X3:
        return 2 + sum(p[0] for p in parts), 1 + sum(p[1] for p in parts)  # 1 FMUL, 2 FFMAs
    own = 1 if isinstance(e, ir.Binary) and e.op in _ARITHMETIC else 0
    return sum(p[0] for p in parts), own + sum(p[1] for p in parts)


def _rounded(e: ir.Expr) -> dict[ir.Load, int]:
    """The loads whose values ``e`` rounds (precision's calls), with the instructions that
    takes: once per load, as the compiler rounds a value once for all its uses."""
    found: dict[ir.Load, int] = {}
    if isinstance(e, ir.Call):
        precision = dtypes.TF32X3 if e.function is ir.Function.TF32X3 else dtypes.TF32
        found = {a: dtypes.OPERAND_OPERATIONS[precision] for a in e.args
                 if isinstance(a, ir.Load)}
    for child in ir.children(e):
        found = {**_rounded(child), **found}
    return found


class _Walker:
    """Walks one kernel for thread (0,0,0) of block 0 and the lanes of its warp."""

    def __init__(self, kernel, sizes: Mapping[str, int]):
        self.kir = kernel.built.kernel
        self.bytes = dtypes.itemsize(kernel.dtype)  # of a tensor element
        self.local_bytes = dtypes.itemsize(dtypes.compute(kernel.dtype))  # of a shared one
        # instructions per element loaded from or stored to a tensor: its conversion
        self.conversion = dtypes.CONVERSION_OPERATIONS if kernel.dtype in dtypes.STORED else 0
        # Real instructions per IR operation: a complex multiply-add is four FMAs, other
        # complex arithmetic at least one instruction per part.
        self.scale = (dtypes.fmas(kernel.dtype), self.bytes // dtypes.itemsize(
            dtypes.real(kernel.dtype)))
        self.spaces = {local.name: local.space for local in self.kir.locals}
        self.env: dict[str, Any] = {f"N_{index}": extent for index, extent in sizes.items()}
        self.lane_env = dict(self.env)
        bx, by, _ = kernel.block
        lane = np.arange(min(32, math.prod(kernel.block)))
        self.lanes = (lane % bx, lane // bx % by, lane // (bx * by))
        self.active = np.ones(lane.size, dtype=bool)
        self.frames: list[tuple[str | None, set]] = [(None, set())]  # kernel, runtime loops
        self.loaded: set[tuple[str, bytes]] = set()  # addresses whose loads nvcc would reuse
        self.parts: dict[int, _Parts] = {}  # by id: hashing deep IR trees each visit is slow
        self.flops: dict[int, tuple[int, int]] = {}
        self.canonical: dict[ir.Binary, int] = {}  # equal subexpressions share a number

    def run(self) -> Counter:
        tally = self.walk(self.kir.body)
        tally["index_ops"] += len(self.frames[0][1])  # hoisted out of every loop: once
        return tally

    def walk(self, s: ir.Stmt) -> Counter:
        if isinstance(s, ir.Block):
            return sum((self.walk(child) for child in s.body), Counter())
        if isinstance(s, ir.Barrier):
            self.loaded.clear()
            return Counter(barriers=1)
        if isinstance(s, ir.For):
            return self._loop(s)
        if isinstance(s, ir.If):
            self._index_ops(s.condition)
            taken = bool(ir.evaluate(s.condition, self.env, (0, 0, 0)))
            branch, active = (s.then if taken else s.otherwise), self.active
            if branch is None:
                return Counter()
            lanes = np.broadcast_to(ir.evaluate(s.condition, self.lane_env, self.lanes),
                                    active.shape).astype(bool)
            self.active = active & (lanes if taken else ~lanes)
            tally = self.walk(branch)
            self.active = active
            return tally
        tally: Counter = Counter()
        if isinstance(s, (*ir.WARP_STATEMENTS, *ir.WARPGROUP_STATEMENTS, ir.ProxyFence)):
            return tally  # a warp's tensor-core work: the tensor-core model counts it
        if isinstance(s, ir.MBARRIER_STATEMENTS):
            return tally  # one thread's bulk copies and their phases: the warpgroup model's
        if isinstance(s, (ir.CommitCopies, ir.WaitCopies)):
            return tally  # bookkeeping of the copies, which are counted where they start
        if isinstance(s, ir.AsyncCopy):  # a global load into a shared store, in one access
            if not s.zero:
                self._access(s.source, tally, store=False, width=s.width)
            if s.stride == 1:
                self._access(s.target, tally, store=True, width=s.width)
            else:  # its elements stored one by one
                for target in ir.lanes(s.target, s.width, s.stride):
                    self._access(target, tally, store=True)
            return tally
        if isinstance(s, ir.VectorLoad):
            self._access(s.first, tally, store=False, width=s.width)
            return tally
        if isinstance(s, ir.VectorStore):
            for value in s.values:
                for load in self._parts(value)[1]:
                    self._access(load, tally, store=False)
                tally.update(dict(zip(("fma", "flops_other"), self._scaled(_flops(value)),
                                      strict=True)))
            self._access(s.first, tally, store=True, width=len(s.values))
            return tally
        if s.op != "=" and isinstance(s.target, ir.Load):
            self._access(s.target, tally, store=False)  # read-modify-write
        rounded = _rounded(s.value)
        for load in self._parts(s.value)[1]:
            self._access(load, tally, store=False, extra=rounded.get(load, 0))
        if isinstance(s.target, ir.Load):
            self._access(s.target, tally, store=True)
        if id(s) not in self.flops:
            counted = _flops(ir.Binary(ir.Op.ADD, s.target, s.value) if s.op != "=" else s.value)
            self.flops[id(s)] = self._scaled(counted)
        tally.update(dict(zip(("fma", "flops_other"), self.flops[id(s)], strict=True)))
        return tally

    def _loop(self, s: ir.For) -> Counter:
        self._index_ops(s.start)
        here = (0, 0, 0)
        step = ir.evaluate(s.step, self.env, here)
        lane_first = ir.evaluate(s.start, self.lane_env, self.lanes)
        lane_step = ir.evaluate(s.step, self.lane_env, self.lanes)
        values, self.env[s.iterator] = [], ir.evaluate(s.start, self.env, here)
        while ir.evaluate(s.condition, self.env, here):
            values.append(self.env[s.iterator])
            self.env[s.iterator] += step

        def iteration(n: int) -> Counter:
            self.env[s.iterator] = values[n]
            self.lane_env[s.iterator] = lane_first + n * lane_step
            # a runtime loop: its own index ops, no reuse across iterations
            if s.unroll is not ir.Unroll.FULL:
                self.frames.append((s.iterator, set()))
                self.loaded.clear()
            part = self.walk(s.body)
            self._index_ops(s.condition)
            if s.unroll is not ir.Unroll.FULL:
                part["index_ops"] += len(self.frames.pop()[1]) + 1  # its ops, the increment
            return part

        n, tally = len(values), None
        saved = [set(seen) for _, seen in self.frames], set(self.loaded)
        if n > SAMPLED:
            first, second, middle, before_last, last = map(iteration, (0, 1, n // 2, n - 2,
                                                                        n - 1))
            if second == middle == before_last:
                tally = first + last + Counter({k: v * (n - 2) for k, v in second.items()})
            elif middle == before_last and iteration(2) == middle:  # the second differs
                tally = first + second + last + Counter({k: v * (n - 3)
                                                         for k, v in middle.items()})
            else:  # iterations differ: walk them all, from the state before the samples
                for (_, seen), kept in zip(self.frames, saved[0], strict=True):
                    seen.clear()
                    seen.update(kept)
                self.loaded = saved[1]
        if tally is None:
            tally = sum(map(iteration, range(n)), Counter())
        self.env.pop(s.iterator, None)
        self.lane_env.pop(s.iterator, None)
        return tally

    def _parts(self, e: ir.Expr) -> _Parts:
        """The varying Binary nodes (canonical number, names), the loads and names of ``e``."""
        if id(e) not in self.parts:
            found = [self._parts(child) for child in ir.children(e)]
            own = {e.name} if isinstance(e, ir.Var) else {f"%{e.builtin.value}"} if isinstance(
                e, ir.Index) else set()  # thread and block ids never name a loop
            names = frozenset().union(own, *(f[2] for f in found))
            binaries = sum((f[0] for f in found), ())
            if isinstance(e, ir.Binary) and names:
                binaries += ((self.canonical.setdefault(e, len(self.canonical)), names),)
            loads = sum((f[1] for f in found), (e,) if isinstance(e, ir.Load) else ())
            self.parts[id(e)] = (binaries, loads, names)
        return self.parts[id(e)]

    def _index_ops(self, e: ir.Expr) -> None:
        """Book each varying subexpression to its innermost runtime loop (or the kernel): it is
        computed once per iteration of that loop, which counts its book when it ends."""
        for number, names in self._parts(e)[0]:
            next(seen for it, seen in reversed(self.frames) if it is None or it in names).add(
                number)

    def _scaled(self, counted: tuple[int, int]) -> tuple[int, int]:
        """(FMAs, other flops) of the IR as real instructions (see ``scale``)."""
        return tuple(n * k for n, k in zip(counted, self.scale, strict=True))

    def _access(self, load: ir.Load, tally: Counter, store: bool, width: int = 1,
                extra: int = 0) -> None:
        """Count one access of each active lane to ``load`` and the ``width - 1`` elements
        after it (a vector access): a load instruction, or ``width`` stored elements; a
        loaded value's rounding (``extra`` instructions) and a tensor element's conversion
        with it."""
        space = self.spaces.get(load.array)
        if space is ir.Space.REGISTER:
            return
        self._index_ops(load.offset)
        first = np.broadcast_to(ir.evaluate(load.offset, self.lane_env, self.lanes),
                                self.active.shape)[self.active].astype(np.int64)
        lanes = (first[:, None] + np.arange(width)).ravel()
        key = (load.array, lanes.tobytes())
        if store:
            self.loaded = {k for k in self.loaded if k[0] != load.array}
        elif key in self.loaded:
            return
        self.loaded.add(key)
        kind = "shared" if space is ir.Space.SHARED else "global"
        tally["flops_other"] += extra + (self.conversion * width if kind == "global" else 0)
        tally[f"{kind}_{'stores' if store else 'loads'}"] += width if store else 1
        if kind == "shared":  # one phase of the warp, as the model prices it (Counts)
            words = lanes * self.local_bytes // BANK_BYTES
            tally["shared_wavefronts"] += float(shared_wavefronts(
                words, np.zeros(words.size, np.int64), BANK_BYTES)[0])
        elif not store:
            sectors = np.unique(lanes * self.bytes // SECTOR_BYTES).size
            tally["global_wavefronts"] += max(1.0, sectors / SECTORS_PER_WAVEFRONT)

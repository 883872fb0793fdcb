"""A thread's neighbouring elements of a tensor, found in the kernel IR and moved in one vector
access (``LDG.128`` / ``STG.128`` on a GPU, ``vload4`` / ``vstore4`` in OpenCL).

nvcc merges a thread's loads of neighbouring elements only where it can prove the address
aligned, which it cannot for a bare pointer; told so with ``__builtin_assume_aligned``, it
forgets that the inputs are read-only (``LDG.E.CONSTANT`` becomes ``LDG.E``) and turns guarded
preloads into branches (tccg_31's pick: 124 -> 168 registers). The IR knows more. In a straight
run of assignments (a register tile, unrolled in the IR) every offset is an affine expression of
the same iterators. Loads of an input whose offsets differ only in their constants, covering a
whole window ``o .. o + w - 1`` with ``o`` and every coefficient a multiple of ``w``, are one
aligned access: tensors start on :data:`ir.VECTOR_BYTES` boundaries (launches make sure of it).
They are loaded once, at the start of the run (inputs are read-only), and read as lanes;
``w`` consecutive assignments to such a window of the output become one vector store.

Shared tiles are read the same way (``LDS.128``): a register tile dealt in runs of a vector
(the ``vector`` assignment of :mod:`treduda.strategies.tiling`) reads its values of a tile row
side by side, and nvcc, which cannot tell the tile's alignment from the index arithmetic, would
load them one by one. Shared tiles are declared 16-byte aligned where the kernel reads one in
vectors; a run that stores into a tile reads none of it in vectors (hoisting must not move a
read before a write).

Real dtypes only: a complex element is a two-part vector already. Not for float16 and
bfloat16 either: their elements are converted one by one on load and store (the printers have no
vector conversions), so their accesses stay scalar; but a tile of the type registers hold that
takes vector stores (:attr:`ir.Local.vector_stores`) has its stores merged in any kernel: the
warpgroup C tile, whose accumulator pairs (wgmma's layout: two adjacent columns of a row per
thread) nvcc stores as STS.64 anyway, 1 way at its pitch; as two 4-byte stores the emulator
counted 2 ways, the rows ``r`` and ``r + 4`` of a warp's 8 on the same 16 banks. A float16
kernel's tile of that type read in vectors (:attr:`ir.Local.vector_reads`: the mma.sync C
tile) has its loads merged, and the output's stores too, up to 16 bytes of halves, which the
printers convert and pack in pairs (``cvt.rn.f16x2.f32``; OpenCL's ``vstore_halfn_rte``).

nvcc merges more than the printed code says: a thread's loads of a shared tile along a loop it
unrolls (GEMM's pick reads ``A_sh[16 r + k]`` for the 16 values of a step's ``k`` by 4
LDS.128 a row, where the IR has 16 scalar loads). :func:`steps_merged` writes those merges
into a copy of the kernel IR, by a rule stated there, for the counters
(:func:`treduda.run.counters.count`) to count what the GPU issues. The printed code keeps
the scalar loads: written out, the vectors changed ptxas's register allocation of picks at
128 registers (tccg_12, 15, 18, 32 spilled 32-56 bytes, in one placement or another).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

from ..frontend.dtypes import STORED, compute, is_complex, itemsize
from . import ir
from .simplify import plus, times
from .unroll import constant_bounds

# An offset as sum(coefficient * term) + constant: its terms (the subexpressions that are no
# sum, difference or multiple, each with its coefficient) and its constant.
Affine = tuple[frozenset[tuple[ir.Expr, int]], int]


def vectorize(kernel: ir.KernelIR) -> ir.KernelIR:
    """``kernel`` with the loads and stores of neighbouring elements merged where aligned;
    in a 16-bit kernel only the stores into tiles that take vector stores
    (:attr:`ir.Local.vector_stores`, of the type registers hold)."""
    stored_into = {local.name for local in kernel.locals if local.vector_stores}
    read = {local.name for local in kernel.locals if local.vector_reads}
    if is_complex(kernel.dtype) or (kernel.dtype in STORED and not stored_into | read):
        return kernel
    widest = ir.VECTOR_BYTES // itemsize(compute(kernel.dtype))
    tensors = {kind: {p.name for p in kernel.params if p.kind is kind}
               for kind in (ir.ParamKind.INPUT, ir.ParamKind.OUTPUT)}
    if kernel.dtype in STORED:
        outputs = tensors[ir.ParamKind.OUTPUT] if read and kernel.dtype == "float16" else set()
        return replace(kernel, body=_Merger(widest, read, stored_into | outputs, dict.fromkeys(
            outputs, ir.VECTOR_BYTES // itemsize(kernel.dtype)), read).stmt(kernel.body))
    tiles = {local.name for local in kernel.locals
             if local.space is ir.Space.SHARED and not local.stored}
    merge = _Merger(widest, tensors[ir.ParamKind.INPUT] | tiles,
                    tensors[ir.ParamKind.OUTPUT] | stored_into, placed=read)
    return replace(kernel, body=merge.stmt(kernel.body))


def steps_merged(kernel: ir.KernelIR) -> ir.KernelIR:
    """``kernel`` (vectorised) with a thread's loads of a shared tile merged along each loop
    the C compiler unrolls where nvcc merges them: the loop's body is a straight run (its
    vector loads and assignments), its bounds numbers its width divides; a load of a tile
    steps by one element with the iterator and is aligned (:func:`_aligned`, the iterator at
    its first value; tiles are 16-byte aligned where read in vectors, and so is every tile
    nvcc can merge a row of); and nvcc is left no merge of its own among the iterations (see
    :meth:`_Merger.all_merged`). The loop's iterations are then grouped by the width, each
    group's loads along the iterator one vector. For counting only: the vectors'
    names may repeat (each group reassigns its iterations' own), nothing is printed."""
    if is_complex(kernel.dtype) or kernel.dtype in STORED:
        return kernel
    tiles = {local.name for local in kernel.locals
             if local.space is ir.Space.SHARED and not local.stored}
    # named apart from the vectors vectorize() left in the kernel, which a loop may copy
    merge = _Merger(ir.VECTOR_BYTES // itemsize(compute(kernel.dtype)), tiles, set(),
                    tiles=tiles, prefix="td_step")
    return replace(kernel, body=merge.steps(kernel.body))


class _Merger:
    """Rewrites the runs of assignments of one kernel; names its vectors td_v0, td_v1, ...
    (``prefix`` in place of td_v)."""

    def __init__(self, widest: int, inputs: set[str], outputs: set[str],
                 stored: dict[str, int] | None = None, placed: set[str] | None = None,
                 tiles: set[str] | None = None, prefix: str = "td_v"):
        self.widest, self.inputs, self.outputs = widest, inputs, outputs
        self.stored = stored or {}  # the widest store of outputs of the stored type
        # tiles whose vectors are loaded right before the first statement reading them, not
        # at the run's start: a write's C tile (all of tccg_32's hoisted: 96 -> 146 registers)
        self.placed = placed or set()
        self.tiles = tiles or set()  # the shared tiles merged along loops (steps_merged)
        self.names = (f"{prefix}{n}" for n in itertools.count())

    def stmt(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Block):
            body: list[ir.Stmt] = []
            for assigns, group in itertools.groupby(s.body, lambda c: isinstance(c, ir.Assign)):
                run = list(group)
                body += self.run(run) if assigns else [self.stmt(c) for c in run]
            return ir.Block(tuple(body))
        return ir.map_children(s, self.stmt)

    def steps(self, s: ir.Stmt) -> ir.Stmt:
        """``s`` with the loops the C compiler unrolls merged along (:func:`steps_merged`)."""
        if isinstance(s, ir.For) and s.unroll is ir.Unroll.FULL:
            return self.loop(s)
        return ir.map_children(s, self.steps)

    def loop(self, loop: ir.For) -> ir.Stmt:
        """``loop`` grouped by the widest width that :func:`steps_merged`'s rule allows, or
        as it was (its inner loops merged)."""
        bounds = constant_bounds(loop)
        body = loop.body.body if isinstance(loop.body, ir.Block) else (loop.body,)
        if bounds is not None and all(isinstance(s, ir.Assign | ir.VectorLoad) for s in body):
            first, last = bounds
            assigns = [s for s in body if isinstance(s, ir.Assign)]
            width = self.widest
            while width > 1:
                groups, left = divmod(last - first + 1, width)
                along = self.along(loop.iterator, assigns, first, width)
                if groups and not left and along and self.all_merged(
                        loop.iterator, assigns, first, width, along):
                    return self.grouped(loop, list(body), first, groups, width, along)
                width //= 2
        return ir.map_children(loop, self.steps)

    def along(self, iterator: str, run: list[ir.Assign], first: int, width: int
              ) -> set[ir.Load]:
        """The loads of a shared tile by ``run`` whose ``width`` consecutive iterations from
        ``first`` (and from each multiple of ``width`` after it) read one aligned window:
        their offset steps by one element with ``iterator``, aligned as :func:`_aligned`
        says with ``iterator`` at ``first``. Not of a tensor: nvcc merges no global loads (it
        cannot prove their alignment), and an unstaged kernel's reads stay as they were."""
        variable = ir.Var(iterator)
        written = {s.target.array for s in run if isinstance(s.target, ir.Load)}
        found = set()
        for s in run:
            for load in _loads(s.value, conditional=False):
                if load.array not in self.tiles or load.array in written:
                    continue
                terms, constant = ir.affine(load.offset)
                rest = frozenset((t, c) for t, c in terms.items() if t != variable)
                if terms.get(variable) == 1 and _aligned(rest, constant + first, width):
                    found.add(load)
        return found

    def all_merged(self, iterator: str, run: list[ir.Assign], first: int, width: int,
                   along: set[ir.Load]) -> bool:
        """Whether nvcc is left no merge of its own among the group's iterations once the
        loads ``along`` the iterator are merged: no other load of a tile that reads
        ``iterator`` and stays scalar in an iteration fills an aligned window with others
        once ``iterator`` has a value (as nvcc sees it unrolled). Where one does, our vectors
        beside it would not be what nvcc issues (tccg_35: B's tile along k, A's by a stride
        of 9 a step, whose windows nvcc merges at each k: its SASS has 16 LDS.32, 56 LDS.64
        and 16 LDS.128 a pass)."""
        variable = ir.Var(iterator)
        left = {load for s in run for load in _loads(s.value)
                if load.array in self.tiles and _reads(load.offset, variable)
                and load not in along}
        for value in range(first, first + width):
            at = {iterator: ir.Int(value)}
            valued = [replace(s, value=ir.substitute(s.value, at)) for s in run]
            if self.load_windows(valued, {ir.substitute(load, at) for load in left}):
                return False
        return True

    def grouped(self, loop: ir.For, body: list[ir.Stmt], first: int, groups: int,
                width: int, along: set[ir.Load]) -> ir.Stmt:
        """``loop`` as ``groups`` iterations of ``width`` copies of its body (``first`` its
        first value; the copies alone for one group), the loads ``along`` the iterator one
        vector a group, loaded at its start. A loop still, so the counters find the loops
        that accumulate (a kernel's steps all written out)."""
        name = loop.iterator
        base = times(width, ir.Var(name)) if groups > 1 else ir.Int(0)
        copies: list[ir.Stmt] = []
        spanning: set[ir.Load] = set()
        for value in range(first, first + width):
            at = {name: plus(base, ir.Int(value))}
            copies += [_substituted(s, at) for s in body]
            spanning |= {ir.substitute(load, at) for load in along}
        vectors: list[ir.Stmt] = []
        lanes: dict[ir.Load, ir.Lane] = {}
        for window in self.load_windows([s for s in copies if isinstance(s, ir.Assign)],
                                        spanning):
            vector = next(self.names)
            vectors.append(ir.VectorLoad(vector, window[0][0], len(window)))
            lanes.update({load: ir.Lane(vector, n) for n, same in enumerate(window)
                          for load in same})
        merged = ir.Block(tuple(vectors) + tuple(
            replace(s, value=_substitute(s.value, lanes)) if isinstance(s, ir.Assign) else s
            for s in copies))
        if groups == 1:
            return merged
        return ir.For(name, ir.Int(0), ir.Binary(ir.Op.LT, ir.Var(name), ir.Int(groups)),
                      ir.Int(1), merged, ir.Unroll.FULL)

    def run(self, run: list[ir.Assign]) -> list[ir.Stmt]:
        """One straight run: its vector loads first, then its statements reading their
        lanes, consecutive stores of one window merged."""
        lanes: dict[ir.Load, ir.Lane] = {}
        hoisted: list[ir.Stmt] = []
        placed: dict[str, ir.VectorLoad] = {}
        for window in self.load_windows(run):
            name = next(self.names)
            load = ir.VectorLoad(name, window[0][0], len(window))
            if load.first.array in self.placed:
                placed[name] = load
            else:
                hoisted.append(load)
            lanes.update({load: ir.Lane(name, n) for n, same in enumerate(window)
                          for load in same})
        if lanes:
            run = [replace(s, value=_substitute(s.value, lanes)) for s in run]
        merged = hoisted
        for s in self.stores(run):
            merged += [placed.pop(name) for name in _vectors(s) if name in placed]
            merged.append(s)
        return merged

    def load_windows(self, run: list[ir.Assign], among: set[ir.Load] | None = None
                     ) -> list[list[list[ir.Load]]]:
        """Aligned windows of input elements the run reads (by the loads ``among``, or by
        any): per lane, the loads of it."""
        found: dict[tuple[str, frozenset], dict[int, list[ir.Load]]] = {}
        written = {s.target.array for s in run if isinstance(s.target, ir.Load)}
        for s in run:
            for load in _loads(s.value, conditional=False):  # hoisting must not add reads
                readable = (load.array in self.inputs and load.array not in written
                            and (among is None or load in among))
                affine = _affine(load.offset) if readable else None
                if affine is not None:
                    terms, constant = affine
                    found.setdefault((load.array, terms), {}).setdefault(constant, []).append(
                        load)
        return [[by_constant[start + n] for n in range(width)]
                for (_, terms), by_constant in found.items()
                for start, width in _windows(terms, set(by_constant), self.widest)]

    def stores(self, run: list[ir.Assign]) -> list[ir.Stmt]:
        """The run with consecutive stores of one aligned window of the output merged."""
        offsets = [_affine(s.target.offset) if self._stores(s) else None for s in run]
        merged: list[ir.Stmt] = []
        n = 0
        while n < len(run):
            widest = (self.stored.get(run[n].target.array, self.widest)
                      if offsets[n] is not None else self.widest)
            width = _store_width(offsets[n:n + widest], widest)
            if width:
                merged.append(ir.VectorStore(run[n].target, tuple(s.value
                                                                  for s in run[n:n + width])))
                n += width
            else:
                merged.append(run[n])
                n += 1
        return merged

    def _stores(self, s: ir.Assign) -> bool:
        """Whether ``s`` is a plain store to the output that reads no other element of it."""
        target = s.target
        return (s.op == "=" and not s.atomic and isinstance(target, ir.Load)
                and target.array in self.outputs
                and all(load == target for load in _loads(s.value) if load.array == target.array))


def _store_width(offsets: list[Affine | None], widest: int) -> int:
    """How many of the stores whose target ``offsets`` these are (None: no plain store to the
    output) fill one aligned window, from the first on; 0 for none."""
    if offsets[0] is None:
        return 0
    terms, start = offsets[0]
    width = widest
    while width > 1:
        if (width <= len(offsets) and _aligned(terms, start, width)
                and all(o == (terms, start + k) for k, o in enumerate(offsets[:width]))):
            return width
        width //= 2
    return 0


def _windows(terms: frozenset, constants: set[int], widest: int) -> Iterator[tuple[int, int]]:
    """(start, width) of each window the ``constants`` cover whole, widest first, aligned as
    :func:`_aligned` says; each constant in one window at most."""
    free = set(constants)
    width = widest
    while width > 1:
        for start in sorted({c - c % width for c in free}):
            window = set(range(start, start + width))
            if _aligned(terms, start, width) and window <= free:
                free -= window
                yield start, width
        width //= 2


def _aligned(terms: frozenset, start: int, width: int) -> bool:
    """Whether every value of ``sum(terms) + start`` is a multiple of ``width``."""
    return start % width == 0 and all(c % width == 0 for _, c in terms)


def _affine(e: ir.Expr) -> Affine:
    """``e`` as terms and a constant (:func:`ir.affine`), comparable whatever the terms'
    order."""
    terms, constant = ir.affine(e)
    return frozenset(terms.items()), constant


def _loads(e: ir.Expr, conditional: bool = True) -> Iterator[ir.Load]:
    """The loads a value expression makes, left to right; those of a Select's branches only
    if ``conditional``."""
    if isinstance(e, ir.Load):
        yield e
        return
    parts = ir.children(e)
    for part in parts if conditional or not isinstance(e, ir.Select) else parts[:1]:
        yield from _loads(part, conditional)


def _vectors(s: ir.Assign | ir.VectorStore) -> list[str]:
    """The vectors whose lanes ``s`` reads, in order."""
    def found(e: ir.Expr) -> list[str]:
        if isinstance(e, ir.Lane):
            return [e.vector]
        return [name for part in ir.children(e) for name in found(part)]

    values = s.values if isinstance(s, ir.VectorStore) else (s.value,)
    return list(dict.fromkeys(name for value in values for name in found(value)))


def _substitute(e: ir.Expr, lanes: dict[ir.Load, ir.Lane]) -> ir.Expr:
    """``e`` with the loads ``lanes`` holds read from their vectors instead."""
    if isinstance(e, ir.Load):
        return lanes.get(e, e)
    if isinstance(e, ir.Binary):
        return ir.Binary(e.op, _substitute(e.left, lanes), _substitute(e.right, lanes))
    if isinstance(e, ir.Neg):
        return ir.Neg(_substitute(e.operand, lanes))
    if isinstance(e, ir.Call):
        return ir.Call(e.function, tuple(_substitute(a, lanes) for a in e.args))
    if isinstance(e, ir.Select):
        return ir.Select(*(_substitute(p, lanes) for p in (e.condition, e.if_true, e.if_false)))
    return e


def _reads(e: ir.Expr, variable: ir.Var) -> bool:
    """Whether integer expression ``e`` reads ``variable``."""
    return e == variable or any(_reads(part, variable) for part in ir.children(e))


def _substituted(s: ir.Stmt, values: dict[str, ir.Expr]) -> ir.Stmt:
    """A statement of a merged loop body (an assignment or a vector load) with the
    variables named in ``values`` replaced (:func:`ir.substitute`)."""
    if isinstance(s, ir.Assign):
        return replace(s, target=ir.substitute(s.target, values),
                       value=ir.substitute(s.value, values))
    assert isinstance(s, ir.VectorLoad)
    return replace(s, first=ir.substitute(s.first, values))

"""The statements and schedule of a staged kernel (:class:`.staging.Staged`).

Everything comes from isl. With ``P`` the block-level prefix of the schedule (block coordinates,
thread-uniform loops, phase and steps — the thread coordinates projected out), the footprint of
an access ``{ S[..] -> X[a] }`` is ``{ P -> X[a] }``; the smallest value of each of its
dimensions gives the tile's origin ``{ P -> X[o] }`` and the largest ``a - o`` its box. Then

* ``copy[P, c, t]``  ``X_sh[u(e)] = X[o(P) + u(e)]`` for every element ``e = T c + t`` below
  the box volume that lies inside ``X``, where thread ``t`` (of ``T``; ``t0 + bx t1 + bx by
  t2`` in its ids) copies in iteration ``c`` of the copy loop, so consecutive threads read
  consecutive global addresses — ``u`` unflattens ``e`` in memory order;
* ``sync[P, t]``  a barrier before the copy (the previous step is done with the tile) and one
  after it (the tile is complete), executed by every thread of the block;
* the compute statement reads ``X_sh[a - o(P)]`` instead of ``X[a]``.

The copies' index expressions are also given in closed form (``Statement.formulas``): each
coordinate of ``u(e)`` a sum of bit fields of ``c`` and the thread ids (:func:`copy_coordinate`)
and the origin converted from isl once, so that the AST builder need not compose each copy's
access relation with the schedule, where isl split ``floor(e / 256) mod 8`` into dozens of
cases.

With ``preload`` (strategy 9) the copy is split: ``load[P, c, t]`` reads the *next* step's
elements into registers while the current step computes — its innermost step coordinate is
shifted by one, so isl adds a first iteration that only loads — and ``store[P, c, t]`` moves them
from registers to the tile after the barrier.

With ``double_buffer`` every tile has two buffers, chosen by the parity of the statement's
innermost step coordinate: step ``k`` fills buffer ``k mod 2`` while no thread can still read it
(the last reader, step ``k - 2``, finished before step ``k - 1``'s barrier), so the barrier
before the copy is needed only where the innermost step starts again at 0 — one barrier per
step instead of two.

With ``async_copy`` (sm_80+; float32 and float64, whose tiles hold the tensors' own elements)
the copy moves runs of ``w`` elements with one cp.async each (:class:`ir.AsyncCopy`), ``e``
numbering the runs: ``w`` is the widest of 16, 8 or 4 bytes that divides the tensor's fastest
extent, the tile's extent along it and its padded row, and every tile origin along it
(:func:`~treduda.polyhedral.geometry.async_width`), so a run is aligned in tensor and tile and
all inside or all outside the tensor; runs outside are zero-filled (``zero[P, c, t]``, which
names ``X[0, ..]`` as its address). No register holds the values, so no preloading with it.
Single-buffered each thread commits its copies, waits for them and meets the others at the
barrier after the copy (``sync2``: commit, wait, barrier). Double-buffered the copies run a
step ahead, as preloaded loads do: ``copy[P, c, t]`` and ``commit[P, t]`` are scheduled at
the innermost step coordinate minus one, after ``wait[P, t]`` (a wait and a barrier: the step's
own copies have landed and every thread is done with the step before, whose buffer they fill)
and before the step's compute, which they overlap; the barrier before the copy, where the
innermost step starts again, moves one step early with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import islpy as isl

from treduda.codegen import ir
from treduda.codegen.simplify import plus, times
from treduda.errors import StrategyError
from treduda.polyhedral import geometry
from treduda.polyhedral.ast_build import formula
from treduda.polyhedral.lower import Kind, Program, Statement
from treduda.polyhedral.strategy import Role, Scheduled

# The stages of a step before its compute statement (at STAGE_COMPUTE, after all of these).
STAGE_BEFORE, STAGE_COPY, STAGE_AFTER, STAGE_LOAD = 0, 1, 2, 3


class Stager:
    """Adds the copy and barrier statements of one staged kernel."""

    def __init__(self, scheduled: Scheduled, staged: list[str], pad: int, preload: bool,
                 double_buffer: bool, async_copy: bool):
        self.scheduled = scheduled
        self.program = scheduled.program
        self.staged = staged
        self.pad = pad
        self.preload = preload
        self.double_buffer = double_buffer
        self.async_copy = async_copy
        # asynchronous copies into two buffers run a step ahead, as preloaded loads do
        self.ahead = async_copy and double_buffer
        roles = scheduled.roles
        self.stage = roles.index(Role.STAGE)
        self.keep = [n for n in range(self.stage) if roles[n] != Role.THREAD]
        # The copy loop takes the innermost dimension within a step: the one unrolled
        # (preloaded registers are indexed by it).
        inner = scheduled.positions(Role.INNER)
        self.copy_loop = inner[-1] if inner else None
        self.statements: list[Statement] = []
        self.locals: list[ir.Local] = []
        self.step: int | None = None  # the innermost step dimension of the statement staged

    def run(self) -> Scheduled:
        schedule = self.scheduled.schedule
        for s in self.scheduled.statements:
            if s.kind != Kind.REDUCE or not any(e.array in self.staged
                                                 for e in ir.elements(s.body)[1:]):
                self.statements.append(s)
                continue
            # Statements summing fewer indices have the later step dimensions fixed at 0.
            steps = self.scheduled.positions(Role.STEP)
            self.step = steps[len(s.summed) - 1] if steps else None
            prefix = self._prefix(s)
            accesses = list(s.accesses)
            for n, element in enumerate(ir.elements(s.body)):
                if n > 0 and element.array in self.staged:
                    accesses[n], copies = self._stage(s, prefix, element.array, accesses[n])
                    for statement, statement_schedule in copies:
                        self.statements.append(statement)
                        schedule = schedule.union(statement_schedule)
            syncs = [self._sync(s, prefix, STAGE_BEFORE, shift=self.ahead)]
            if not self.async_copy:
                syncs.append(self._sync(s, prefix, STAGE_AFTER))
            elif self.ahead:  # issued a step early; waited for, then seen by all, at the step
                syncs += [self._sync(s, prefix, STAGE_AFTER, "commit", ir.CommitCopies(),
                                     shift=True),
                          self._sync(s, prefix, STAGE_BEFORE, "wait",
                                     ir.Block((ir.WaitCopies(0), ir.Barrier())))]
            else:
                syncs.append(self._sync(s, prefix, STAGE_AFTER, body=ir.Block((
                    ir.CommitCopies(), ir.WaitCopies(0), ir.Barrier()))))
            if self.preload:  # every thread iterates over the step the first loads happen in
                syncs.append(self._sync(s, prefix, STAGE_BEFORE, "anchor", ir.Block(()),
                                        shift=True))
            for sync, sync_schedule in syncs:
                self.statements.append(sync)
                schedule = schedule.union(sync_schedule)
            self.statements.append(replace(s, accesses=tuple(accesses)))
        return replace(self.scheduled, statements=tuple(self.statements), schedule=schedule,
                       locals=self.scheduled.locals + tuple(self.locals))

    def _prefix(self, s: Statement) -> isl.Map:
        """``{ S[..] -> P }``: the schedule of ``s`` up to its steps, without thread ids."""
        full = isl.Map.from_union_map(self.scheduled.schedule.intersect_domain(
            isl.UnionSet.from_set(s.accesses[0].domain())))
        for n in reversed(range(full.dim(isl.dim_type.out))):
            if n not in self.keep:
                full = full.project_out(isl.dim_type.out, n, 1)
        return full

    def _stage(self, s: Statement, prefix: isl.Map, tensor: str, access: isl.Map):
        """The shared tile of one access: the new access of ``s`` and the copy statement."""
        name = self._name(tensor)
        access = access.reset_tuple_id(isl.dim_type.out)  # { S[..] -> [a] }
        footprint = prefix.reverse().apply_range(access)  # { P -> [a] }
        origin = _corner(footprint)  # { P -> [o] }
        rank = access.dim(isl.dim_type.out)
        relative = footprint.range_product(origin).apply_range(_difference(rank, "[", "]"))
        box = []
        for d in range(rank):
            largest = relative.range().dim_max(d).max_val()
            if not largest.is_int():
                raise StrategyError(f"the footprint of {tensor} per step is unbounded; choose "
                                    "a step (step > 0) to stage it")
            box.append(largest.to_python() + 1)
        shape = tuple(geometry.padded(self.program, self.program.contraction.inputs[tensor],
                                      box, self.pad, self.scheduled.params))
        self.locals.append(ir.Local(name, ir.Space.SHARED, self._buffered(shape, shape=True),
                                    self.program.layout))

        at = prefix.apply_range(origin)  # { S[..] -> [o(P)] }
        shared = access.range_product(at).apply_range(_difference(rank, "[", "]"))
        if self.double_buffer:  # { S[..] -> [b, a - o(P)] } with b the step's parity
            coordinates = [f"p{n}" for n in range(len(self.keep))]
            parity = isl.Map(f"{{ [{', '.join(coordinates)}] -> [{self._parity()}] }}")
            buffer = prefix.apply_range(parity)
            pair = (buffer.range_product(shared) if self.program.layout == "C"
                    else shared.range_product(buffer))
            shared = pair.flatten_range()
        shared = shared.set_tuple_name(isl.dim_type.out, name)
        return shared, self._copy(s, name, tensor, origin, box)

    def _parity(self) -> str:
        """Which buffer a step uses, in the copy statements' coordinates ``p0, p1, ..``."""
        return f"p{self.keep.index(self.step)} mod 2"

    def _buffered(self, items: Sequence, shape: bool = False, formulas: bool = False) -> tuple:
        """A tile's coordinates (isl text, or IR ``formulas``) or its ``shape`` with the buffer
        dimension added as the slowest: the step's parity (or its extent, 2)."""
        if not self.double_buffer:
            return tuple(items)
        buffer = (2 if shape else self._parity() if not formulas
                  else ir.Binary(ir.Op.MOD, ir.Var(f"p{self.keep.index(self.step)}"), ir.Int(2)))
        return (buffer, *items) if self.program.layout == "C" else (*items, buffer)

    def _copy(self, s: Statement, name: str, tensor: str, origin: isl.Map, box: list[int]):
        """``copy[P, c, t0, t1, t2]: X_sh[u(e)] = X[o(P) + u(e)]`` and its schedule, for the
        element ``e = T c + t`` of thread ``t = t0 + bx t1 + bx by t2`` (``T`` threads) whose
        coordinates ``u(e)`` lie inside the box and ``X``; with preloading, the ``load`` (into
        registers, one step ahead) and ``store`` statements that replace it."""
        prefix = tuple(f"p{n}" for n in range(len(self.keep)))
        indices = (*prefix, "c", "t0", "t1", "t2")
        bx, by, bz = self.scheduled.block
        threads = bx * by * bz
        fastest = len(box) - 1 if self.program.layout == "C" else 0
        width = self._width(tensor, origin, box, fastest) if self.async_copy else 1
        runs = [extent // width if d == fastest else extent for d, extent in enumerate(box)]
        numbering, volume = _numbering(runs, self.program.layout, threads)
        copies = -(-volume // threads)
        e = f"({threads}*c + t0 + {bx}*t1 + {bx * by}*t2)"
        unflatten = [f"floor({e}/{stride})" + (f" mod {modulus}" if modulus else "")
                     for stride, modulus in numbering]
        inside = "".join(f" and {u} < {extent}" for u, (_, modulus), extent
                         in zip(unflatten, numbering, runs, strict=True)
                         if modulus and modulus > extent)
        coordinates = [copy_coordinate(stride, modulus, self.scheduled.block)
                       for stride, modulus in numbering]
        if width > 1:  # a run's first element
            unflatten[fastest] = f"{width}*({unflatten[fastest]})"
            coordinates[fastest] = ir.Binary(ir.Op.MUL, ir.Int(width), coordinates[fastest])
        offsets = isl.Map(f"{{ [c, t0, t1, t2] -> [{', '.join(unflatten)}] : 0 <= c < {copies}"
                          f" and 0 <= t0 < {bx} and 0 <= t1 < {by} and 0 <= t2 < {bz}"
                          f" and {e} < {volume}{inside} }}")
        boxed = (origin.product(offsets)
                 .apply_range(_sum(len(box), tensor)).flatten_domain())  # { [P, c, t] -> X[..] }
        element = boxed.intersect_range(_bounds(self.program, tensor))
        # coalesced: a group's box is a union of pieces, each scanned by isl's AST generator
        domain = element.domain().coalesce()
        tile = f"{name}[{', '.join(self._buffered(unflatten))}]"
        tile_formula = self._buffered(coordinates, formulas=True)
        corners = isl.PwMultiAff.from_map(origin)
        corner = [formula(corners.get_pw_aff(d), list(prefix)) for d in range(len(box))]
        source_formula = tuple(ir.Binary(ir.Op.ADD, o, u)
                               for o, u in zip(corner, coordinates, strict=True))
        target, source = ir.Element(name, ()), ir.Element(tensor, ())
        if self.async_copy:  # runs inside the tensor, and zero-filled runs of the box outside
            nowhere = tuple(ir.Int(0) for _ in box)
            return [self._statement(f"copy_{name}", indices, domain, STAGE_COPY,
                                    ir.AsyncCopy(target, source, width),
                                    (tile, tile_formula), (element, source_formula),
                                    shift=self.ahead),
                    self._statement(f"zero_{name}", indices, boxed.domain().subtract(domain),
                                    STAGE_COPY, ir.AsyncCopy(target, source, width, zero=True),
                                    (tile, tile_formula),
                                    (f"{tensor}[{', '.join('0' for _ in box)}]", nowhere),
                                    shift=self.ahead)]
        if not self.preload:
            copy = self._statement(f"copy_{name}", indices, domain, STAGE_COPY,
                                   ir.Assign(target, "=", source),
                                   (tile, tile_formula), (element, source_formula))
            return [copy]
        registers = self._name(tensor, "_pre")
        self.locals.append(ir.Local(registers, ir.Space.REGISTER, (copies,)))
        slot = (f"{registers}[c]", (ir.Var("c"),))
        held = ir.Element(registers, ())
        load = self._statement(f"load_{name}", indices, domain, STAGE_LOAD,
                               ir.Assign(held, "=", source), slot,
                               (element, source_formula), shift=True)
        store = self._statement(f"store_{name}", indices, domain, STAGE_COPY,
                                ir.Assign(target, "=", held), (tile, tile_formula), slot)
        return [load, store]

    def _width(self, tensor: str, origin: isl.Map, box: list[int], fastest: int) -> int:
        """Elements per asynchronous copy of ``tensor``'s tile (:func:`geometry.async_width`),
        halved while some tile's origin ``{ P -> [o] }`` is no multiple of it along the fastest
        dimension (a tile of a group of indices may start anywhere along the slower ones)."""
        indices = self.program.contraction.inputs[tensor]
        width = geometry.async_width(self.program, indices, dict(zip(indices, box, strict=True)),
                                     self.pad, self.scheduled.params)
        corners = origin.range()
        names = [f"o{d}" for d in range(len(box))]
        while width > 1:
            misaligned = isl.Set(f"{self.program.isl_params()}{{ [{', '.join(names)}] : "
                                 f"o{fastest} mod {width} != 0 }}")
            if corners.intersect(misaligned).is_empty():
                break
            width //= 2
        return width

    def _statement(self, title: str, indices: tuple[str, ...], domain: isl.Set, stage: int,
                   body: ir.Assign | ir.AsyncCopy,
                   target_access: tuple[str, tuple[ir.Expr, ...]],
                   source_access: tuple[str | isl.Map, tuple[ir.Expr, ...]],
                   shift: bool = False):
        """A statement copying ``body``'s source to its target over the copy domain
        ``[P, c, t0, t1, t2]``, each access given as its relation (or the text of one) and its
        formulas; ``shift`` schedules it one step early."""
        domain = domain.set_tuple_name(title)
        head = f"{title}[{', '.join(indices)}]"

        def access(text_or_map: str | isl.Map) -> isl.Map:
            if isinstance(text_or_map, str):
                text_or_map = isl.Map(f"{self.program.isl_params()}{{ {head} -> "
                                      f"{text_or_map} }}")
            return text_or_map.set_tuple_name(isl.dim_type.in_, title).intersect_domain(domain)

        statement = Statement(title, Kind.COPY, indices, body,
                              (access(target_access[0]), access(source_access[0])),
                              formulas=(target_access[1], source_access[1]))
        dims = self._dims(indices[:-4], indices[-3:], stage, "c", shift)
        schedule = isl.Map(f"{self.program.isl_params()}{{ {head} -> [{', '.join(dims)}] }}")
        return statement, isl.UnionMap.from_map(schedule.intersect_domain(domain))

    def _sync(self, s: Statement, prefix: isl.Map, stage: int, kind: str = "sync",
              body: ir.Stmt | None = None, shift: bool = False):
        """A statement every thread of the block executes at ``stage`` of each step of ``s``
        (``shift``: one step early): a barrier, or ``body``. Double-buffered, the barrier
        before the copy (``kind`` "sync" at STAGE_BEFORE) is only where the innermost step
        starts again.

        An ``anchor`` does nothing one step early: loops that contain barriers must run the same
        iterations in every thread, and with preloading some threads load one step early. A
        ``commit`` or a ``wait`` (with the barrier after it) of asynchronous copies is each
        thread's own."""
        title = f"{kind}{stage}_{s.name}"
        indices = tuple(f"p{n}" for n in range(len(self.keep))) + ("t0", "t1", "t2")
        threads = " and ".join(f"0 <= t{n} < {b}" for n, b in enumerate(self.scheduled.block))
        block = isl.Set(f"{{ [t0, t1, t2] : {threads} }}")
        steps = prefix.range()
        if self.double_buffer and stage == STAGE_BEFORE and kind == "sync":
            steps = steps.fix_val(isl.dim_type.set, self.keep.index(self.step), 0)
        domain = steps.flat_product(block).set_tuple_name(title)
        dims = self._dims(indices[:-3], ["t0", "t1", "t2"], stage, "0", shift=shift)
        schedule = isl.Map(f"{self.program.isl_params()}{{ {title}[{', '.join(indices)}] -> "
                           f"[{', '.join(dims)}] }}").intersect_domain(domain)
        body = ir.Barrier() if body is None else body
        return Statement(title, Kind.SYNC, indices, body, ()), isl.UnionMap.from_map(schedule)

    def _dims(self, prefix: Sequence[str], threads: Sequence[str], stage: int, loop: str,
              shift: bool = False) -> list[str]:
        """A full schedule point: the prefix, thread ids, the stage, the copy loop, zeros;
        ``shift`` moves it one step earlier (the innermost step coordinate minus one)."""
        dims = ["0"] * len(self.scheduled.roles)
        for position, name in zip(self.keep, prefix, strict=True):
            dims[position] = name
        for axis, name in enumerate(threads):
            dims[3 + axis] = name
        dims[self.stage] = str(stage)
        if self.copy_loop is not None:
            dims[self.copy_loop] = loop
        if shift:
            dims[self.step] = f"{dims[self.step]} - 1"
        return dims

    def _name(self, tensor: str, suffix: str = "_sh") -> str:
        taken = {local.name for local in (*self.scheduled.locals, *self.locals)}
        name = f"{tensor}{suffix}"
        n = 1
        while name in taken:
            name, n = f"{tensor}{suffix}{n}", n + 1
        return name


def _corner(footprint: isl.Map) -> isl.Map:
    """``{ P -> [o] }``: the smallest value of each dimension of ``{ P -> [a] }``, the corner
    of its box. Not the lexicographic minimum: where a tile of a group of indices wraps
    (``c`` runs out and ``a`` steps on), the footprint is no box and that minimum's later
    coordinates are not the smallest."""
    out = isl.dim_type.out
    rank = footprint.dim(out)
    corner = isl.Map.from_pw_multi_aff(footprint.project_out(out, 0, rank)
                                       .lexmin_pw_multi_aff())  # { P -> [] }
    for d in range(rank):
        line = footprint.project_out(out, d + 1, rank - d - 1).project_out(out, 0, d)
        corner = corner.range_product(isl.Map.from_pw_multi_aff(line.lexmin_pw_multi_aff()))
        corner = corner.flatten_range()
    return corner


def _difference(rank: int, head: str, tail: str) -> isl.Map:
    """``{ [[a] -> [o]] -> head a - o tail }`` for vectors of ``rank`` values."""
    a = [f"a{d}" for d in range(rank)]
    o = [f"o{d}" for d in range(rank)]
    diff = ", ".join(f"a{d} - o{d}" for d in range(rank))
    return isl.Map(f"{{ [[{', '.join(a)}] -> [{', '.join(o)}]] -> {head}{diff}{tail} }}")


def _sum(rank: int, tensor: str) -> isl.Map:
    """``{ [[o] -> [u]] -> X[o + u] }``."""
    o = [f"o{d}" for d in range(rank)]
    u = [f"u{d}" for d in range(rank)]
    total = ", ".join(f"o{d} + u{d}" for d in range(rank))
    return isl.Map(f"{{ [[{', '.join(o)}] -> [{', '.join(u)}]] -> {tensor}[{total}] }}")


def _numbering(box: list[int], layout: str, threads: int
               ) -> tuple[list[tuple[int, int | None]], int]:
    """How a tile's elements ``e`` are numbered: per box dimension, the stride and the modulus
    (None for the slowest dimension) of its coordinate ``floor(e / stride) mod modulus``, and
    the number of values ``e`` takes. Elements are numbered in memory order (the fastest
    dimension first) by :func:`~treduda.polyhedral.geometry.copy_extents`, which pads
    dimensions so that no copy divides; a padded dimension's modulus exceeds its extent."""
    order = list(reversed(range(len(box)))) if layout == "C" else list(range(len(box)))
    extents = geometry.copy_extents([box[d] for d in order], threads)
    numbering: list[tuple[int, int | None]] = [(1, None)] * len(box)
    stride = 1
    for n, (d, extent) in enumerate(zip(order, extents, strict=True)):
        numbering[d] = (stride, None if n == len(order) - 1 else extent)
        stride *= extent
    return numbering, stride


def copy_coordinate(stride: int, modulus: int | None, block: Sequence[int]) -> ir.Expr:
    """``floor(e / stride) mod modulus`` (no remainder for None) of the element
    ``e = T c + t0 + bx t1 + bx by t2`` that thread ``(t0, t1, t2)`` of a ``block``
    (``bx, by, bz``; ``T`` threads) copies in the copy loop's iteration ``c``, as an
    expression of ``ir.Var`` ``c``, ``t0``, ``t1``, ``t2``.

    With a block of powers of two whose strides below ``T`` are powers of two too, and the
    others multiples of ``T`` (as :func:`~treduda.polyhedral.geometry.copy_extents` makes
    them), the coordinate is a sum of bit fields, one per thread id and one of ``c``, each
    shifted into place: ``16 * (t1 % 4) + t0``. The fields of the thread ids are the same in
    every iteration and those of ``c`` constants once the loop is unrolled, where
    ``floor(e / 8) mod 32`` would cost each iteration its own arithmetic."""
    bx, by, bz = block
    threads = bx * by * bz
    top = None if modulus is None else stride * modulus

    def aligned(bound: int | None) -> bool:  # a bit boundary, or one of c's steps
        return bound is None or (bound < threads and _power_of_two(bound)
                                 or bound % threads == 0)

    digits = [(ir.Var("t0"), 1, bx), (ir.Var("t1"), bx, by), (ir.Var("t2"), bx * by, bz),
              (ir.Var("c"), threads, None)]
    if not (all(_power_of_two(b) for b in block) and aligned(stride) and aligned(top)):
        e = plus(*(times(w, v) for v, w, _ in digits))
        quotient = ir.Binary(ir.Op.DIV, e, ir.Int(stride))
        return quotient if modulus is None else ir.Binary(ir.Op.MOD, quotient, ir.Int(modulus))
    fields = []
    for value, weight, radix in digits:  # the digit spans [weight, weight * radix) of e
        end = None if radix is None else weight * radix
        low = max(stride, weight)
        high = end if top is None else top if end is None else min(top, end)
        if high is not None and high <= low:
            continue
        field = value if low == weight else ir.Binary(ir.Op.DIV, value, ir.Int(low // weight))
        if high is not None and high != end:
            field = ir.Binary(ir.Op.MOD, field, ir.Int(high // low))
        fields.append((field, low // stride))
    return plus(*(times(w, v) for v, w in fields))


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _bounds(program: Program, tensor: str) -> isl.Set:
    indices = program.contraction.inputs[tensor]
    dims = [f"a{d}" for d in range(len(indices))]
    bounds = " and ".join(f"0 <= a{d} < {program.bound(i)}" for d, i in enumerate(indices))
    return isl.Set(f"{program.isl_params()}{{ {tensor}[{', '.join(dims)}] : {bounds or 'true'} }}")

"""How each dialect prints the mbarrier statements and the bulk tensor copy
(:data:`ir.MBARRIER_STATEMENTS`).

CUDA says them in inline PTX for sm_90 (PTX ISA 9.7.13.15 "mbarrier", 9.7.9.25.5
"cp.async.bulk.tensor"): an mbarrier's address is its shared-window address
(``__cvta_generic_to_shared``), a wait spins on ``mbarrier.try_wait.parity`` until it
succeeds, and a copy names its tensor map by the generic address of the ``__grid_constant__``
parameter that holds it (``td_tensor_map``, 128 bytes aligned to 64, as the driver's
``CUtensorMap``: the kernel needs no driver header, which NVRTC lacks).

OpenCL has no transaction barrier and no copy engine, so its twin computes the same values
in the same places: a bulk copy is the issuing thread's loads of the box's elements (zeros
outside the tensor) into the shared tile, each at the element the copy would fill, the tile's
swizzle placing it as it places every access; the wait for a phase is a work-group barrier,
after which every work-item sees those stores; init and arrive are nothing. A kernel that
waits therefore waits in code every work-item of the group reaches (the emulator, which runs
the copies' real asynchrony, checks the CUDA meaning). A warp-specialised split, whose roles
wait in branches of their own, runs in the twin step by step, one role after the other
between barriers (:func:`interleaved_roles`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..errors import TredudaError
from . import ir

# The kernel parameter type of a tensor map: CUtensorMap's 128 bytes, aligned to 64 (CUDA
# driver API, "CUtensorMap": "alignas(64) ... cuuint64_t opaque[16]")
TENSOR_MAP_TYPE = "td_tensor_map"
TENSOR_MAP_STRUCT = (f"struct __align__(64) {TENSOR_MAP_TYPE} {{ unsigned long long "
                     "opaque[16]; };")
# the twin's loop of one round around a role's single step, where isl scanned it straight
ONE_STEP = "td_step"


def has_transactions(kernel: ir.KernelIR) -> bool:
    return any(isinstance(s, ir.MBARRIER_STATEMENTS) for s in ir.nested(kernel.body))


def box_offset(tensor_map: ir.TensorMap, element: ir.Expr,
               coordinates: tuple[ir.Expr, ...]) -> tuple[ir.Expr, ir.Expr]:
    """The offset in the tensor of the box's ``element`` (dimension 0 fastest) for a copy
    from ``coordinates``, and the condition that it lies inside the tensor."""
    offset, inside, rest = ir.Int(0), None, element
    for extent, stride, size, start in zip(tensor_map.extents, tensor_map.strides,
                                           tensor_map.box, coordinates, strict=True):
        along = ir.Binary(ir.Op.ADD, start, ir.Binary(ir.Op.MOD, rest, ir.Int(size)))
        rest = ir.Binary(ir.Op.DIV, rest, ir.Int(size))
        offset = ir.Binary(ir.Op.ADD, offset, ir.Binary(ir.Op.MUL, along, ir.Int(stride)))
        bounds = ir.Binary(ir.Op.AND, ir.Binary(ir.Op.GE, along, ir.Int(0)),
                           ir.Binary(ir.Op.LT, along, ir.Int(extent)))
        inside = bounds if inside is None else ir.Binary(ir.Op.AND, inside, bounds)
    return offset, inside


class Transactions:
    """Both spellings; ``cuda`` picks PTX, else the OpenCL twin. ``assign`` prints an
    assignment as the dialect prints it (the twin's copies of stored values)."""

    def __init__(self, kernel: ir.KernelIR, expr: Callable[[ir.Expr], str], cuda: bool,
                 barrier: str, assign: Callable[[ir.Assign, int], list[str]]):
        self.kernel, self.expr, self.cuda = kernel, expr, cuda
        self.barrier, self.assign = barrier, assign
        self.maps = {m.name: m for m in kernel.tensor_maps}

    def declare(self, local: ir.Local, offset: int | None) -> list[str]:
        """The mbarrier objects of ``local`` (CUDA: 8-byte words of shared memory, at
        ``offset`` of the block's pool where its tiles share one; none in OpenCL)."""
        if not self.cuda:
            return []
        if offset is None:
            return [f"__shared__ __align__(8) unsigned long long {local.name}[{local.size}];"]
        return [f"unsigned long long *const {local.name} = "
                f"reinterpret_cast<unsigned long long *>(td_shared + {offset});"]

    def arguments(self, host: bool = False) -> list[str]:
        """The tensor maps' kernel parameters, passed by value (CUDA only: the twin reads
        the tensors); a kernel's are ``__grid_constant__`` (CUDA C++ Programming Guide,
        "grid_constant"), which host code may not say."""
        if not self.cuda:
            return []
        qualifier = "" if host else "__grid_constant__ "
        return [f"const {qualifier}{TENSOR_MAP_TYPE} {m.name}" for m in self.kernel.tensor_maps]

    def address(self, barrier: ir.Load) -> str:
        return f"(unsigned)__cvta_generic_to_shared(&{barrier.array}[{self.expr(barrier.offset)}])"

    def stmt(self, s: ir.Stmt, depth: int, pad: str) -> list[str]:
        if not self.cuda:
            return self.twin(s, depth, pad)
        if isinstance(s, ir.MbarrierInit):
            return [f'{pad}asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: '
                    f'"r"({self.address(s.barrier)}), "n"({s.arrivals}) : "memory");',
                    f'{pad}asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");']
        if isinstance(s, ir.MbarrierArrive):
            if not s.expect_bytes:
                return [f'{pad}asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: '
                        f'"r"({self.address(s.barrier)}) : "memory");']
            return [f'{pad}asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], '
                    f'%1;" :: "r"({self.address(s.barrier)}), "n"({s.expect_bytes}) : '
                    '"memory");']
        if isinstance(s, ir.MbarrierWait):
            inner = pad + "  "
            return [f"{pad}{{",
                    f"{inner}unsigned td_done = 0;",
                    f"{inner}while (!td_done) {{",
                    f'{inner}  asm volatile("{{ .reg .pred p; mbarrier.try_wait.parity.'
                    'shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }" : "=r"(td_done) : '
                    f'"r"({self.address(s.barrier)}), "r"((unsigned)({self.expr(s.parity)})) '
                    ': "memory");',
                    f"{inner}}}",
                    f"{pad}}}"]
        if isinstance(s, ir.TensorCopy):
            rank = len(s.coordinates)
            places = ", ".join(f"%{2 + d}" for d in range(rank))
            coordinates = ", ".join(f'"r"((int)({self.expr(c)}))' for c in s.coordinates)
            return [f'{pad}asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.'
                    f'mbarrier::complete_tx::bytes [%0], [%1, {{{places}}}], [%{2 + rank}];"',
                    f'{pad}    :: "r"((unsigned)__cvta_generic_to_shared(&{s.target.array}'
                    f'[{self.expr(s.target.offset)}])), "l"(&{s.map}), {coordinates}, '
                    f'"r"({self.address(s.barrier)}) : "memory");']
        raise TypeError(f"cannot print statement {s!r}")

    def twin(self, s: ir.Stmt, depth: int, pad: str) -> list[str]:
        """The twin's wait is a work-group barrier, its copy the issuing thread's loads."""
        if isinstance(s, ir.MbarrierWait):
            return [pad + self.barrier]
        if not isinstance(s, ir.TensorCopy):
            return []
        tensor_map = self.maps[s.map]
        element = ir.Var("td_e")
        source, inside = box_offset(tensor_map, element, s.coordinates)
        copy = ir.Assign(ir.Load(s.target.array, ir.Binary(ir.Op.ADD, s.target.offset, element)),
                         "=", ir.Select(inside, ir.Load(tensor_map.tensor, source),
                                        ir.Float(0.0)))
        return [f"{pad}for (int td_e = 0; td_e < {tensor_map.box_elements}; td_e++) {{",
                *self.assign(copy, depth + 1), f"{pad}}}"]


def interleaved_roles(s: ir.If) -> ir.Stmt:
    """The twin of a role split (:func:`ir.is_role_split`): each branch is statements
    before its loop over the steps, the loop, statements after; the twin runs both befores,
    then per step the producing role's body (the one that starts the copies), a barrier, the
    other's, a barrier (the producer fills a stage the consumers then read, which they read
    a round of stages before), then both afters. Its waits are those barriers."""
    parts = [_around_loop(branch) for branch in (s.then, s.otherwise)]
    (before_a, loop_a, after_a), (before_b, loop_b, after_b) = parts
    if (loop_a.iterator, loop_a.start, loop_a.condition, loop_a.step) != (
            loop_b.iterator, loop_b.start, loop_b.condition, loop_b.step):
        raise TredudaError("the OpenCL twin runs a warp-specialised kernel's roles step by "
                           "step: both need one loop over the same steps")
    roles = [ir.If(s.condition, _without_waits(loop_a.body)), ir.Barrier(),
             ir.If(s.condition, ir.Block(()), _without_waits(loop_b.body)), ir.Barrier()]
    if any(isinstance(c, ir.TensorCopy) for c in ir.nested(loop_b)):  # the producer first
        roles = roles[2:] + roles[:2]
    step = ir.Block(tuple(roles))
    return ir.Block((ir.If(s.condition, before_a, before_b), replace(loop_a, body=step),
                     _role(after_a, s.condition, True), _role(after_b, s.condition, False)))


def _role(s: ir.Stmt, condition: ir.Expr, then: bool) -> ir.Stmt:
    """``s`` run by the threads of one role (where ``condition`` is ``then``), its barriers
    (a role's own, named: :class:`ir.Barrier`'s ``threads``) by every work-item, as a
    work-group barrier must be."""
    if not ir.has_barrier(s):
        return ir.If(condition, s) if then else ir.If(condition, ir.Block(()), s)
    if isinstance(s, ir.Barrier):
        return ir.Barrier()
    if isinstance(s, ir.Block):  # each run of statements between barriers tested once
        runs: list[list[ir.Stmt]] = [[]]
        for child in s.body:
            if ir.has_barrier(child):
                runs += [[child], []]
            else:
                runs[-1].append(child)
        return ir.Block(tuple(_role(run[0] if len(run) == 1 and ir.has_barrier(run[0])
                                    else ir.Block(tuple(run)), condition, then)
                              for run in runs if run))
    if isinstance(s, ir.For) and not (ir.reads_thread_id(s.start)
                                      or ir.reads_thread_id(s.condition)):
        return replace(s, body=_role(s.body, condition, then))
    if isinstance(s, ir.If) and not ir.reads_thread_id(s.condition):
        return ir.map_children(s, lambda c: _role(c, condition, then))
    raise TredudaError("the OpenCL twin runs a role's barriers with every work-item: a "
                       "barrier under a test of thread ids has no twin")


def _around_loop(branch: ir.Stmt) -> tuple[ir.Block, ir.For, ir.Block]:
    """A role's statements before its loop over the steps (the one statement that waits
    for mbarriers or starts copies), the loop, and after it (an arrival there, where isl
    scanned the last step's alone, is nothing to the twin)."""
    body = branch.body if isinstance(branch, ir.Block) else (branch,)
    loops = [n for n, c in enumerate(body) if any(
        isinstance(d, (ir.MbarrierWait, ir.TensorCopy)) for d in ir.nested(c))]
    if len(loops) != 1:
        raise TredudaError("the OpenCL twin runs a warp-specialised kernel's roles step by "
                           "step: each must use its mbarriers in one loop over the steps")
    n, loop = loops[0], body[loops[0]]
    # one thread's loop (a producer's elected issuer): the loop, that thread's body in it
    if (isinstance(loop, ir.If) and loop.otherwise is None and isinstance(loop.then, ir.For)
            and ir.reads_thread_id(loop.condition)):
        loop = replace(loop.then, body=ir.If(loop.condition, loop.then.body))
    if not isinstance(loop, ir.For):  # a reduction of one step, scanned straight: one round
        loop = ir.For(ONE_STEP, ir.Int(0), ir.Binary(ir.Op.LT, ir.Var(ONE_STEP), ir.Int(1)),
                      ir.Int(1), loop)
    return ir.Block(body[:n]), loop, ir.Block(body[n + 1:])


def _without_waits(s: ir.Stmt) -> ir.Stmt:
    if isinstance(s, ir.MbarrierWait):
        return ir.Block(())
    return ir.map_children(s, _without_waits)

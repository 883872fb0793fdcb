"""How each dialect prints Hopper's warpgroup statements (:data:`ir.WARPGROUP_STATEMENTS`,
:class:`ir.ProxyFence`).

CUDA says them in inline PTX for sm_90a (PTX ISA, "Asynchronous Warpgroup Level Matrix
Multiply-Accumulate Instructions"): the MMA takes a 64-bit matrix descriptor per operand
(``td_wgmma_descriptor``, templates/warpgroup.cu.j2) and its accumulators as ``n / 2`` float
registers of each thread, which nvcc assembles into HGMMA.

OpenCL computes the same tile products at once, as the tensor-core twin does
(:mod:`treduda.codegen.fragments`): each thread adds to each of its accumulator registers, in
wgmma's own register layout, the dot product of its A row and B row (B is n x k), read from
the shared tiles where the descriptors say, FMA after FMA in float32 from inputs converted
exactly. Fences, commits and waits order nothing there: every product is done when its
statement returns.
"""

from __future__ import annotations

from collections.abc import Callable

from . import ir
from .simplify import plus, quotient, remainder, times

WARPGROUP_ARCH = "sm_90"  # whose "a" variant has wgmma (:mod:`.targets`)
WGMMA_TYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
# the thread's number in its warpgroup, as the twin reads it
GROUP_THREAD = "td_g"


def has_warpgroups(kernel: ir.KernelIR) -> bool:
    return any(isinstance(s, ir.WarpgroupMultiply) for s in ir.nested(kernel.body))


def accumulator_row(thread: ir.Expr, register: ir.Expr) -> ir.Expr:
    """The row of the m64 tile that ``register`` of ``thread`` (of its warpgroup) holds
    (:class:`ir.WarpgroupMultiply`)."""
    return plus(times(16, quotient(thread, ir.WARP)), quotient(remainder(thread, ir.WARP), 4),
                times(8, quotient(remainder(register, 4), 2)))


def accumulator_column(thread: ir.Expr, register: ir.Expr) -> ir.Expr:
    """The column of the tile that ``register`` of ``thread`` holds."""
    return plus(times(8, quotient(register, 4)), times(2, remainder(thread, 4)),
                remainder(register, 2))


def operand_element(first: ir.Load, layout: ir.CoreMatrices, row: ir.Expr, k: ir.Expr,
                    itemsize: int) -> ir.Load:
    """Element (``row``, ``k``) of the operand that starts at ``first``
    (:class:`ir.CoreMatrices`, in elements of ``itemsize`` bytes)."""
    return ir.Load(first.array, plus(first.offset, layout.offset(row, k, itemsize)))


class Warpgroup:
    """Both spellings; ``cuda`` picks PTX, else the OpenCL twin."""

    def __init__(self, kernel: ir.KernelIR, expr: Callable[[ir.Expr], str], cuda: bool,
                 value_type: str, itemsize: int, thread: str):
        self.kernel, self.expr, self.cuda = kernel, expr, cuda
        self.value_type, self.itemsize, self.thread = value_type, itemsize, thread

    def stmt(self, s: ir.Stmt, pad: str) -> list[str]:
        if isinstance(s, ir.WarpgroupMultiply):
            return self.multiply(s, pad) if self.cuda else self.twin(s, pad)
        if not self.cuda:
            return []
        instruction = {ir.WarpgroupFence: "wgmma.fence.sync.aligned;",
                       ir.WarpgroupCommit: "wgmma.commit_group.sync.aligned;",
                       ir.ProxyFence: "fence.proxy.async.shared::cta;"}.get(type(s))
        if instruction is not None:
            return [f'{pad}asm volatile("{instruction}" ::: "memory");']
        if isinstance(s, ir.WarpgroupWait):
            return [f'{pad}asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"({s.pending}) '
                    ': "memory");']
        if isinstance(s, ir.SetMaxRegisters):
            action = "inc" if s.increase else "dec"
            return [f'{pad}asm volatile("setmaxnreg.{action}.sync.aligned.u32 %0;" :: '
                    f'"n"({s.count}));']
        raise TypeError(f"cannot print statement {s!r}")

    def descriptor(self, first: ir.Load, layout: ir.CoreMatrices) -> str:
        """The operand's descriptor; its start, a line's first element (not moved by the
        swizzle), as the tile names it."""
        leading, stride, swizzle = layout.descriptor()
        return (f"td_wgmma_descriptor(&{first.array}[{self.expr(first.offset)}], "
                f"{leading}, {stride}, {swizzle})")

    def multiply(self, s: ir.WarpgroupMultiply, pad: str) -> list[str]:
        """One ``wgmma.mma_async``: scale-d 1 (the accumulators are added to), A and B
        unscaled, each transposed where it is MN-major (imm-trans 1; TF32 takes no transpose
        operands: K-major only)."""
        m, n, k = s.shape
        registers = n // 2
        start = self.expr(s.accumulator.offset)
        outputs = ", ".join(f'"+f"({s.accumulator.array}[{start} + {i}])'
                            for i in range(registers))
        d = ", ".join(f"%{i}" for i in range(registers))
        kind = WGMMA_TYPES[self.kernel.dtype]
        transposes = "" if kind == "tf32" else "".join(
            f", {int(not layout.k_major)}" for layout in (s.a_layout, s.b_layout))
        return [f"{pad}asm volatile(\"wgmma.mma_async.sync.aligned.m{m}n{n}k{k}.f32.{kind}.{kind} "
                f"{{{d}}}, %{registers}, %{registers + 1}, 1, 1, 1{transposes};\"",
                f"{pad}    : {outputs}",
                f"{pad}    : \"l\"({self.descriptor(s.a, s.a_layout)}), "
                f"\"l\"({self.descriptor(s.b, s.b_layout)}) : \"memory\");"]

    def twin(self, s: ir.WarpgroupMultiply, pad: str) -> list[str]:
        """Each accumulator register of the thread plus its A row times its B row."""
        _, n, k = s.shape
        thread, register = ir.Var(GROUP_THREAD), ir.Var("td_i")
        row, column, kk = ir.Var("td_r"), ir.Var("td_c"), ir.Var("td_k")
        a = operand_element(s.a, s.a_layout, row, kk, self.itemsize)
        b = operand_element(s.b, s.b_layout, column, kk, self.itemsize)
        accumulator = ir.Load(s.accumulator.array, plus(s.accumulator.offset, register))
        inner = f"{pad}    "
        return [f"{pad}{{",
                f"{pad}  const int {GROUP_THREAD} = {self.thread};",
                f"{pad}  for (int td_i = 0; td_i < {n // 2}; td_i++) {{",
                f"{inner}const int td_r = {self.expr(accumulator_row(thread, register))};",
                f"{inner}const int td_c = {self.expr(accumulator_column(thread, register))};",
                f"{inner}{self.value_type} td_s = {self.expr(accumulator)};",
                f"{inner}for (int td_k = 0; td_k < {k}; td_k++) td_s = fma("
                f"{self.expr(a)}, {self.expr(b)}, td_s);",
                f"{inner}{self.expr(accumulator)} = td_s;",
                f"{pad}  }}",
                f"{pad}}}"]

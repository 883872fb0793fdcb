"""The second kernel of a deterministic split reduction: it adds the parts up in a fixed order.

A split reduction's blocks each sum a part of the reduction. Added into the output atomically,
the parts arrive in whatever order the blocks finish, and floating-point addition rounds
differently for each order. A deterministic kernel instead stores each part's values, already
scaled as the statement scales its sum, into a workspace ``td_parts[part, o]`` (the part
slowest in memory in either layout, so part ``p`` of flat output element ``o`` lies at
``p * N + o``). This kernel then computes, for every flat output element ``o`` in a thread of
its own::

    C[o] op= ((td_parts[o] + td_parts[N + o]) + td_parts[2N + o]) + ...

with the statement's ``=``, ``+=`` or ``-=`` applied once, so the result is the same bit for
bit on every run. It is plain kernel IR, printed by both dialects like any other kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import ir

THREADS = 256  # threads per block of the adding kernel: one output element each


@dataclass(frozen=True)
class PartsSum:
    """The adding kernel and its launch geometry (fixed sizes: split kernels have them)."""

    kernel: ir.KernelIR
    grid: tuple[int, int, int]
    count: int  # parts added
    block: tuple[int, int, int] = (THREADS, 1, 1)


def workspace(kernel: ir.KernelIR) -> ir.Local | None:
    """The global workspace a kernel stores its parts into, if it has one."""
    return next((v for v in kernel.locals if v.space is ir.Space.GLOBAL), None)


def parts_sum(first: ir.KernelIR, output: str, op: str, layout: str) -> PartsSum | None:
    """The kernel that adds ``first``'s parts into ``output`` with ``op`` (None where
    ``first`` has no workspace: it needs no second kernel)."""
    parts = workspace(first)
    if parts is None:
        return None
    count = parts.shape[0] if layout == "C" else parts.shape[-1]
    elements = parts.size // count
    index = ir.Binary(ir.Op.ADD, ir.Binary(ir.Op.MUL, ir.Index(ir.Builtin.BLOCK_ID, 0),
                                           ir.Int(THREADS)), ir.Index(ir.Builtin.THREAD_ID, 0))
    total: ir.Expr = ir.Load(parts.name, index)
    for p in range(1, count):
        total = ir.Binary(ir.Op.ADD, total, ir.Load(parts.name, ir.Binary(
            ir.Op.ADD, ir.Int(p * elements), index)))
    body = ir.If(ir.Binary(ir.Op.LT, index, ir.Int(elements)),
                 ir.Assign(ir.Load(output, index), op, total))
    kernel = ir.KernelIR(name=f"{first.name}_sum", dtype=first.dtype,
                         index_bits=first.index_bits,  # which counts the workspace
                         params=(ir.Param(output, ir.ParamKind.OUTPUT),
                                 ir.Param(parts.name, ir.ParamKind.WORKSPACE)),
                         locals=(parts,), body=body)
    return PartsSum(kernel, (-(-elements // THREADS), 1, 1), count)

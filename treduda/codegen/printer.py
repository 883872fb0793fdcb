"""CUDA and OpenCL printers: one walk over the kernel IR, two dialect tables.

Everything a dialect changes is a field of :class:`Dialect`; the rest is printed once. Every
name that reaches the C text is checked here a last time (:func:`check_identifiers`).

Complex kernels hold ``float2`` / ``double2`` values (real part ``.x``, imaginary part ``.y``);
neither dialect has complex operators, so value arithmetic is printed as calls of the helpers
of ``templates/complex.j2`` (``td_double2_fma(a, b, c)`` for ``c + a*b``: four real FMAs).

Integer kernels hold their values in the unsigned type of the same width (``Dialect.
integer_types``): C defines unsigned arithmetic modulo 2**bits, while signed overflow is
undefined, and the wrapped bits are numpy's signed result. Literals stay signed decimals, which
C converts to the unsigned type modulo 2**bits as well.

float16 and bfloat16 kernels take tensors in the stored type (the dialect's :class:`Storage`)
and compute in float32: every read of a tensor element converts it, every write converts back
(an update ``C[o] += v`` is ``C[o] = store(load(C[o]) + v)``); registers, shared tiles,
workspaces and scalars hold float32. Calls of :class:`ir.Function` print as calls of the helpers
of ``templates/precision.j2``, written once for both dialects from the dialect's bit casts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InvalidName
from ..frontend.dtypes import compute, is_complex, is_integer, itemsize, real
from ..frontend.names import RESERVED
from . import ir
from .fragments import (
    MmaSync,
    Twin,
    Wmma,
    beside_swizzle,
    has_fragments,
    mma_mapped,
)
from .targets import specific_guard
from .transactions import TENSOR_MAP_STRUCT, Transactions, interleaved_roles
from .warpgroup import WARPGROUP_ARCH, Warpgroup, has_warpgroups

INDENT = "  "
LANES = "xyzw"  # the components of a vector of up to four, in both dialects


@dataclass(frozen=True)
class Storage:
    """How a dialect holds and converts a stored type (:data:`treduda.frontend.dtypes.STORED`):
    format strings taking the tensor, the element's offset and (to store) the float value.

    CUDA holds both types as ``unsigned short`` and converts with the instructions
    ``__half2float`` and ``__float2half_rn`` compile to (``templates/float16.cu.j2``) and
    with bfloat16's bit operations, rather than include ``cuda_fp16.h`` and ``cuda_bf16.h``:
    NVRTC (CuPy) finds neither without a CUDA toolkit, and CuPy may not ship the second."""

    c_type: str
    load: str
    store: str
    helpers: str = ""  # a template that defines the conversions
    # How a shared tile of the stored type is held and converted, where it differs (OpenCL
    # declares no half variables, only pointers to them)
    shared: Storage | None = None
    # A tensor element's bits, as a shared tile of the stored type holds them: what a copy
    # into such a tile reads, unconverted (by default the tensor's type is the tile's)
    bits: str = "{array}[{offset}]"
    # A vector store of floats into a tensor (ir.VectorStore): the whole of it, a format
    # taking the width, the first element's address and the values; or, where empty, words
    # of two converted values each (``pair``, taking the first and the second), stored as
    # the dialect's vector store of 32-bit words
    vector_store: str = ""
    pair: str = ""


@dataclass(frozen=True)
class Dialect:
    name: str
    kernel: str  # what precedes the kernel's name
    global_pointer: str  # qualifier of tensor arguments
    restrict: str
    shared: str  # qualifier of block-shared arrays
    barrier: str
    block_id: str  # format string taking the axis
    thread_id: str
    index_types: dict  # bits -> C integer type
    axes: tuple[str, ...]
    # The hints before a loop to unroll and to keep one; PoCL's clang warns when it cannot
    # unroll, so none there.
    unroll: str
    keep_loop: str
    function: str  # qualifiers of the helper functions kernels call
    vector: str  # a vector from its parts: format string taking its type and the values
    atomic_add: str  # adds a value to a global element, given its pointer, atomically
    # One aligned access of neighbouring elements (ir.VectorLoad, ir.VectorStore): format
    # strings taking the vector type, its width, the first element's address and the value.
    vector_load: str
    vector_store: str
    # Integer dtype -> (the unsigned C type its values are held in, the stem of its vector
    # types: uint4, ulonglong2 in CUDA; uint4, ulong2 in OpenCL)
    integer_types: dict
    # Close every loop containing a barrier with one more (harmless: such loops run the same
    # iterations in every thread). PoCL 3.0 otherwise runs some of them wrongly, optimised or
    # not: see treduda.run.opencl.build_options.
    barrier_closes_loops: bool = False
    # The stored types, and what templates/precision.j2 and bfloat16.j2 need: the 32- and
    # 16-bit unsigned types, the casts between a float's bits and its value, and an FMA that is
    # never split.
    stored: dict = field(default_factory=dict)
    uint: str = ""
    ushort: str = ""
    as_bits: str = ""
    as_float: str = ""
    fma: str = ""
    # Warp-collective statements: "wmma" (nvcuda::wmma) or "twin" (fragments in private
    # memory, see treduda.codegen.fragments); the lane's number among its warp's threads; what
    # a shared tile read by fragment loads adds to its declaration (WMMA's 256-bit alignment).
    fragments: str = "twin"
    lane: str = ""
    fragment_alignment: str = ""
    # Asynchronous copies (ir.AsyncCopy, CommitCopies, WaitCopies): format strings of a copy
    # (taking its bytes, the shared and global addresses and the bytes it reads), a commit and
    # a wait (taking the groups that may stay in flight). Empty: the dialect copies at once,
    # element by element, and commits and waits are nothing.
    copy_async: str = ""
    commit_copies: str = ""
    wait_copies: str = ""
    # What a shared tile adds to its declaration where asynchronous copies write it: the
    # alignment of the widest cp.async (16 bytes), which a tile of 4-byte elements lacks.
    copy_alignment: str = ""
    # The declaration of a block's dynamic shared memory, where the dialect has it and the
    # tiles do not fit the static limit (ir.dynamic_shared_bytes); each tile then points into
    # it at its offset. Empty: tiles are declared as arrays, whatever their size (OpenCL's
    # local memory has no such split).
    dynamic_shared: str = ""
    # The declaration of a pool of {bytes} of shared memory the tiles point into where one
    # reuses others' memory (ir.reuses_shared) and the tiles fit the static limit, and how a
    # tile points into a pool (dynamic or not): a {type} pointer {name} at byte {offset}.
    shared_pool: str = ""
    shared_pointer: str = ""
    shared_cast: str = ""  # qualifier of a pointer into a block-shared array, in a cast
    # A 32-bit word of two 16-bit halves, the low ones or (second) the high ones of the words
    # {first} (the new word's low half) and {second}: a paired transpose's stores
    # (ir.AsyncCopy.paired)
    halves: tuple[str, str] = ("({first} & 0xffffu) | ({second} << 16)",
                               "({first} >> 16) | ({second} & 0xffff0000u)")


CUDA = Dialect(
    name="cuda", kernel='extern "C" __global__ void __launch_bounds__({threads})',
    global_pointer="", restrict="__restrict__", shared="__shared__",
    barrier="__syncthreads();", block_id="blockIdx.{axis}", thread_id="threadIdx.{axis}",
    index_types={32: "int", 64: "long long"}, axes=("x", "y", "z"), unroll="#pragma unroll",
    keep_loop="#pragma unroll 1",
    function="__device__ __forceinline__", vector="make_{type}({values})",
    atomic_add="atomicAdd", vector_load="*(const {type} *){address}",
    vector_store="*({type} *){address} = {value};",
    integer_types={"int32": ("unsigned int", "uint"), "int64": ("unsigned long long", "ulonglong")},
    stored={"float16": Storage("unsigned short", "td_half_load({array}[{offset}])",
                               "{array}[{offset}] = td_half_store({value});", "float16.cu.j2",
                               pair="td_half_pair({first}, {second})"),
            "bfloat16": Storage("unsigned short", "td_bf16_load({array}[{offset}])",
                                "{array}[{offset}] = td_bf16_store({value});", "bfloat16.j2")},
    uint="unsigned int", ushort="unsigned short", as_bits="__float_as_uint",
    as_float="__uint_as_float", fma="__fmaf_rn", fragments="wmma",
    fragment_alignment=" __align__(32)",
    copy_async="td_copy_async{bytes}({target}, {source}, {read});",  # templates/copy_async.cu.j2
    commit_copies="td_copy_commit();", wait_copies="td_copy_wait<{pending}>();",
    copy_alignment=" __align__(16)",
    dynamic_shared="extern __shared__ __align__({alignment}) unsigned char td_shared[];",
    shared_pool="__shared__ __align__({alignment}) unsigned char td_shared[{bytes}];",
    shared_pointer="{type} *const {name} = reinterpret_cast<{type} *>(td_shared + {offset});",
    # bytes 0, 1 of the first and 0, 1 of the second word (4 and 5), or bytes 2, 3 of each
    # (CUDA C++ Programming Guide, "__byte_perm"): one PRMT
    halves=("__byte_perm({first}, {second}, 0x5410)", "__byte_perm({first}, {second}, 0x7632)"))

OPENCL = Dialect(
    name="opencl",
    kernel="__kernel __attribute__((reqd_work_group_size({bx}, {by}, {bz}))) void",
    global_pointer="__global ", restrict="restrict", shared="__local",
    barrier="barrier(CLK_LOCAL_MEM_FENCE);", block_id="get_group_id({axis})",
    thread_id="get_local_id({axis})", index_types={32: "int", 64: "long"}, axes=("0", "1", "2"),
    unroll="", keep_loop="", function="static inline", vector="({type})({values})",
    atomic_add="td_atomic_add", vector_load="vload{width}(0, {address})",
    vector_store="vstore{width}({value}, 0, {address});", barrier_closes_loops=True,
    integer_types={"int32": ("uint", "uint"), "int64": ("ulong", "ulong")},
    # vload_half and vstore_half_rte are core OpenCL (no cl_khr_fp16)
    stored={"float16": Storage("half", "vload_half({offset}, {array})",
                               "vstore_half_rte({value}, {offset}, {array});",
                               shared=Storage("ushort",
                                              "vload_half({offset}, (__local half *){array})",
                                              "vstore_half_rte({value}, {offset}, "
                                              "(__local half *){array});"),
                               bits="((__global const ushort *){array})[{offset}]",
                               vector_store="vstore_half{width}_rte((float{width})({values}), 0, "
                                            "{address});"),
            "bfloat16": Storage("ushort", "td_bf16_load({array}[{offset}])",
                                "{array}[{offset}] = td_bf16_store({value});", "bfloat16.j2")},
    uint="uint", ushort="ushort", as_bits="as_uint", as_float="as_float", fma="fma",
    lane="(int)(get_local_id(0) % 32)",
    shared_pool="__local uchar td_shared[{bytes}] __attribute__((aligned({alignment})));",
    shared_pointer="__local {type} *const {name} = (__local {type} *)(td_shared + {offset});",
    shared_cast="__local ")

C_TYPES = {"float32": "float", "float64": "double", "complex64": "float2", "complex128": "double2"}

# C operator precedence, higher binds tighter; calls and atoms bind tightest.
_PRECEDENCE = {
    ir.Op.MUL: 13, ir.Op.DIV: 13, ir.Op.MOD: 13,
    ir.Op.ADD: 12, ir.Op.SUB: 12,
    ir.Op.LT: 10, ir.Op.LE: 10, ir.Op.GE: 10, ir.Op.GT: 10,
    ir.Op.EQ: 9, ir.Op.AND: 5, ir.Op.OR: 4,
}
_CALLS = {ir.Op.FLOOR_DIV: "td_floord", ir.Op.MIN: "td_min", ir.Op.MAX: "td_max"}
_COMPLEX_CALLS = {ir.Op.ADD: "add", ir.Op.SUB: "sub", ir.Op.MUL: "mul"}  # td_<type>_<name>
_UPDATES = {"+=": ir.Op.ADD, "-=": ir.Op.SUB}
_ATOM, _UNARY, _SELECT = 16, 14, 3


def _thread_clamp(e: ir.Binary) -> bool:
    """Whether ``e`` clamps a thread id (or a clamp of one) to a constant."""
    return isinstance(e.right, ir.Int) and (
        isinstance(e.left, ir.Index) and e.left.builtin is ir.Builtin.THREAD_ID
        or isinstance(e.left, ir.Binary) and e.left.op in (ir.Op.MIN, ir.Op.MAX)
        and _thread_clamp(e.left))


class Printer:
    """Prints one kernel's IR in one dialect."""

    def __init__(self, kernel: ir.KernelIR, dialect: Dialect, block: tuple[int, int, int]):
        self.kernel = kernel
        self.dialect = dialect
        self.block = block
        self.integer = is_integer(kernel.dtype)
        self.value_type, self.vector_stem = (  # what registers hold
            dialect.integer_types[kernel.dtype] if self.integer
            else (C_TYPES[compute(kernel.dtype)],) * 2)
        self.index_type = dialect.index_types[kernel.index_bits]
        self.complex = is_complex(kernel.dtype)
        self.storage = dialect.stored.get(kernel.dtype)  # None: tensors hold value_type
        self.tensors = {p.name for p in kernel.params
                        if p.kind in (ir.ParamKind.OUTPUT, ir.ParamKind.INPUT)}
        # arrays holding the stored type: the tensors, and shared tiles fragments load from
        self.stored_shared = {v.name for v in kernel.locals if v.stored}
        self.swizzles = {v.name: (v.swizzle, v.swizzle_bits) for v in kernel.locals
                         if v.swizzle}
        self.fragments = (Twin(kernel, self.expr, self.value_type, dialect.lane)
                          if dialect.fragments != "wmma"
                          else MmaSync(kernel, self.expr) if mma_mapped(kernel)
                          else Wmma(kernel, self.expr))
        thread = dialect.thread_id.format(axis=dialect.axes[0])
        self.warpgroup = Warpgroup(kernel, self.expr, dialect.fragments == "wmma",
                                   self.value_type, itemsize(kernel.dtype),
                                   f"(int)({thread} % {ir.WARPGROUP})")
        self.transactions = Transactions(kernel, self.expr, dialect.fragments == "wmma",
                                         dialect.barrier, self.stmt)
        self.copies = any(isinstance(c, ir.AsyncCopy) for c in ir.nested(kernel.body))
        self.swizzle_atoms = ir.shared_alignment(kernel) == ir.SWIZZLE_ALIGNMENT
        # tiles read in vectors (ir.VectorLoad): 16-byte aligned, as cp.async's widest copies
        shared = {v.name for v in kernel.locals if v.space is ir.Space.SHARED}
        self.vector_tiles = any(isinstance(c, ir.VectorLoad) and c.first.array in shared
                                for c in ir.nested(kernel.body))

    def helpers(self) -> dict[str, str]:
        """What the helper templates need: the template of the stored type's conversions (empty
        where the kernel computes in its dtype), whether the kernel rounds (precision.j2) and
        the dialect's spellings they use, and for a complex kernel what ``complex.j2`` needs
        (the type is empty for a real kernel)."""
        d = self.dialect
        found = {"storage_helpers": self.storage.helpers if self.storage else "",
                 "rounding": ir.has_call(self.kernel.body), "qualifier": d.function,
                 "tensor_cores": has_fragments(self.kernel),
                 "fragment_loads": (self.fragments.shared_loads()
                                    if isinstance(self.fragments, Wmma) else None),
                 "mma_sync": (self.fragments.helpers()
                              if isinstance(self.fragments, MmaSync) else None),
                 "async_copies": bool(d.copy_async) and self.copies,
                 "warpgroup": (specific_guard(WARPGROUP_ARCH)
                               if d.fragments == "wmma" and has_warpgroups(self.kernel) else ""),
                 "tensor_map": (TENSOR_MAP_STRUCT if d.fragments == "wmma"
                                and self.kernel.tensor_maps else ""),
                 "uint": d.uint, "ushort": d.ushort, "as_bits": d.as_bits,
                 "as_float": d.as_float, "fma": d.fma}
        if not self.complex:
            return {**found, "complex_type": ""}
        part = C_TYPES[real(self.kernel.dtype)]
        return {**found, "complex_type": self.value_type, "part_type": part,
                "vector": d.vector.format(type=self.value_type, values="re, im")}

    def signature(self) -> str:
        d = self.dialect
        bx, by, bz = self.block
        threads = bx * by * bz
        # setmaxnreg is honoured only under a register cap at entry, which one block per
        # multiprocessor sets (HOPPER.md: else ptxas warns C7508 and ignores it)
        bounds = f"{threads}, 1" if ir.has_register_roles(self.kernel) else threads
        head = d.kernel.format(threads=bounds, bx=bx, by=by, bz=bz)
        return f"{head} {self.kernel.name}({', '.join(self.arguments())})"

    def arguments(self, host: bool = False) -> list[str]:
        """The kernel's parameters, or (``host``) the host glue's that launches it."""
        d, args = self.dialect, []
        for p in self.kernel.params:
            if p.kind in (ir.ParamKind.OUTPUT, ir.ParamKind.INPUT, ir.ParamKind.WORKSPACE):
                const = "const " if p.kind == ir.ParamKind.INPUT else ""
                stored = (self.storage.c_type if self.storage and p.name in self.tensors
                          else self.value_type)  # a workspace holds computed values
                args.append(f"{d.global_pointer}{const}{stored} *{d.restrict} {p.name}")
            elif p.kind == ir.ParamKind.SCALAR:
                args.append(f"const {self.value_type} {p.name}")
            else:
                args.append(f"const {self.index_type} {p.name}")
        return args + self.transactions.arguments(host)

    def function(self) -> str:
        lines = [self.signature() + " {"]
        dynamic = bool(self.dialect.dynamic_shared) and ir.dynamic_shared_bytes(self.kernel) > 0
        pooled = dynamic or ir.reuses_shared(self.kernel)
        if pooled:
            offsets, total = ir.shared_offsets(self.kernel)
            pool = (self.dialect.dynamic_shared if dynamic else self.dialect.shared_pool).format(
                bytes=total, alignment=ir.shared_alignment(self.kernel))
            lines.append(f"{INDENT}{pool}")
        for local in self.kernel.locals:
            if local.space is ir.Space.GLOBAL:
                continue  # a workspace: an argument (ir.ParamKind.WORKSPACE)
            if local.space is ir.Space.MBARRIER:
                lines += [INDENT + line for line in self.transactions.declare(
                    local, offsets[local.name] if pooled else None)]
                continue
            if local.space is ir.Space.FRAGMENT:
                lines.append(f"{INDENT}{self.fragments.declare(local)}")
                continue
            held = self.storage_of(local.name).c_type if local.stored else self.value_type
            if pooled and local.space == ir.Space.SHARED:
                lines.append(INDENT + self.dialect.shared_pointer.format(
                    type=held, name=local.name, offset=offsets[local.name]))
                continue
            qualifier = ""
            if local.space == ir.Space.SHARED:
                aligned = (self.dialect.fragment_alignment if has_fragments(self.kernel)
                           else self.dialect.copy_alignment
                           if self.copies or self.vector_tiles else "")
                if self.dialect.copy_alignment and self.swizzle_atoms:  # wgmma's, the copy
                    aligned = f" __align__({ir.SWIZZLE_ALIGNMENT})"  # engine's swizzle atoms
                qualifier = f"{self.dialect.shared}{aligned} "
            extent = f"[{local.size}]" if local.shape else ""
            lines.append(f"{INDENT}{qualifier}{held} {local.name}{extent};")
        lines += self.stmt(self.kernel.body, 1)
        lines.append("}")
        return "\n".join(lines)

    def stored_vector(self, s: ir.VectorStore) -> str:
        """A vector store of floats into a tensor of the stored type: converted and packed
        in words of two (:attr:`Storage.pair`), or by the dialect's own conversion."""
        storage = self.storage_of(s.first.array)
        values = [self.expr(v) for v in s.values]
        address = f"&{s.first.array}[{self.offset(s.first)}]"
        if not storage.pair:
            return storage.vector_store.format(width=len(values), values=", ".join(values),
                                               address=address)
        words = [storage.pair.format(first=first, second=second)
                 for first, second in zip(values[::2], values[1::2], strict=True)]
        kind = self.dialect.uint if len(words) == 1 else f"uint{len(words)}"
        value = words[0] if len(words) == 1 else self.dialect.vector.format(
            type=kind, values=", ".join(words))
        return self.dialect.vector_store.format(type=kind, width=len(words), address=address,
                                                value=value)

    def stmt(self, s: ir.Stmt, depth: int) -> list[str]:
        pad = INDENT * depth
        if isinstance(s, ir.Block):
            return [line for child in s.body for line in self.stmt(child, depth)]
        if isinstance(s, ir.Assign) and s.atomic:
            return self.atomic(s, pad)
        if isinstance(s, ir.Assign) and self._copied_bits(s):
            tensor = self.storage.bits.format(array=s.value.array, offset=self.offset(s.value))
            return [f"{pad}{s.target.array}[{self.offset(s.target)}] = {tensor};"]
        if isinstance(s, ir.Assign) and self._stored(s.target):
            value = s.value if s.op == "=" else ir.Binary(_UPDATES[s.op], s.target, s.value)
            return [pad + self.storage_of(s.target.array).store.format(array=s.target.array,
                                                    offset=self.offset(s.target),
                                                    value=self.expr(value))]
        if isinstance(s, ir.Assign):
            if not self.complex:
                return [f"{pad}{self.expr(s.target)} {s.op} {self.expr(s.value)};"]
            value = s.value if s.op == "=" else ir.Binary(_UPDATES[s.op], s.target, s.value)
            return [f"{pad}{self.expr(s.target)} = {self.complex_value(value)};"]
        if isinstance(s, ir.Barrier):
            if s.threads is not None and self.transactions.cuda:  # the twin's are whole
                return [f'{pad}asm volatile("bar.sync 1, %0;" :: "n"({s.threads}) : "memory");']
            return [f"{pad}{self.dialect.barrier}"]
        if isinstance(s, ir.WARP_STATEMENTS):
            return self.fragments.stmt(s, pad)
        if isinstance(s, (*ir.WARPGROUP_STATEMENTS, ir.ProxyFence)):
            return self.warpgroup.stmt(s, pad)
        if isinstance(s, ir.MBARRIER_STATEMENTS):
            return self.transactions.stmt(s, depth, pad)
        if isinstance(s, ir.AsyncCopy):
            return self.async_copy(s, depth)
        if isinstance(s, ir.CommitCopies):
            return [pad + self.dialect.commit_copies] if self.dialect.commit_copies else []
        if isinstance(s, ir.WaitCopies):
            wait = self.dialect.wait_copies
            return [pad + wait.format(pending=s.pending)] if wait else []
        if isinstance(s, ir.VectorLoad):
            vector = f"{self.vector_stem}{s.width}"
            load = self.dialect.vector_load.format(type=vector, width=s.width,
                                                   address=f"&{self.expr(s.first)}")
            return [f"{pad}const {vector} {s.vector} = {load};"]
        if isinstance(s, ir.VectorStore) and self._stored(s.first):
            return [pad + self.stored_vector(s)]
        if isinstance(s, ir.VectorStore):
            width = len(s.values)
            vector = f"{self.vector_stem}{width}"
            value = self.dialect.vector.format(type=vector, values=", ".join(map(self.expr,
                                                                                s.values)))
            return [pad + self.dialect.vector_store.format(
                type=vector, width=width, address=f"&{self.expr(s.first)}", value=value)]
        if isinstance(s, ir.For):
            head = (f"for ({self.index_type} {s.iterator} = {self.expr(s.start)}; "
                    f"{self.expr(s.condition)}; {s.iterator} += {self.expr(s.step)})")
            hint = {ir.Unroll.FULL: self.dialect.unroll,
                    ir.Unroll.NEVER: self.dialect.keep_loop}.get(s.unroll)
            pragma = [f"{pad}{hint}"] if hint else []
            body = self.stmt(s.body, depth + 1)
            if self.dialect.barrier_closes_loops and ir.has_barrier(s.body):
                body.append(f"{pad}{INDENT}{self.dialect.barrier}")
            return [*pragma, f"{pad}{head} {{", *body, f"{pad}}}"]
        if isinstance(s, ir.If):
            if not self.transactions.cuda and ir.is_role_split(s):
                return self.stmt(interleaved_roles(s), depth)
            then = self.stmt(s.then, depth + 1)
            if not then and s.otherwise is None:
                return []  # guards only an anchor statement, which prints nothing
            lines = [f"{pad}if ({self.expr(s.condition)}) {{", *then]
            if s.otherwise is not None:
                lines += [f"{pad}}} else {{", *self.stmt(s.otherwise, depth + 1)]
            return [*lines, f"{pad}}}"]
        raise TypeError(f"cannot print statement {s!r}")

    def async_copy(self, s: ir.AsyncCopy, depth: int) -> list[str]:
        """One cp.async; where the dialect has none, the assignments of the elements it
        copies (or zeros), which end where it would once waited for; a strided one
        (:meth:`strided_copy`) in both dialects."""
        if s.stride != 1:
            return self.strided_copy(s, depth)
        if not self.dialect.copy_async:
            pairs = zip(ir.lanes(s.target, s.width), ir.lanes(s.source, s.width), strict=True)
            return [line for target, source in pairs for line in self.stmt(ir.Assign(
                target, "=", ir.Float(0.0) if s.zero else source if s.reads is None
                else ir.Select(s.reads, source, ir.Float(0.0))), depth)]
        size = s.width * itemsize(self.kernel.dtype)  # the stored type's, in shared and global
        read = (0 if s.zero else size if s.reads is None
                else f"{self._wrap(s.reads, _SELECT + 1)} ? {size} : 0")
        # a zero-fill reads nothing: the tensor's first element spares its address's arithmetic
        source = s.source.array if s.zero else self.address(s.source)
        return [INDENT * depth + self.dialect.copy_async.format(
            bytes=size, target=self.address(s.target), source=source, read=read)]

    def strided_copy(self, s: ir.AsyncCopy, depth: int) -> list[str]:
        """A copy whose elements land :attr:`ir.AsyncCopy.stride` apart: its 8 or 16 bytes
        read as 32-bit words in one vector load (``LDG.64``/``LDG.128``, or ``LDS`` from a
        staged shared tile; zeros where it does not read), each 16-bit element stored from
        its half of a word, the first in the low half (both targets are little-endian); with
        a paired run, each with its pair's element in one 32-bit word (CUDA's
        ``__byte_perm``, one ``PRMT``: the masks and shifts took nvcc two instructions)."""
        d, pad = self.dialect, INDENT * depth
        words = s.width * itemsize(self.kernel.dtype) // 4
        if itemsize(self.kernel.dtype) != 2 or words not in (2, 4):
            raise TypeError(f"a strided copy moves 8 or 16 bytes of 16-bit values, not {s!r}")
        vector = f"{d.integer_types['int32'][1]}{words}"
        zeros = d.vector.format(type=vector, values=", ".join(["0u"] * words))
        space = d.global_pointer if s.source.array in self.tensors else d.shared_cast
        load = d.vector_load.format(type=vector, width=words, address=(
            f"({space}const {d.uint} *){self.address(s.source)}"))
        value = (zeros if s.zero else load if s.reads is None
                 else f"{self._wrap(s.reads, _SELECT + 1)} ? {load} : {zeros}")
        lines = [f"{pad}{{", f"{pad}{INDENT}const {vector} td_run = {value};"]
        if s.paired is not None:  # pairs of 16-bit halves, the source's low, in 32-bit stores
            lines.append(f"{pad}{INDENT}const {vector} td_pair = " + d.vector_load.format(
                type=vector, width=words, address=(
                    f"({space}const {d.uint} *){self.address(s.paired)}")) + ";")
            for n, target in enumerate(ir.lanes(s.target, s.width, s.stride)):
                word = LANES[n // 2]
                pair = d.halves[n % 2].format(first=f"td_run.{word}",
                                              second=f"td_pair.{word}")
                word_address = f"({d.shared_cast}{d.uint} *){self.address(target)}"
                lines.append(f"{pad}{INDENT}*{word_address} = {pair};")
            return [*lines, f"{pad}}}"]
        for n, target in enumerate(ir.lanes(s.target, s.width, s.stride)):
            half = f"td_run.{LANES[n // 2]}" + (" >> 16" if n % 2 else "")
            lines.append(f"{pad}{INDENT}{target.array}[{self.offset(target)}] = "
                         f"({d.ushort})({half});")
        return [*lines, f"{pad}}}"]

    def address(self, e: ir.Load) -> str:
        """The address of an element as it is held (a stored type's, without conversion)."""
        return f"&{e.array}[{self.offset(e)}]"

    def offset(self, e: ir.Load) -> str:
        """Where ``e.array`` holds the element ``e`` names: its offset, or where a swizzled
        tile places it (:attr:`ir.Local.swizzle`)."""
        if e.array not in self.swizzles:
            return self.expr(e.offset)
        shift, bits = self.swizzles[e.array]
        high, low = beside_swizzle(e.offset, shift, bits)
        swizzled = (f"td_swizzle({self.expr(low)}, {shift}, "
                    f"{ir.swizzle_chunk(itemsize(self.kernel.dtype))}, {(1 << bits) - 1})")
        return swizzled if high == ir.Int(0) else f"{self.expr(high)} + {swizzled}"

    def atomic(self, s: ir.Assign, pad: str) -> list[str]:
        """An atomic ``+=`` or ``-=`` of a global element: a real value in one atomic add, a
        complex one in two, one per part (the parts of a split reduction only add up)."""
        add = self.dialect.atomic_add
        target = f"&{self.expr(s.target)}"
        value = ir.Neg(s.value) if s.op == "-=" else s.value
        if not self.complex:
            return [f"{pad}{add}({target}, {self.expr(value)});"]
        part = f"{self.dialect.global_pointer}{C_TYPES[real(self.kernel.dtype)]} *"
        return [f"{pad}{{",
                f"{pad}{INDENT}const {self.value_type} td_part = {self.complex_value(value)};",
                f"{pad}{INDENT}{add}(({part}){target}, td_part.x);",
                f"{pad}{INDENT}{add}(({part}){target} + 1, td_part.y);",
                f"{pad}}}"]

    def atomics(self) -> str:
        """The real or integer type whose atomic add ``templates/atomic.j2`` defines for
        OpenCL (empty where the kernel has no atomic update or the dialect has the function
        built in)."""
        if self.dialect.atomic_add != "td_atomic_add" or not ir.has_atomic(self.kernel.body):
            return ""
        return self.value_type if self.integer else C_TYPES[real(self.kernel.dtype)]

    def expr(self, e: ir.Expr) -> str:
        return self._expr(e)[0]

    def _expr(self, e: ir.Expr) -> tuple[str, int]:
        """The C text of ``e`` and the precedence of its outermost operator."""
        if isinstance(e, ir.Int):
            return (str(e.value), _ATOM) if e.value >= 0 else (f"({e.value})", _ATOM)
        if isinstance(e, ir.Float):
            return self.literal(e.value), _ATOM
        if isinstance(e, ir.Var):
            return e.name, _ATOM
        if isinstance(e, ir.Index):
            spelling = (self.dialect.block_id if e.builtin == ir.Builtin.BLOCK_ID
                        else self.dialect.thread_id)
            return f"(({self.index_type}){spelling.format(axis=self.dialect.axes[e.axis])})", _ATOM
        if isinstance(e, ir.Load) and self._stored(e):
            return self.storage_of(e.array).load.format(array=e.array,
                                                        offset=self.offset(e)), _ATOM
        if isinstance(e, ir.Load):
            return f"{e.array}[{self.offset(e)}]", _ATOM
        if isinstance(e, ir.Call):
            return f"{e.function.value}({', '.join(map(self.expr, e.args))})", _ATOM
        if isinstance(e, ir.Lane):
            return f"{e.vector}.{LANES[e.lane]}", _ATOM
        if isinstance(e, ir.Neg):
            return f"-{self._wrap(e.operand, _UNARY + 1)}", _UNARY
        if isinstance(e, ir.Select):
            return (f"{self._wrap(e.condition, _SELECT + 1)} ? {self._wrap(e.if_true, _SELECT)}"
                    f" : {self._wrap(e.if_false, _SELECT)}", _SELECT)
        if isinstance(e, ir.Binary):
            if e.op in (ir.Op.MIN, ir.Op.MAX) and _thread_clamp(e):
                # both dialects' integer min and max: nvcc keeps the range of a clamped thread
                # id through them and merges the loads it offsets into vectors, not through
                # the helper's conditional (tccg_04's B tile: 7 LDS.128 and 34 LDS with it,
                # 14 LDS.128 with min(); CUDA 13, sm_90; :mod:`.idle`)
                bound = f"({self.index_type}){self.expr(e.right)}"
                return f"{e.op.value}({self.expr(e.left)}, {bound})", _ATOM
            if e.op in _CALLS:
                return f"{_CALLS[e.op]}({self.expr(e.left)}, {self.expr(e.right)})", _ATOM
            p = _PRECEDENCE[e.op]
            return f"{self._wrap(e.left, p)} {e.op.value} {self._wrap(e.right, p + 1)}", p
        raise TypeError(f"cannot print expression {e!r}")

    def complex_value(self, e: ir.Expr) -> str:
        """The C text of a value of a complex kernel: arithmetic as helper calls, a product
        that feeds a sum fused with it; offsets and conditions stay integer expressions."""
        name = f"td_{self.value_type}"
        if isinstance(e, ir.Float):
            return f"{name}({self.literal(e.value)}, {self.literal(0.0)})"
        if isinstance(e, ir.Binary) and e.op is ir.Op.ADD:
            for product, other in ((e.right, e.left), (e.left, e.right)):
                if isinstance(product, ir.Binary) and product.op is ir.Op.MUL:
                    return (f"{name}_fma({self.complex_value(product.left)}, "
                            f"{self.complex_value(product.right)}, {self.complex_value(other)})")
        if isinstance(e, ir.Binary) and e.op in _COMPLEX_CALLS:
            return (f"{name}_{_COMPLEX_CALLS[e.op]}({self.complex_value(e.left)}, "
                    f"{self.complex_value(e.right)})")
        if isinstance(e, ir.Neg):
            return f"{name}_neg({self.complex_value(e.operand)})"
        if isinstance(e, ir.Select):
            return (f"({self._wrap(e.condition, _SELECT + 1)} ? {self.complex_value(e.if_true)}"
                    f" : {self.complex_value(e.if_false)})")
        if isinstance(e, (ir.Var, ir.Load)):
            return self.expr(e)
        raise TypeError(f"cannot print {e!r} as a complex value")

    def _stored(self, e: ir.Expr) -> bool:
        """Whether ``e`` is an element of a tensor stored in a type the kernel converts."""
        return (self.storage is not None and isinstance(e, ir.Load)
                and (e.array in self.tensors or e.array in self.stored_shared))

    def _copied_bits(self, s: ir.Assign) -> bool:
        """Whether ``s`` copies a tensor element of a stored type into a shared tile of it,
        which moves its 16 bits as they are, not through float32 and back."""
        return (s.op == "=" and self._stored(s.target) and s.target.array in self.stored_shared
                and self._stored(s.value) and s.value.array in self.tensors)

    def storage_of(self, array: str) -> Storage:
        """How ``array`` (a tensor or a shared tile of the stored type) is held."""
        if array in self.stored_shared and self.storage.shared is not None:
            return self.storage.shared
        return self.storage

    def _wrap(self, e: ir.Expr, minimum: int) -> str:
        text, precedence = self._expr(e)
        return text if precedence >= minimum else f"({text})"

    def literal(self, value: float) -> str:
        if self.integer:  # integral by plan()'s check; C converts it modulo 2**bits
            return str(int(value)) if value >= 0 else f"({int(value)})"
        text = repr(float(value))
        return f"{text}f" if real(compute(self.kernel.dtype)) == "float32" else text


def check_identifiers(kernel: ir.KernelIR) -> None:
    """Last line of defence: every name printed into C is an identifier and not reserved."""
    names = [kernel.name, *(p.name for p in kernel.params),
             *(v.name for v in kernel.locals if v.space is not ir.Space.GLOBAL)]  # params too
    seen: set[str] = set()
    for name in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or (
                name in RESERVED and name != kernel.name):
            raise InvalidName(f"'{name}' cannot be used as a name in the generated C", name, 0,
                              len(name))
        if name in seen:
            raise InvalidName(f"'{name}' names two different things in the generated kernel; "
                              "rename the tensor or scalar", name, 0, len(name))
        seen.add(name)

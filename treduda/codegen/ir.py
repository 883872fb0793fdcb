"""The kernel IR: the small language between isl's AST and the C printers.

The isl AST is converted into these frozen dataclasses once
(:mod:`treduda.polyhedral.ast_build`); the CUDA and OpenCL printers
(:mod:`treduda.codegen.printer`) walk them and differ only in a dialect table.
Expressions are integers for index arithmetic and scalars of the kernel's dtype for values.
"""

from __future__ import annotations

import enum
import functools
import operator
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from ..errors import TredudaError
from ..frontend.dtypes import compute, itemsize

# The widest load or store a thread issues (LDG.128/LDS.128/STG.128; CUDA C++ Programming Guide,
# "Device Memory Accesses": 1, 2, 4, 8 or 16 bytes per access, aligned to its size). Tensors
# start on such a boundary (launches make sure), so a VectorLoad or VectorStore is aligned.
VECTOR_BYTES = 16


class Op(enum.Enum):
    """Binary operators; the value is the C spelling where one exists."""

    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"  # exact or truncating integer division on non-negative operands, or a float division
    MOD = "%"  # remainder of non-negative operands
    FLOOR_DIV = "floord"  # rounds towards minus infinity (isl's fdiv_q)
    MIN = "min"
    MAX = "max"
    LT = "<"
    LE = "<="
    EQ = "=="
    GE = ">="
    GT = ">"
    AND = "&&"
    OR = "||"


class Builtin(enum.Enum):
    """Index builtins a dialect spells its own way (``blockIdx.x`` / ``get_group_id(0)``)."""

    BLOCK_ID = "block_id"
    THREAD_ID = "thread_id"


@dataclass(frozen=True)
class Int:
    value: int


@dataclass(frozen=True)
class Float:
    """A floating-point literal of the kernel's dtype."""

    value: float


@dataclass(frozen=True)
class Var:
    """A named value: a loop iterator, a size, a scalar argument or a register."""

    name: str


@dataclass(frozen=True)
class Index:
    """The block or thread coordinate along ``axis`` (0 = x, 1 = y, 2 = z)."""

    builtin: Builtin
    axis: int


@dataclass(frozen=True)
class Binary:
    op: Op
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Neg:
    operand: Expr


@dataclass(frozen=True)
class Select:
    """``condition ? if_true : if_false``."""

    condition: Expr
    if_true: Expr
    if_false: Expr


@dataclass(frozen=True)
class Element:
    """Element ``array[indices]`` of a multi-dimensional tensor, before linearisation."""

    array: str
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Load:
    """Element ``array[offset]`` of a flat array (global, shared or register)."""

    array: str
    offset: Expr


@dataclass(frozen=True)
class Lane:
    """Component ``lane`` of the vector register ``vector`` that a :class:`VectorLoad`
    filled: the element ``lane`` places after the one the load starts at."""

    vector: str
    lane: int


class Function(enum.Enum):
    """Value functions of float32 operands that both dialects define alike (the helpers of
    ``templates/precision.j2``), so PoCL computes the bits a GPU computes."""

    TF32 = "td_tf32"  # (x): x rounded to TF32, to nearest with ties away from zero
    TF32X3 = "td_tf32x3"  # (a, b): lo(a)*hi(b) + hi(a)*lo(b) + hi(a)*hi(b), in that order
    TF32_RESIDUAL = "td_tf32_lo"  # (x): x - tf32(x) rounded to TF32: 3xTF32's low part


@dataclass(frozen=True)
class Call:
    """``function(args)``: a value of the kernel's compute type."""

    function: Function
    args: tuple[Expr, ...]


Expr = Int | Float | Var | Index | Binary | Neg | Select | Element | Load | Lane | Call


@dataclass(frozen=True)
class Assign:
    """``target op value`` with op one of ``=``, ``+=``, ``-=``; ``atomic`` updates of global
    memory may come from several blocks at once (the parts of a split reduction)."""

    target: Expr
    op: str
    value: Expr
    atomic: bool = False


class Unroll(enum.Enum):
    """What a loop asks of the C compiler."""

    COMPILER = "compiler"  # nothing: the compiler decides
    FULL = "full"  # unroll it (#pragma unroll)
    NEVER = "never"  # keep it a loop (#pragma unroll 1)


@dataclass(frozen=True)
class For:
    """``for (iterator = start; condition; iterator += step) body``."""

    iterator: str
    start: Expr
    condition: Expr
    step: Expr
    body: Stmt
    unroll: Unroll = Unroll.COMPILER


@dataclass(frozen=True)
class If:
    condition: Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True)
class Block:
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Barrier:
    """All threads of a block wait here until every one has arrived (shared memory is stable);
    with ``threads``, only that many, the block's first, on a named barrier of their own
    (PTX ISA, "Parallel Synchronization and Communication Instructions: bar.sync": ``bar.sync
    1, threads``, a multiple of the warp size; barrier 0 is ``__syncthreads``'s): a
    warp-specialised kernel's consumers, while its producer warpgroup runs on."""

    threads: int | None = None


@dataclass(frozen=True)
class VectorLoad:
    """``vector = first.array[first.offset + 0 .. first.offset + width - 1]`` in one access,
    read by :class:`Lane` expressions. ``first.offset`` is a multiple of ``width`` and the tensor
    starts on a VECTOR_BYTES boundary, so the access is aligned (see
    :mod:`treduda.codegen.vectorize`)."""

    vector: str
    first: Load
    width: int


@dataclass(frozen=True)
class VectorStore:
    """``first.array[first.offset + n] = values[n]`` for every ``n``, in one aligned access
    (as for :class:`VectorLoad`)."""

    first: Load
    values: tuple[Expr, ...]


# Warp-collective statements (tensor cores). All 32 threads of a warp execute each of them
# together with the same operands; a fragment is a tile of values spread over the warp's
# registers in a layout only the hardware knows (:class:`Fragment`), so nothing but these
# statements touches one. Operands are ``Load``s: a fragment by its number in its Local, a
# shared tile by its first (top-left) element; ``ld`` is the distance between consecutive rows
# (row-major) or columns (column-major) of the tile in elements.


@dataclass(frozen=True)
class FillFragment:
    """Every element of ``fragment`` becomes ``value``."""

    fragment: Load
    value: Float


@dataclass(frozen=True)
class LoadFragment:
    """``fragment`` = the tile of shared memory at ``first`` (the fragment's rows x columns,
    laid out as its Local says, ``ld`` apart), each element passed through ``rounding``
    (None: as it is; :attr:`Function.TF32`, :attr:`Function.TF32_RESIDUAL`)."""

    fragment: Load
    first: Load
    ld: int
    rounding: Function | None = None
    # A B fragment's leading columns the load fills (None: all): the columns of the MMAs
    # that read it (:attr:`MultiplyAccumulate.columns`)
    columns: int | None = None


@dataclass(frozen=True)
class MultiplyAccumulate:
    """``accumulator += a @ b``: the (m x k) fragment ``a`` times the (k x n) fragment ``b``,
    added in the accumulator's type (float32, or float64 for float64 inputs)."""

    accumulator: Load
    a: Load
    b: Load
    # The accumulator's leading columns the product computes (None: all): the others lie
    # wholly outside the output, and stay as they are (mma.sync computes a 16x16 product
    # 8 columns at a time, so 8 of 16 drop one of its two instructions)
    columns: int | None = None


@dataclass(frozen=True)
class AddFragment:
    """``accumulator += addend``, element by element, two accumulators of one kind (3xTF32
    sums its small products apart and adds them once, at the end)."""

    accumulator: Load
    addend: Load


@dataclass(frozen=True)
class StoreFragment:
    """The tile of shared memory at ``first`` (``ld`` apart; row-major, or column-major where
    not ``row_major``) = the accumulator ``fragment``."""

    first: Load
    fragment: Load
    ld: int
    row_major: bool = True


WARP_STATEMENTS = (FillFragment, LoadFragment, MultiplyAccumulate, AddFragment, StoreFragment)

# Asynchronous copies from global to shared memory, each statement a thread's own (PTX ISA,
# "Data Movement and Conversion Instructions": cp.async, cp.async.commit_group,
# cp.async.wait_group; compute capability 8.0). A copy a thread starts completes in the
# background: its data are in shared memory once a wait of that thread that covers it has
# returned, and visible to the block's other threads after a barrier that follows that wait.
# Until the wait no thread may read or write its destination (the emulator reports it). Where
# the hardware has no cp.async the CUDA printer copies at once, as OpenCL does, and the
# commits and waits do nothing: the same values, earlier.


@dataclass(frozen=True)
class AsyncCopy:
    """Starts ``target.array[target.offset + n] = source.array[source.offset + n]`` for
    ``n < width``, one cp.async of ``width`` elements (4, 8 or 16 bytes; both addresses aligned
    to that size, which the strategy that emits it makes sure of). With ``zero`` it reads
    nothing and the ``width`` elements become zero, as cp.async does with a src-size of 0:
    ``source`` is then only an address, which the instruction needs and never reads (it may
    lie outside the tensor). With ``reads`` (a condition of the thread's indices) it reads
    only where that holds and zero-fills elsewhere: one instruction where a copy and a
    zero-fill under complementary guards took two and the branches between them. With a
    ``stride`` other than 1 the elements land ``stride`` apart in the target (the transposing
    copy of a tile whose rows run along another index than the tensor's fastest: a K box of
    :mod:`treduda.strategies.tensorcore_kernel`), which no cp.async can do: the source is read
    in one aligned vector load into registers and its elements are stored one by one, at once,
    as where the hardware has no cp.async. Its source may then be a shared tile that a cp.async
    filled in the tensor's own order (a warpgroup kernel's staged K box,
    :mod:`treduda.strategies.warpgroup_kernel`): a transpose from shared to shared memory.
    With a ``paired`` run as well (such a transpose of 16-bit values only) the thread reads
    ``width`` elements from there too, in a second vector load, and stores element ``n`` of
    both runs side by side, ``source``'s at ``target + n stride`` and ``paired``'s at the
    next element, in one 32-bit store: half the stores of 16-bit values one by one."""

    target: Load
    source: Load
    width: int = 1
    zero: bool = False
    reads: Expr | None = None
    stride: int = 1
    paired: Load | None = None


@dataclass(frozen=True)
class CommitCopies:
    """The asynchronous copies this thread started since its last commit become one group
    (cp.async.commit_group), which a :class:`WaitCopies` waits for."""


@dataclass(frozen=True)
class WaitCopies:
    """This thread waits until at most ``pending`` of its committed groups, the most recent
    ones, are still in flight (cp.async.wait_group): every earlier group's copies are then in
    shared memory."""

    pending: int = 0


# Hopper's warpgroup tensor cores (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-
# Accumulate Instructions", sm_90a). A warpgroup is four consecutive warps, the first of a
# number divisible by four; its 128 threads execute each warpgroup statement together. An
# asynchronous MMA reads its operands from shared memory through matrix descriptors and adds
# into registers of the warpgroup's threads; it completes in the background, so its operand
# tiles may not be written and its accumulators not be touched until a wait covers its group.
WARPGROUP = 128  # threads: four warps


@dataclass(frozen=True)
class CoreMatrices:
    """How a warpgroup MMA finds an operand's elements in shared memory: a canonical layout
    of PTX ISA, "Shared Memory Matrix Layout" / "Matrix Descriptor Format" (the descriptor's
    leading- and stride-dimension byte offsets and its swizzle mode). The operand, ``rows`` of
    M or N by k of K, is made of blocks of 8 lines of ``w`` elements, contiguous: without
    swizzle, core matrices of 16-byte lines (``w = e = 16 / s`` elements of ``s`` bytes); with
    the 128-, 64- or 32-byte swizzle (``swizzle``, a line's bytes), atoms of 8 such lines
    (``w = swizzle / s``), whose 16-byte chunks the tile's :attr:`Local.swizzle` places (bits
    7 on of the address, 3, 2 or 1 of them, XOR'd into the chunk's number, as the hardware
    reads them from an atom aligned to its size). In the K-major
    layout a line holds consecutive K of one row, ``stride`` bytes apart along M or N and
    ``leading`` bytes apart along K; in the MN-major one (``k_major`` False, 16-bit operands
    only, wgmma's transpose) consecutive rows at one K, ``stride`` bytes apart along the rows
    and ``leading`` along K. CUTLASS writes them, in 16-byte units (``W`` = 2, 4, 8 for the
    32-, 64-, 128-byte swizzle), as
    ``((8,m),(T,2)):((1T,SBO),(1,LBO))`` and ``((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))`` without
    swizzle, ``((8,n),2):((W,SBO),1)`` and ``((W,n),(8,k)):((1,LBO),(W,SBO))`` with it (cute/
    atom/mma_traits_sm90_gmma.hpp, ``Swizzle<3|2|1,4,3>`` of byte addresses): swizzled
    MN-major atoms take LBO along the rows and SBO along K (:meth:`descriptor`), and K-major
    ones no LBO."""

    leading: int  # bytes between blocks adjacent along K
    stride: int  # bytes between blocks adjacent along M or N
    k_major: bool = True
    swizzle: int = 0  # bytes of a swizzled line (SWIZZLE_MODES), 0 without swizzle

    def offset(self, row: Expr, k: Expr, itemsize: int) -> Expr:
        """The offset of element (``row``, ``k``) from the operand's first, in elements of
        ``itemsize`` bytes (before a swizzled tile places it), as an expression of ``row``
        and ``k``."""
        w = (self.swizzle or 16) // itemsize
        fast, slow = (k, row) if self.k_major else (row, k)  # along a line, across lines

        def term(value: Expr, divisor: int, scale: int, remainder: bool) -> Expr:
            part = Binary(Op.MOD if remainder else Op.DIV, value, Int(divisor))
            return Binary(Op.MUL, part, Int(scale))

        return Binary(Op.ADD, Binary(Op.ADD, Binary(Op.MOD, fast, Int(w)),
                                     term(slow, 8, w, True)),
                      Binary(Op.ADD,
                             term(row, 8 if self.k_major else w, self.stride // itemsize, False),
                             term(k, w if self.k_major else 8, self.leading // itemsize, False)))

    def descriptor(self) -> tuple[int, int, int]:
        """The descriptor's leading- and stride-dimension byte offsets and its layout type
        (:data:`SWIZZLE_MODES`): a swizzled K-major operand's K fits one line, so its
        leading offset is unused (16, as CUTLASS sets it)."""
        mode = SWIZZLE_MODES[self.swizzle]
        if not self.swizzle:
            return self.leading, self.stride, mode
        return (16, self.stride, mode) if self.k_major else (self.stride, self.leading, mode)


# wgmma's swizzles by the bytes of their lines, and the descriptor's layout type for each
# (PTX ISA, "Matrix Descriptor Format", bits 62-63: 0 none, 1 128-byte, 2 64-byte, 3 32-byte)
SWIZZLE_MODES = {0: 0, 128: 1, 64: 2, 32: 3}


@dataclass(frozen=True)
class WarpgroupMultiply:
    """``accumulator += a @ b.T`` started by the warpgroup, one ``wgmma.mma_async.sync.aligned
    .m64nNk{16|8}`` (PTX ISA, "wgmma.mma_async"): ``a`` is the 64 x k operand at ``a``'s
    element, ``b`` the n x k one at ``b``'s, both in shared memory as ``a_layout`` and
    ``b_layout`` say (:class:`CoreMatrices`); products exact, added in float32 (``shape`` =
    (64, n, k)). ``accumulator`` is the first of ``n / 2`` float registers of each thread of
    the warpgroup, in the layout of "Matrix Fragments for wgmma.m64nNk16": register ``i`` of
    thread ``t`` (warp ``w = t / 32``, lane ``l = t % 32``) holds row ``16 w + l / 4 + 8 ((i %
    4) / 2)``, column ``8 (i / 4) + 2 (l % 4) + i % 2``. Until a :class:`WarpgroupWait` covers
    its group, no thread may write its operand tiles nor touch its accumulators."""

    accumulator: Load
    a: Load
    b: Load
    shape: tuple[int, int, int]
    a_layout: CoreMatrices
    b_layout: CoreMatrices


@dataclass(frozen=True)
class WarpgroupFence:
    """``wgmma.fence.sync.aligned`` (PTX ISA, "wgmma.fence"): orders the warpgroup's earlier
    register accesses (the accumulators' zero fill) before the asynchronous MMAs that
    follow; needed before the first MMA and after any other access of their registers."""


@dataclass(frozen=True)
class WarpgroupCommit:
    """``wgmma.commit_group.sync.aligned`` (PTX ISA, "wgmma.commit_group"): the warpgroup's
    MMAs started since its last commit become one group, which a :class:`WarpgroupWait`
    waits for."""


@dataclass(frozen=True)
class WarpgroupWait:
    """``wgmma.wait_group.sync.aligned pending`` (PTX ISA, "wgmma.wait_group"): the warpgroup
    waits until at most ``pending`` of its committed groups, the most recent, are in flight:
    every earlier group's MMAs have read their operands and written their accumulators."""

    pending: int = 0


@dataclass(frozen=True)
class ProxyFence:
    """``fence.proxy.async.shared::cta`` (PTX ISA, "Memory Consistency Model: Proxies" and
    "membar/fence"): this thread's earlier writes of shared memory through the generic proxy
    (ordinary stores, cp.async's data once waited for) become visible to the async proxy,
    through which warpgroup MMAs read their operands. Each writing thread fences before the
    barrier after which a warpgroup reads what it wrote."""


# Hopper's transaction barriers and bulk tensor copies (sm_90). An mbarrier is a 64-bit object
# in shared memory (an element of a Local in Space.MBARRIER) that counts, per phase, arrivals
# of threads and bytes of asynchronous transactions (PTX ISA 9.7.13.15, "mbarrier"): a phase
# completes when the arrivals it expects have all come and its transaction count is back at
# zero; the next phase then begins, expecting as many arrivals again. A thread that waits for
# a completed phase sees what that phase's transactions wrote. The tensor memory accelerator
# moves a box of a tensor into shared memory for one thread's instruction (PTX ISA
# 9.7.9.25.5, "cp.async.bulk.tensor"), through the async proxy, and completes its bytes on an
# mbarrier: no thread may touch the box until it has waited for that phase.


@dataclass(frozen=True)
class TensorMap:
    """What a tensor map (the CUDA driver's ``CUtensorMap``, encoded on the host by
    ``cuTensorMapEncodeTiled``, :mod:`treduda.run.tensor_maps`) tells the bulk tensor copy of
    the tensor ``tensor``: element (c0, c1, ..) at ``sum(c_d strides[d])`` (dimension 0
    innermost, ``strides[0] == 1``, in elements) for ``0 <= c_d < extents[d]``, zero outside
    (``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``); read in boxes of ``box`` elements that land in
    shared memory dimension 0 fastest, their 16-byte chunks placed by the ``swizzle`` (0, 32,
    64 or 128 bytes: ``CU_TENSOR_MAP_SWIZZLE_*``, bits 4 on of a chunk's address XOR'd with
    1, 2 or 3 bits from bit 7 on, as :func:`swizzled` and wgmma's descriptors place them).
    ``name`` is the kernel parameter that holds the encoded map."""

    name: str
    tensor: str
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int = 0

    @property
    def box_elements(self) -> int:
        return functools.reduce(operator.mul, self.box, 1)


@dataclass(frozen=True)
class MbarrierInit:
    """``mbarrier.init.shared::cta.b64`` (PTX ISA 9.7.13.15.9) then
    ``fence.mbarrier_init.release.cluster`` (9.7.13.4): the mbarrier at ``barrier`` begins
    its phase 0, expecting ``arrivals`` arrivals per phase and no transaction bytes. One
    thread initialises it; the others and the copy engine use it after a :class:`Barrier`."""

    barrier: Load
    arrivals: int


@dataclass(frozen=True)
class MbarrierArrive:
    """``mbarrier.arrive.expect_tx.shared::cta.b64`` (PTX ISA 9.7.13.15.11/13; plain
    ``mbarrier.arrive`` where ``expect_bytes`` is 0): each executing thread adds
    ``expect_bytes`` to the current phase's transaction count, then counts as one arrival."""

    barrier: Load
    expect_bytes: int = 0


@dataclass(frozen=True)
class MbarrierWait:
    """``mbarrier.try_wait.parity.shared::cta.b64`` in a loop until it succeeds (PTX ISA
    9.7.13.15.16): each executing thread waits until the phase of parity ``parity`` (an
    expression of 0 or 1: the current phase, or the one just before it) of ``barrier`` has
    completed; what that phase's transactions wrote is then visible to it."""

    barrier: Load
    parity: Expr


@dataclass(frozen=True)
class TensorCopy:
    """``cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes`` (PTX
    ISA 9.7.9.25.5.1): each executing thread (one, elected by the kernel) starts a copy of the
    box of the tensor map named ``map`` whose first element has ``coordinates`` (dimension 0
    first, any integers: elements outside the tensor read as zero) to the shared tile at
    ``target``, the box's element ``n`` (dimension 0 fastest) at ``target`` + ``n`` as the
    tile's :attr:`Local.swizzle` places elements (the map's swizzle must be the tile's). Its
    bytes, the whole box's, complete on ``barrier``'s current phase, asynchronously: a
    :class:`MbarrierArrive` expects them and a :class:`MbarrierWait` for that phase makes
    them visible. The target lies on a 128-byte boundary and, where the map swizzles, a
    whole repeat of its pattern (8 of its lines) from the tile's start, so that the copy
    engine's XOR sees the lines the tile's swizzle sees (the emulator checks both)."""

    target: Load
    map: str
    coordinates: tuple[Expr, ...]
    barrier: Load


MBARRIER_STATEMENTS = (MbarrierInit, MbarrierArrive, MbarrierWait, TensorCopy)


@dataclass(frozen=True)
class SetMaxRegisters:
    """``setmaxnreg.inc.sync.aligned.u32`` (``increase``) or ``.dec`` (PTX ISA,
    "Miscellaneous Instructions: setmaxnreg", sm_90a): every warp of the executing
    warpgroup asks that each of its threads own at most ``count`` registers (24 to 256, a
    multiple of 8), taking them from
    the block's pool or giving them back to it (``.inc`` blocks until enough are free). A
    warp-specialised kernel's producer warpgroup gives registers up and its consumers take
    them. It changes no value; ptxas honours it only in a kernel with a register cap at
    entry (``__launch_bounds__(threads, 1)``: :func:`has_register_roles`)."""

    count: int
    increase: bool


WARPGROUP_STATEMENTS = (WarpgroupMultiply, WarpgroupFence, WarpgroupCommit, WarpgroupWait,
                        SetMaxRegisters)

# Statements with memory or fragment operands (Elements before the AST, Loads after), which
# passes rewrite through map_operands.
OPERAND_STATEMENTS = (*WARP_STATEMENTS, AsyncCopy, WarpgroupMultiply, *MBARRIER_STATEMENTS)
Stmt = (Assign | For | If | Block | Barrier | VectorLoad | VectorStore | FillFragment
        | LoadFragment | MultiplyAccumulate | AddFragment | StoreFragment | AsyncCopy
        | CommitCopies | WaitCopies | WarpgroupMultiply | WarpgroupFence | WarpgroupCommit
        | WarpgroupWait | ProxyFence | MbarrierInit | MbarrierArrive | MbarrierWait | TensorCopy
        | SetMaxRegisters)


class ParamKind(enum.Enum):
    OUTPUT = "output"  # the written tensor
    INPUT = "input"  # a read-only tensor
    SCALAR = "scalar"  # a named scalar of the kernel's dtype
    SIZE = "size"  # the extent of an index, for kernels with symbolic sizes
    WORKSPACE = "workspace"  # a global array of a Local in Space.GLOBAL, allocated by the launch


@dataclass(frozen=True)
class Param:
    name: str
    kind: ParamKind


class Space(enum.Enum):
    REGISTER = "register"
    SHARED = "shared"
    GLOBAL = "global"  # a workspace in global memory: a kernel argument, not a declaration
    FRAGMENT = "fragment"  # tensor-core fragments of a warp (Local.fragment says which)
    MBARRIER = "mbarrier"  # a block's mbarrier objects, 8 bytes each in shared memory


WARP = 32  # threads of a warp, which execute the warp-collective statements together


# The CUDA forms of a fragment (:attr:`Fragment.mapping`): WMMA's fragments, or mma.sync
# m16n8k16 instructions on registers in the PTX ISA's documented layouts
MAPPINGS = ("wmma", "mma")


class Use(enum.Enum):
    """Which operand of a multiply-accumulate a fragment is (``wmma::matrix_a`` ..)."""

    A = "matrix_a"  # m x k
    B = "matrix_b"  # k x n
    ACCUMULATOR = "accumulator"  # m x n


@dataclass(frozen=True)
class Fragment:
    """The kind of an array of fragments: its use, the multiply-accumulate's shape
    ``(m, n, k)``, and for an A or B operand the layout of its tile in shared memory
    (``row_major``: a row's elements adjacent)."""

    use: Use
    shape: tuple[int, int, int]
    row_major: bool = True
    # How CUDA computes it (:data:`MAPPINGS`): nvcuda::wmma, or inline PTX mma.sync fed by
    # ldmatrix; the fragment's meaning (a tile of the shape) is the same in both
    mapping: str = "wmma"

    @property
    def rows_columns(self) -> tuple[int, int]:
        """The extents of one fragment's tile."""
        m, n, k = self.shape
        return {Use.A: (m, k), Use.B: (k, n), Use.ACCUMULATOR: (m, n)}[self.use]

    @property
    def elements(self) -> int:
        rows, columns = self.rows_columns
        return rows * columns


@dataclass(frozen=True)
class Local:
    """An array of the kernel's dtype declared at the top of the kernel; ``shape == ()`` is a
    scalar register. ``layout`` says how ``Element`` indices are linearised, as for tensors."""

    name: str
    space: Space
    shape: tuple[int, ...] = ()
    layout: str = "C"
    # A shared tile that holds the tensors' stored type (float16, bfloat16 bits), as fragment
    # loads read it, rather than the type the kernel computes in.
    stored: bool = False
    fragment: Fragment | None = None  # the fragments' kind, for Space.FRAGMENT
    # Shared tiles (declared before this one) whose memory this one takes over: the kernel
    # accesses none of them once it writes this one, a barrier after their last access (the
    # emulator checks both), so a block needs the larger of their bytes and its own, not the
    # sum (the tensor-core C tile, written after the main loop's operand tiles are done).
    reuses: tuple[str, ...] = ()
    # A shared tile held swizzled rather than padded: element ``o`` at :func:`swizzled`
    # ``(o, swizzle, size)`` (0: at ``o``), ``size`` the kernel dtype's bytes (16-bit values,
    # or TF32's float32). Accesses name elements as if it were not; the printers and the
    # bank counts place them.
    swizzle: int = 0
    # The bits of ``o`` from ``swizzle`` on that the XOR reads: 3 (the 128-byte swizzle, the
    # mma.sync tiles'), 2 or 1 (wgmma's 64- and 32-byte swizzles of lines that long)
    swizzle_bits: int = 3
    # A shared tile of the type registers hold whose neighbouring stores in a straight run
    # become one vector store where aligned (:mod:`treduda.codegen.vectorize`), as outputs'
    # do: the warpgroup C tile, whose accumulator pairs nvcc stores as STS.64
    vector_stores: bool = False
    # A shared tile of the type registers hold that a 16-bit kernel's write reads in vectors,
    # storing the output's neighbouring elements in one vector store where aligned, packed in
    # pairs (:mod:`treduda.codegen.vectorize`): the mma.sync C tile, whose write takes a vector
    # of the output's fastest index a thread (tensorcore_tiles.write_vector)
    vector_reads: bool = False

    @property
    def size(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count


@dataclass(frozen=True)
class KernelIR:
    """One kernel: its signature, its locals and its body, ready to print in any dialect."""

    name: str
    # one of treduda.frontend.dtypes.DTYPES; complex values are printed as float2 / double2
    dtype: str
    index_bits: int  # 32 or 64: the integer type of iterators, sizes and offsets
    params: tuple[Param, ...]
    locals: tuple[Local, ...]
    body: Stmt
    zeroed_output: bool = False  # the kernel adds into its output, which must start at zero
    # the tensor maps its bulk tensor copies read (TensorCopy.map): CUDA parameters after
    # params, encoded by the launch; nothing in OpenCL, whose twin reads the tensors
    tensor_maps: tuple[TensorMap, ...] = ()


# Shared memory a CUDA block may declare statically: more must be dynamic, its size a launch
# argument and the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize raised to it (CUDA C++
# Programming Guide, "Shared Memory": "allocations above 48 KB per block are architecture-
# specific, must use dynamic shared memory ... and require an explicit opt-in").
STATIC_SHARED_BYTES = 48 * 1024
SHARED_ALIGNMENT = 128  # bytes: where each tile starts in dynamic shared memory
MBARRIER_BYTES = 8  # an mbarrier object, aligned to 8 (PTX ISA 9.7.13.15.1)
# wgmma's widest swizzle: the width of its lines, and the alignment of the 8-line atoms
# whose line bits it XORs into the chunk bits of an address (PTX ISA, "Matrix Descriptor
# Format": base offset 0 where the pattern starts at a 1024-byte boundary; the 64- and
# 32-byte swizzles' atoms, 512 and 256 bytes, divide it)
SWIZZLE_BYTES = 128
SWIZZLE_ALIGNMENT = 1024


def shared_alignment(kernel: KernelIR) -> int:
    """Where a block's pool of shared tiles starts: at :data:`SWIZZLE_ALIGNMENT` where a
    warpgroup MMA reads a swizzled operand (its tiles' offsets in the pool are multiples of
    it, their atoms' XOR then the hardware's), else :data:`SHARED_ALIGNMENT`."""
    swizzled = any(isinstance(s, WarpgroupMultiply) and (s.a_layout.swizzle
                                                         or s.b_layout.swizzle)
                   for s in nested(kernel.body))
    return SWIZZLE_ALIGNMENT if swizzled else SHARED_ALIGNMENT


def shared_offsets(kernel: KernelIR) -> tuple[dict[str, int], int]:
    """Each shared tile's byte offset in one block's shared memory, laid out one after
    another at :data:`SHARED_ALIGNMENT` (a tile that reuses others from the first of them:
    :attr:`Local.reuses`), and the bytes they take: its tiles hold the type the kernel
    computes in, or the tensors' stored type where they say so (the tensor-core operand
    tiles of float16 and bfloat16, half the bytes); mbarriers (:data:`MBARRIER_BYTES` each)
    come last, so that no static declaration moves the pool off its alignment."""
    computed, stored = (itemsize(d) for d in (compute(kernel.dtype), kernel.dtype))
    offsets, end = {}, 0
    for local in sorted(kernel.locals, key=lambda local: local.space is Space.MBARRIER):
        if local.space in (Space.SHARED, Space.MBARRIER):
            start = min(offsets[name] for name in local.reuses) if local.reuses else end
            offsets[local.name] = start
            size = local.size * (MBARRIER_BYTES if local.space is Space.MBARRIER
                                 else stored if local.stored else computed)
            end = max(end, start + -(-size // SHARED_ALIGNMENT) * SHARED_ALIGNMENT)
    return offsets, end


def reuses_shared(kernel: KernelIR) -> bool:
    """Whether a shared tile of ``kernel`` takes over others' memory (:attr:`Local.reuses`):
    its tiles then point into one pool of shared memory, as dynamic ones do."""
    return any(local.reuses for local in kernel.locals)


def dynamic_shared_bytes(kernel: KernelIR) -> int:
    """The dynamic shared memory a CUDA launch of ``kernel`` passes: none where its tiles fit
    the static 48 KB, else all of them (:func:`shared_offsets`)."""
    _, total = shared_offsets(kernel)
    return total if total > STATIC_SHARED_BYTES else 0


def nested(s: Stmt) -> Iterator[Stmt]:
    """``s`` and every statement inside it."""
    yield s
    if isinstance(s, Block):
        for child in s.body:
            yield from nested(child)
    elif isinstance(s, For):
        yield from nested(s.body)
    elif isinstance(s, If):
        yield from nested(s.then)
        if s.otherwise is not None:
            yield from nested(s.otherwise)


def map_children(s: Stmt, f: Callable[[Stmt], Stmt]) -> Stmt:
    """``s`` with ``f`` applied to each statement directly inside it (a pass's walk)."""
    if isinstance(s, Block):
        return Block(tuple(f(child) for child in s.body))
    if isinstance(s, For):
        return replace(s, body=f(s.body))
    if isinstance(s, If):
        otherwise = None if s.otherwise is None else f(s.otherwise)
        return replace(s, then=f(s.then), otherwise=otherwise)
    return s


def reads_thread_id(e: Expr) -> bool:
    """Whether ``e`` depends on the thread ids."""
    return (isinstance(e, Index) and e.builtin is Builtin.THREAD_ID
            or any(reads_thread_id(c) for c in children(e)))


def is_role_split(s: If) -> bool:
    """Whether ``s`` splits a block's threads into roles that wait for each other (warp
    specialisation): its condition tests thread ids and each of its two branches uses
    mbarriers."""
    return s.otherwise is not None and reads_thread_id(s.condition) and all(
        any(isinstance(c, MBARRIER_STATEMENTS) for c in nested(branch))
        for branch in (s.then, s.otherwise))


def has_register_roles(kernel: KernelIR) -> bool:
    """Whether ``kernel`` rebalances registers between its warpgroups (setmaxnreg)."""
    return any(isinstance(s, SetMaxRegisters) for s in nested(kernel.body))


def has_barrier(s: Stmt) -> bool:
    """Whether ``s`` contains a barrier anywhere (a wait for an mbarrier's phase is one in
    the OpenCL twin: :mod:`treduda.codegen.transactions`)."""
    return any(isinstance(child, (Barrier, MbarrierWait)) for child in nested(s))


def has_atomic(s: Stmt) -> bool:
    """Whether ``s`` contains an atomic update anywhere."""
    return any(isinstance(child, Assign) and child.atomic for child in nested(s))


def has_call(s: Stmt) -> bool:
    """Whether ``s`` calls a :class:`Function` anywhere (a fragment load's rounding too)."""
    def calls(e) -> bool:
        return isinstance(e, Call) or any(calls(c) for c in children(e))
    return any(isinstance(c, Assign) and calls(c.value)
               or isinstance(c, LoadFragment) and c.rounding is not None for c in nested(s))


def children(e: Expr) -> tuple[Expr, ...]:
    """The operands of expression ``e`` (a Select's condition first), none for a leaf."""
    if isinstance(e, Binary):
        return e.left, e.right
    if isinstance(e, Neg):
        return (e.operand,)
    if isinstance(e, Call):
        return e.args
    return (e.condition, e.if_true, e.if_false) if isinstance(e, Select) else ()


@functools.lru_cache(maxsize=4096)
def lanes(first: Load, width: int, stride: int = 1) -> tuple[Load, ...]:
    """The elements of a vector access (:class:`VectorLoad`, :class:`VectorStore`) that
    starts at ``first``, one per lane, or of the target of a copy whose elements land
    ``stride`` apart (:attr:`AsyncCopy.stride`). The same lanes each time: the emulator
    keeps an expression's evaluator by its identity, and built anew for every copy it ran
    they took a third of a tensor-core kernel's emulation."""
    return (first, *(Load(first.array, Binary(Op.ADD, first.offset, Int(stride * n)))
                     for n in range(1, width)))


def _operand_fields(s: Stmt) -> list[str]:
    return [f.name for f in fields(s) if isinstance(getattr(s, f.name), (Element, Load))]


def operands(s: Stmt) -> tuple[Expr, ...]:
    """The fragment and memory operands of a statement of :data:`OPERAND_STATEMENTS`, in field
    order."""
    return tuple(getattr(s, name) for name in _operand_fields(s))


def has_indices(s: Stmt) -> bool:
    """Whether ``s`` holds index expressions beside its operands (:func:`map_indices`)."""
    return isinstance(s, (TensorCopy, MbarrierWait))


def map_indices(s: Stmt, f: Callable[[Expr], Expr]) -> Stmt:
    """The statement ``s`` with ``f`` applied to its index expressions that are no operand:
    a bulk copy's coordinates, a phase wait's parity (what the AST builder and the unroller
    rewrite as they rewrite operands)."""
    if isinstance(s, TensorCopy):
        return replace(s, coordinates=tuple(f(c) for c in s.coordinates))
    if isinstance(s, MbarrierWait):
        return replace(s, parity=f(s.parity))
    return s


def map_operands(s: Stmt, f: Callable[[Expr], Expr]) -> Stmt:
    """The statement ``s`` of :data:`OPERAND_STATEMENTS` with ``f`` applied to each of its
    operands."""
    return replace(s, **{name: f(getattr(s, name)) for name in _operand_fields(s)})


def elements(node: Assign | Barrier | Expr) -> list[Element]:
    """Every tensor, register or shared element a statement touches: the target first, then
    the value's, left to right (the operands of the other statements with operands, a
    warp-collective statement's or an asynchronous copy's, in field order).
    Access relations are listed in this order."""
    if isinstance(node, Assign):
        return elements(node.target) + elements(node.value)
    if isinstance(node, OPERAND_STATEMENTS):
        return [e for operand in operands(node) for e in elements(operand)]
    if isinstance(node, Element):
        return [node]
    if isinstance(node, Binary):
        return elements(node.left) + elements(node.right)
    if isinstance(node, Neg):
        return elements(node.operand)
    if isinstance(node, Call):
        return [e for arg in node.args for e in elements(arg)]
    if isinstance(node, Select):
        return [e for part in (node.condition, node.if_true, node.if_false)
                for e in elements(part)]
    return []


def replace_elements(node, replacements):
    """``node`` with its elements replaced, in :func:`elements` order, by ``replacements``
    (an iterator of expressions)."""
    if isinstance(node, Assign):
        target = replace_elements(node.target, replacements)
        return Assign(target, node.op, replace_elements(node.value, replacements), node.atomic)
    if isinstance(node, OPERAND_STATEMENTS):
        return map_operands(node, lambda operand: replace_elements(operand, replacements))
    if isinstance(node, Element):
        return next(replacements)
    if isinstance(node, Binary):
        left = replace_elements(node.left, replacements)
        return Binary(node.op, left, replace_elements(node.right, replacements))
    if isinstance(node, Neg):
        return Neg(replace_elements(node.operand, replacements))
    if isinstance(node, Call):
        return Call(node.function, tuple(replace_elements(a, replacements) for a in node.args))
    if isinstance(node, Select):
        return Select(*(replace_elements(part, replacements)
                        for part in (node.condition, node.if_true, node.if_false)))
    return node


def substitute(e: Expr, values: Mapping[str, Expr]) -> Expr:
    """Expression ``e`` with each variable named in ``values`` replaced by its expression
    there (in the offsets of the elements it loads and the arguments of its calls too)."""
    if isinstance(e, Var):
        return values.get(e.name, e)
    if isinstance(e, Load):
        return Load(e.array, substitute(e.offset, values))
    if isinstance(e, Call):
        return Call(e.function, tuple(substitute(a, values) for a in e.args))
    if isinstance(e, Binary):
        return Binary(e.op, substitute(e.left, values), substitute(e.right, values))
    if isinstance(e, Neg):
        return Neg(substitute(e.operand, values))
    if isinstance(e, Select):
        return Select(*(substitute(part, values) for part in children(e)))
    return e


def affine(e: Expr) -> tuple[dict[Expr, int], int]:
    """``e`` as ``sum(coefficient * term) + constant``: its terms (the subexpressions that are
    no sum, difference or multiple of a constant), in the order they first appear, each with
    its coefficient (none is 0), and its constant."""
    if isinstance(e, Int):
        return {}, e.value
    if isinstance(e, Neg):
        return _scaled(affine(e.operand), -1)
    if isinstance(e, Binary) and e.op in (Op.ADD, Op.SUB):
        (terms, constant), (right, right_constant) = affine(e.left), affine(e.right)
        sign = 1 if e.op is Op.ADD else -1
        sums = dict(terms)
        for term, c in right.items():
            sums[term] = sums.get(term, 0) + sign * c
        return {t: c for t, c in sums.items() if c}, constant + sign * right_constant
    if isinstance(e, Binary) and e.op is Op.MUL:
        for factor, other in ((e.left, e.right), (e.right, e.left)):
            if isinstance(factor, Int):
                return _scaled(affine(other), factor.value)
    return {e: 1}, 0


def _scaled(form: tuple[dict[Expr, int], int], k: int) -> tuple[dict[Expr, int], int]:
    terms, constant = form
    return {t: c * k for t, c in terms.items() if c * k}, constant * k


def _divide(a, b):
    """Division as C does it: truncating for integers (rounding towards zero), else a float
    division. Evaluating the C meaning, not isl's, lets emulation see what the kernel does."""
    if not np.issubdtype(np.result_type(a, b), np.integer):
        return a / b
    quotient = a // b
    return quotient + ((a % b != 0) & ((a < 0) != (b < 0)))


_OPERATIONS = {
    Op.ADD: operator.add,
    Op.SUB: operator.sub,
    Op.MUL: operator.mul,
    Op.DIV: _divide,
    Op.MOD: np.fmod,  # C's remainder takes the sign of the dividend
    Op.FLOOR_DIV: operator.floordiv,
    Op.MIN: np.minimum,
    Op.MAX: np.maximum,
    Op.LT: operator.lt,
    Op.LE: operator.le,
    Op.EQ: operator.eq,
    Op.GE: operator.ge,
    Op.GT: operator.gt,
    Op.AND: np.logical_and,
    Op.OR: np.logical_or,
}


def apply(op: Op, left: Any, right: Any) -> Any:
    """``left op right`` as the printed C computes it (ints, floats or numpy arrays)."""
    return _OPERATIONS[op](left, right)


def evaluate(expr: Expr, env: Mapping[str, Any], threads: Sequence | None = None,
             blocks: Sequence = (0, 0, 0)) -> Any:
    """Value of an integer expression: a launch-geometry formula for given sizes on the host,
    or an index expression of the threads ``threads`` (x, y, z ids: ints, or numpy arrays to
    evaluate many threads at once) of block ``blocks``."""
    if isinstance(expr, Int):
        return expr.value
    if isinstance(expr, Var):
        if expr.name not in env:
            raise TredudaError(f"no value for '{expr.name}' in an index expression (a symbolic "
                               "kernel needs every size)")
        return env[expr.name]
    if isinstance(expr, Index) and threads is not None:
        return (threads if expr.builtin is Builtin.THREAD_ID else blocks)[expr.axis]
    if isinstance(expr, Binary):
        return apply(expr.op, evaluate(expr.left, env, threads, blocks),
                     evaluate(expr.right, env, threads, blocks))
    if isinstance(expr, Neg):
        return -evaluate(expr.operand, env, threads, blocks)
    if isinstance(expr, Select):
        condition = evaluate(expr.condition, env, threads, blocks)
        if np.ndim(condition) == 0:
            return evaluate(expr.if_true if condition else expr.if_false, env, threads, blocks)
        return np.where(condition, evaluate(expr.if_true, env, threads, blocks),
                        evaluate(expr.if_false, env, threads, blocks))
    raise TredudaError(f"cannot evaluate {expr!r} on the host")


Evaluator = Callable[[Mapping[str, Any], Sequence, Sequence, dict], Any]


def evaluator(expr: Expr, fixed: Collection[str]) -> tuple[Evaluator, bool]:
    """:func:`evaluate` of ``expr`` as a function of ``(env, threads, blocks, memo)``, and
    whether it depends on variables not in ``fixed`` (loop iterators; if not, one call per
    thread block gives its value): what the emulator calls on every statement it executes.
    The dispatch on node types is done here, once; a part that depends on ``fixed``, thread
    and block ids only is evaluated once per ``memo`` (one per block), at its first use. It
    returns what :func:`evaluate` would."""
    varying: dict[int, bool] = {}  # by id: the nodes of expr live as long as its evaluator

    def mark(e: Expr) -> bool:
        if isinstance(e, Var):
            varying[id(e)] = e.name not in fixed
        else:
            varying[id(e)] = any([mark(child) for child in children(e)])
        return varying[id(e)]

    mark(expr)
    return _evaluator(expr, varying), varying[id(expr)]


def _evaluator(expr: Expr, varying: Mapping[int, bool]) -> Evaluator:
    """:func:`evaluator`'s function of ``expr``, whose nodes vary with the loop iterators
    where ``varying`` (by id) says so."""
    if isinstance(expr, Int):
        value = expr.value
        return lambda env, threads, blocks, memo: value
    if not varying[id(expr)]:  # evaluated once per block
        key = id(expr)

        def once(env: Mapping[str, Any], threads: Sequence, blocks: Sequence,
                 memo: dict) -> Any:
            if key not in memo:
                memo[key] = evaluate(expr, env, threads, blocks)
            return memo[key]

        return once
    if isinstance(expr, Var):
        name = expr.name

        def variable(env: Mapping[str, Any], threads: Sequence, blocks: Sequence,
                     memo: dict) -> Any:
            if name not in env:  # evaluate's error: no value for it
                return evaluate(expr, env, threads, blocks)
            return env[name]

        return variable
    functions = [_evaluator(child, varying) for child in children(expr)]
    if isinstance(expr, Neg):
        (operand,) = functions
        return lambda env, threads, blocks, memo: -operand(env, threads, blocks, memo)
    if isinstance(expr, Binary):
        left, right = functions
        operation = _OPERATIONS[expr.op]
        return lambda env, threads, blocks, memo: operation(
            left(env, threads, blocks, memo), right(env, threads, blocks, memo))
    if isinstance(expr, Select):
        condition, if_true, if_false = functions

        def select(env: Mapping[str, Any], threads: Sequence, blocks: Sequence,
                   memo: dict) -> Any:
            taken = condition(env, threads, blocks, memo)
            if np.ndim(taken) == 0:
                return (if_true if taken else if_false)(env, threads, blocks, memo)
            return np.where(taken, if_true(env, threads, blocks, memo),
                            if_false(env, threads, blocks, memo))

        return select
    return lambda env, threads, blocks, memo: evaluate(expr, env, threads, blocks)  # raises


def swizzled(offset: Any, shift: int, size: int = 2, bits: int = 3) -> Any:
    """Where a tile of ``size``-byte values swizzled by ``shift`` (:attr:`Local.swizzle`)
    holds element ``offset`` (an int or an integer array): its 16-byte chunk (bits 3 on of
    16-bit values, :func:`swizzle_chunk`) XOR'd with ``bits`` bits of it from ``shift`` on,
    the row (or, for rows shorter than 128 bytes, the 128-byte line) modulo ``2 ** bits``,
    so that that many rows read at one column lie on distinct 16-byte bank groups (as
    CUTLASS's swizzled shared layouts place them); a permutation of each ``2 ** bits``
    chunks, as ``templates/helpers.j2``'s ``td_swizzle``."""
    return offset ^ (((offset >> shift) & ((1 << bits) - 1)) << swizzle_chunk(size))


def swizzle_chunk(size: int) -> int:
    """The lowest bit of a 16-byte chunk's number in an offset of ``size``-byte elements."""
    return (16 // size).bit_length() - 1


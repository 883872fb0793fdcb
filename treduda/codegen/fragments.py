"""How each dialect prints the warp-collective statements of the kernel IR (tensor cores).

CUDA says them with ``nvcuda::wmma``: a fragment is a ``wmma::fragment`` whose elements the
hardware spreads over the warp's registers; loads and stores go through shared memory with
``load_matrix_sync`` / ``store_matrix_sync`` and ``mma_sync`` runs on the tensor cores (HMMA
for float16 and bfloat16, TF32 HMMA, DMMA for float64). TF32 inputs are rounded after the
load by ``wmma::__float_to_tf32``, which is ``cvt.rna.tf32.f32`` (crt/mma.h), as the CUDA C++
Programming Guide asks ("the elements of the fragment must be converted").

With the "mma" mapping (:attr:`ir.Fragment.mapping`) CUDA says them in inline PTX instead
(:class:`MmaSync`): ``mma.sync`` on registers in the PTX ISA's documented layouts, fed by
``ldmatrix``; the fragments mean the same tiles, so the twin below serves both.

OpenCL has no tensor cores, so it prints a *twin* that computes the same tile products from
the same rounded inputs. Each thread keeps in private memory:

* its share of each accumulator: the elements ``lane + 32 t`` of the fragment's row-major
  m x n tile (``lane`` = its thread id modulo 32), which lie in rows ``lane / n + (32 / n) t``
  of one column, ``lane % n`` (n, 16 or 8, divides 32);
* of every A fragment it loads, those rows; of every B fragment, that column: rounded by the
  same helper as the CUDA side's (``td_tf32`` is ``cvt.rna`` bit for bit, see
  ``templates/precision.j2``); float16 and bfloat16 are read with the dialect's conversions,
  which are exact into float32.

A multiply-accumulate adds to each of a thread's accumulator elements the dot product of its
A row and B column, FMA after FMA in float32 (float64 for float64) — the exact products of
the rounded inputs summed in the accumulator's type, which is what ``mma_sync`` computes up
to the order of the additions (which the CUDA guide leaves unspecified). A fragment store
writes each thread's accumulator elements to their places in the tile. The statements'
operands are the warp's, not the thread's, so the 32 threads' shares together are exactly the
tile product the WMMA code computes.
"""

from __future__ import annotations

from collections.abc import Callable

from ..frontend.dtypes import itemsize
from . import ir
from .simplify import plus, times

WMMA = "nvcuda::wmma::"
# CUDA's element types of A and B fragments, per kernel dtype
WMMA_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16",
              "float32": f"{WMMA}precision::tf32", "float64": "double"}
# ... and what their shared tiles hold (the pointer a fragment load takes)
WMMA_POINTERS = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float",
                 "float64": "double"}
# The fragment types whose loads are printed in PTX with the shared state space
# (templates/fragment_loads.cu.j2): their PTX element types and bytes per element. WMMA's own
# loads of them are generic; float16's load_matrix_sync is already a shared load (LDSM).
SHARED_LOADS = {"bfloat16": ("bf16", 2), "float32": ("tf32", 4), "float64": ("f64", 8)}
WMMA_ROUNDING = {ir.Function.TF32: f"{WMMA}__float_to_tf32(td_x)",
                 ir.Function.TF32_RESIDUAL: f"{WMMA}__float_to_tf32(td_x - {WMMA}__float_to_tf32("
                                            "td_x))"}


def accumulator_type(dtype: str) -> str:
    return "double" if dtype == "float64" else "float"


def has_fragments(kernel: ir.KernelIR) -> bool:
    return any(local.space is ir.Space.FRAGMENT for local in kernel.locals)


class Wmma:
    """The CUDA spelling: ``nvcuda::wmma`` calls."""

    def __init__(self, kernel: ir.KernelIR, expr: Callable[[ir.Expr], str]):
        self.kernel, self.expr = kernel, expr

    def declare(self, local: ir.Local) -> str:
        fragment = local.fragment
        m, n, k = fragment.shape
        if fragment.use is ir.Use.ACCUMULATOR:
            kind = f"{WMMA}accumulator, {m}, {n}, {k}, {accumulator_type(self.kernel.dtype)}"
        else:
            layout = f"{WMMA}row_major" if fragment.row_major else f"{WMMA}col_major"
            kind = (f"{WMMA}{fragment.use.value}, {m}, {n}, {k}, "
                    f"{WMMA_TYPES[self.kernel.dtype]}, {layout}")
        return f"{WMMA}fragment<{kind}> {local.name}[{local.size}];"

    def shared_loads(self) -> dict[str, object] | None:
        """What ``templates/fragment_loads.cu.j2`` needs to print ``td_load_fragment`` for the
        kernel's fragments, or None where WMMA's own loads are shared loads (float16). A and B
        fragments of the shapes used (m16n16k16, m16n16k8, m8n8k4) hold ``m k`` and ``k n``
        elements, the same number: a warp's 32 threads share them in 32-bit registers, or one
        64-bit register each for float64."""
        dtype = self.kernel.dtype
        shapes = {local.fragment.shape for local in self.kernel.locals
                  if local.space is ir.Space.FRAGMENT}
        if dtype not in SHARED_LOADS or not shapes:
            return None
        (m, n, k), = shapes
        ptx_type, size = SHARED_LOADS[dtype]
        wide = size == 8
        registers = 1 if wide else m * k * size // (ir.WARP * 4)
        outputs = ('"=d"(f.x[0])' if wide
                   else ", ".join(f'"=r"(r[{i}])' for i in range(registers)))
        return {"m": m, "n": n, "k": k, "shape": f"m{m}n{n}k{k}", "ptx_type": ptx_type,
                "element": WMMA_TYPES[dtype], "pointer": WMMA_POINTERS[dtype],
                "registers": registers, "outputs": outputs, "bytes": size,
                "operands": ", ".join(f"%{i}" for i in range(registers)),
                "declare": "" if wide else "unsigned *r = reinterpret_cast<unsigned *>(&f.x[0]);"}

    def stmt(self, s: ir.Stmt, pad: str) -> list[str]:
        w = WMMA
        if isinstance(s, ir.FillFragment):
            value = f"({accumulator_type(self.kernel.dtype)}){s.value.value!r}"
            return [f"{pad}{w}fill_fragment({self.expr(s.fragment)}, {value});"]
        if isinstance(s, ir.LoadFragment):
            fragment = self.expr(s.fragment)
            pointer = f"reinterpret_cast<const {WMMA_POINTERS[self.kernel.dtype]} *>"
            if self.kernel.dtype in SHARED_LOADS:
                offset, constant = _split_constant(s.first.offset)
                size = SHARED_LOADS[self.kernel.dtype][1]
                lines = [f"{pad}td_load_fragment<{constant * size}>({fragment}, "
                         f"{pointer}({s.first.array}), {self.expr(offset)}, {s.ld});"]
            else:
                lines = [f"{pad}{w}load_matrix_sync({fragment}, "
                         f"{pointer}({self.address(s.first)}), {s.ld});"]
            if s.rounding is not None:
                rounded = WMMA_ROUNDING[s.rounding]
                lines += [f"{pad}for (int td_t = 0; td_t < {fragment}.num_elements; td_t++) {{",
                          f"{pad}  const float td_x = {fragment}.x[td_t];",
                          f"{pad}  {fragment}.x[td_t] = {rounded};",
                          f"{pad}}}"]
            return lines
        if isinstance(s, ir.MultiplyAccumulate):
            c = self.expr(s.accumulator)
            return [f"{pad}{w}mma_sync({c}, {self.expr(s.a)}, {self.expr(s.b)}, {c});"]
        if isinstance(s, ir.AddFragment):  # one fragment type: one mapping of elements
            c = self.expr(s.accumulator)
            return [f"{pad}for (int td_t = 0; td_t < {c}.num_elements; td_t++) "
                    f"{c}.x[td_t] += {self.expr(s.addend)}.x[td_t];"]
        if isinstance(s, ir.StoreFragment):
            return [f"{pad}{w}store_matrix_sync({self.address(s.first)}, {self.expr(s.fragment)}, "
                    f"{s.ld}, {w}mem_row_major);"]
        raise TypeError(f"cannot print statement {s!r}")

    def address(self, first: ir.Load) -> str:
        """The address of a shared tile's element, as it is held (no conversion)."""
        return f"&{first.array}[{self.expr(first.offset)}]"


# mma.sync's operand types, per kernel dtype (the fragments the "mma" mapping computes)
MMA_TYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
# How the "mma" mapping rounds a TF32 operand's value into its register: cvt.rna.tf32.f32
# (templates/mma_sync.cu.j2), or 3xTF32's residual, rounded as templates/precision.j2 does
MMA_ROUNDING = {ir.Function.TF32: "td_cvt_tf32({})",
                ir.Function.TF32_RESIDUAL: "__float_as_uint(td_tf32_lo({}))"}
# The tile element of word {w} of a thread's TF32 A and B fragments (PTX ISA, "Matrix
# Fragments for mma.m16n8k8" with .tf32): A (16x8) a0..a3 at row g + 8 (w & 1), column
# i + 4 (w >> 1); B (8x16, two 8x8 halves) b0, b1 of half w >> 1 at row i + 4 (w & 1),
# column g + 8 (w >> 1); g = lane / 4, i = lane % 4. Rows and columns of the fragment.
TF32_LANES = {ir.Use.A: ("({l} >> 2) + 8 * ({w} & 1)", "({l} & 3) + 4 * ({w} >> 1)"),
              ir.Use.B: ("({l} & 3) + 4 * ({w} & 1)", "({l} >> 2) + 8 * ({w} >> 1)")}
MMA_LANE = "(threadIdx.x & 31)"
MMA_WORDS = {ir.Use.A: 4, ir.Use.B: 4, ir.Use.ACCUMULATOR: 8}  # a thread's, per fragment
# The tile row and column whose address lane {l} gives ldmatrix.x4 (see MmaSync), where the
# tile's memory rows are the fragment's rows (True: A row-major, B stored along K) or not,
# {c} values to a matrix row's 16 bytes (8, or 4 of TF32: an 8x8 matrix of 16-bit values is
# 8x4 32-bit words, lane l receiving row l / 4, word l % 4, as mma.m16n8k8's TF32 operands
# lie); and the tile element of a thread's accumulator value {t}. In C and Python alike, so
# that tests/test_mma_sync.py runs them against the PTX ISA's layouts.
LDMATRIX_LANES = {True: ("({l} & 15)", "{c} * ({l} >> 4)"),
                  False: ("(8 * ({l} >> 4) + ({l} & 7))", "{c} * (({l} >> 3) & 1)")}
ACCUMULATOR_LANES = ("({l} >> 2) + 8 * (({t} >> 1) & 1)",
                     "8 * ({t} >> 2) + 2 * ({l} & 3) + ({t} & 1)")


def ldmatrix_transposed(use: ir.Use, row_major: bool) -> bool:
    """Whether ldmatrix reads the fragment's 8x8 matrices transposed (.trans): where the
    tile's memory rows run along K, an A tile stored by columns or a B tile by rows."""
    return (use is ir.Use.A) != row_major


def mma_mapped(kernel: ir.KernelIR) -> bool:
    """Whether the kernel's fragments are computed by mma.sync (:data:`ir.MAPPINGS`)."""
    return any(local.fragment.mapping == "mma" for local in kernel.locals
               if local.space is ir.Space.FRAGMENT)


class MmaSync(Wmma):
    """The CUDA spelling in inline PTX (``templates/mma_sync.cu.j2``): a 16x16x16 fragment
    product is two ``mma.sync.aligned.m16n8k16.row.col.f32`` instructions, one per 8 columns
    of the accumulator, fed by one ``ldmatrix.sync.aligned.m8n8.x4`` per operand fragment.
    A thread holds, per fragment, the registers of the PTX ISA's layouts ("Matrix Fragments
    for mma.m16n8k16 with floating point type"; groupID ``g = lane / 4``, threadID_in_group
    ``i = lane % 4``):

    * A (16x16): four 32-bit words of two 16-bit values, rows ``g`` and ``g + 8`` of columns
      ``2i, 2i + 1`` (words 0, 1) and of ``2i + 8, 2i + 9`` (words 2, 3);
    * B (16x16, two 16x8 halves): words 0, 1 of columns ``g``, rows ``2i, 2i + 1`` and
      ``2i + 8, 2i + 9``; words 2, 3 the same of columns ``g + 8``;
    * the accumulator (16x16, two 16x8 halves of four floats): values ``4h + v`` at row
      ``g + 8 (v / 2)``, column ``8h + 2i + v % 2``.

    ldmatrix's x4 loads four 8x8 matrices, lane ``l`` giving the address of row ``l % 8`` of
    matrix ``l / 8`` and receiving in word ``j`` row ``l / 4``, columns ``2 (l % 4)`` and
    ``2 (l % 4) + 1`` of matrix ``j`` (PTX ISA, "ldmatrix"), or with ``.trans`` those of its
    transpose: matrix ``j`` is the 8x8 block of the fragment each word above holds, read
    along the tile's memory rows, transposed where those run along the fragment's columns
    (an A tile stored K-major by columns, a B tile stored with N adjacent)."""

    def declare(self, local: ir.Local) -> str:
        words = MMA_WORDS[local.fragment.use]
        held = "float" if local.fragment.use is ir.Use.ACCUMULATOR else "unsigned"
        return f"{held} {local.name}[{local.size}][{words}];"

    def shared_loads(self) -> None:
        return None

    def helpers(self) -> dict[str, object]:
        """What ``templates/mma_sync.cu.j2`` needs: the operands' PTX type and the MMA's k."""
        return {"type": MMA_TYPES[self.kernel.dtype],
                "k": 16 if self.kernel.dtype in ("float16", "bfloat16") else 8}

    def stmt(self, s: ir.Stmt, pad: str) -> list[str]:
        if isinstance(s, ir.FillFragment):
            value = f"{s.value.value!r}f"
            return [f"{pad}for (int td_t = 0; td_t < 8; td_t++) "
                    f"{self.expr(s.fragment)}[td_t] = {value};"]
        if isinstance(s, ir.LoadFragment):
            return self.load(s, pad)
        if isinstance(s, ir.MultiplyAccumulate):
            c, a, b = self.expr(s.accumulator), self.expr(s.a), self.expr(s.b)
            return [f"{pad}td_mma(&{c}[{4 * h}], {a}, &{b}[{2 * h}]);" for h in (0, 1)]
        if isinstance(s, ir.AddFragment):
            c = self.expr(s.accumulator)
            return [f"{pad}for (int td_t = 0; td_t < 8; td_t++) "
                    f"{c}[td_t] += {self.expr(s.addend)}[td_t];"]
        if isinstance(s, ir.StoreFragment):
            row, column = (f.format(l=MMA_LANE, t="td_t") for f in ACCUMULATOR_LANES)
            target = f"{s.first.array}[{self.expr(s.first.offset)} + ({row}) * {s.ld} + {column}]"
            return [f"{pad}#pragma unroll",
                    f"{pad}for (int td_t = 0; td_t < 8; td_t++) "
                    f"{target} = {self.expr(s.fragment)}[td_t];"]
        raise TypeError(f"cannot print statement {s!r}")

    def load(self, s: ir.LoadFragment, pad: str) -> list[str]:
        """One ldmatrix.x4 (see the class's doc): the matrices' rows are the tile's memory
        rows, 16 bytes each; where the fragment's rows are those (A row-major, B stored
        along K), lane ``l`` reads memory row ``l % 16`` at column ``8 (l / 16)``, else memory
        row ``8 (l / 16) + l % 8`` at column ``8 ((l / 8) % 2)``, transposed where the
        memory rows run along K (A column-major, B row-major)."""
        kind = next(local.fragment for local in self.kernel.locals
                    if local.name == s.fragment.array)
        transposed = ldmatrix_transposed(kind.use, kind.row_major)
        if s.rounding is not None and transposed:
            return self.load_tf32(s, kind, pad)
        values = 16 // itemsize(self.kernel.dtype)  # to 16 bytes
        row, column = (f.format(l=MMA_LANE, c=values) for f in LDMATRIX_LANES[kind.row_major])
        trans = "_trans" if transposed else ""
        shift, bits = next((local.swizzle, local.swizzle_bits) for local in self.kernel.locals
                           if local.name == s.first.array)
        if shift:
            rows, constant, columns = by_rows(s.first.offset, s.ld)
            lane = (f"{self.expr(rows)} + {row} * {s.ld} + ({self.expr(columns)} ^ "
                    f"(td_swizzle({row} * {s.ld} + {column}, {shift}, {ir.swizzle_chunk(2)}, "
                    f"{(1 << bits) - 1}) "
                    f"- {row} * {s.ld}))")
        else:
            offset, constant = _split_constant(s.first.offset)
            lane = f"{self.expr(offset)} + {row} * {s.ld} + {column}"
        fragment, scale = self.expr(s.fragment), 16 // values  # 16-bit units per value
        if scale > 1:
            lane = f"{scale} * ({lane})"
        lines = [f"{pad}td_ldmatrix{trans}<{2 * scale * constant}>({fragment}, "
                 f"{s.first.array}, {lane});"]
        if s.rounding is not None:  # TF32: each word rounded where it is
            rounded = MMA_ROUNDING[s.rounding].format(f"__uint_as_float({fragment}[td_t])")
            lines.append(f"{pad}for (int td_t = 0; td_t < 4; td_t++) "
                         f"{fragment}[td_t] = {rounded};")
        return lines

    def load_tf32(self, s: ir.LoadFragment, kind: ir.Fragment, pad: str) -> list[str]:
        """A TF32 fragment, a shared load per word (:data:`TF32_LANES`) rounded into its
        register (:data:`MMA_ROUNDING`), where ldmatrix would need to transpose 32-bit
        values, which it cannot."""
        fragment, lines = self.expr(s.fragment), []
        for word in range(MMA_WORDS[kind.use]):
            row, column = (f.format(l=MMA_LANE, w=word) for f in TF32_LANES[kind.use])
            major, minor = (row, column) if kind.row_major else (column, row)
            value = f"{s.first.array}[{self.expr(s.first.offset)} + ({major}) * {s.ld} + {minor}]"
            lines.append(f"{pad}{fragment}[{word}] = {MMA_ROUNDING[s.rounding].format(value)};")
        return lines


class Twin:
    """The OpenCL spelling: the same tile products in private memory (see the module doc)."""

    def __init__(self, kernel: ir.KernelIR, expr: Callable[[ir.Expr], str], value_type: str,
                 lane: str):
        self.kernel, self.expr, self.value_type, self.lane = kernel, expr, value_type, lane
        self.locals = {local.name: local for local in kernel.locals}

    def per_thread(self, local: ir.Local) -> int:
        """Private elements one fragment takes: a thread's share of an accumulator (``m n /
        32`` elements), the A rows they lie in (``k`` elements each), or the B column."""
        m, n, k = local.fragment.shape
        share = m * n // ir.WARP
        return {ir.Use.ACCUMULATOR: share, ir.Use.A: share * k, ir.Use.B: k}[local.fragment.use]

    def declare(self, local: ir.Local) -> str:
        return f"{self.value_type} {local.name}[{local.size * self.per_thread(local)}];"

    def _base(self, fragment: ir.Load) -> tuple[ir.Local, str]:
        """The fragment's Local and the C text of its first private element."""
        local = self.locals[fragment.array]
        return local, self.expr(ir.Binary(ir.Op.MUL, fragment.offset,
                                          ir.Int(self.per_thread(local))))

    def _row(self, n: int) -> ir.Expr:
        """The tile row of a thread's accumulator element ``td_t``: element ``lane + 32 td_t``
        of the row-major m x n tile lies in row ``lane / n + (32 / n) td_t``, column
        ``lane % n`` (n divides 32)."""
        return ir.Binary(ir.Op.ADD, ir.Binary(ir.Op.DIV, ir.Var(self.lane), ir.Int(n)),
                         ir.Binary(ir.Op.MUL, ir.Int(ir.WARP // n), ir.Var("td_t")))

    def _column(self, n: int) -> ir.Expr:
        return ir.Binary(ir.Op.MOD, ir.Var(self.lane), ir.Int(n))

    def stmt(self, s: ir.Stmt, pad: str) -> list[str]:
        if isinstance(s, (ir.FillFragment, ir.AddFragment)):
            return self.elementwise(s, pad)
        if isinstance(s, ir.LoadFragment):
            return self.load(s, pad)
        if isinstance(s, ir.MultiplyAccumulate):
            return self.multiply(s, pad)
        if isinstance(s, ir.StoreFragment):
            local, base = self._base(s.fragment)
            n = local.fragment.shape[1]
            target = _tile_element(s.first, self._row(n), self._column(n), s.ld, True)
            return self._each(local, pad, f"{self.expr(target)} = "
                                          f"{s.fragment.array}[{base} + td_t];")
        raise TypeError(f"cannot print statement {s!r}")

    def elementwise(self, s: ir.FillFragment | ir.AddFragment, pad: str) -> list[str]:
        """A fill (``= value``) or an addition of another accumulator (``+= addend``), on a
        thread's share of the elements."""
        target = s.fragment if isinstance(s, ir.FillFragment) else s.accumulator
        local, base = self._base(target)
        if isinstance(s, ir.FillFragment):
            update = f"= {self.expr(s.value)}"
        else:
            update = f"+= {s.addend.array}[{self._base(s.addend)[1]} + td_t]"
        return self._each(local, pad, f"{target.array}[{base} + td_t] {update};")

    def load(self, s: ir.LoadFragment, pad: str) -> list[str]:
        """A's rows of the thread's accumulator elements (``td_t``: the row's number among
        them; ``td_k``: the column), or B's column of them (``td_t``: the row)."""
        local, base = self._base(s.fragment)
        kind = local.fragment
        n, k = kind.shape[1], kind.shape[2]
        if kind.use is ir.Use.A:
            source = _tile_element(s.first, self._row(n), ir.Var("td_k"), s.ld, kind.row_major)
            target = f"{s.fragment.array}[{base} + td_t * {k} + td_k]"
            loops = [f"for (int td_t = 0; td_t < {self.per_thread(local) // k}; td_t++)",
                     f"for (int td_k = 0; td_k < {k}; td_k++)"]
        else:
            source = _tile_element(s.first, ir.Var("td_t"), self._column(n), s.ld,
                                   kind.row_major)
            target = f"{s.fragment.array}[{base} + td_t]"
            loops = [f"for (int td_t = 0; td_t < {k}; td_t++)"]
        value: ir.Expr = source if s.rounding is None else ir.Call(s.rounding, (source,))
        return [f"{pad}{' '.join(loops)} {target} = {self.expr(value)};"]

    def _each(self, local: ir.Local, pad: str, statement: str) -> list[str]:
        """``statement`` for each private element ``td_t`` of one of ``local``'s fragments."""
        return [f"{pad}for (int td_t = 0; td_t < {self.per_thread(local)}; td_t++) {statement}"]

    def multiply(self, s: ir.MultiplyAccumulate, pad: str) -> list[str]:
        """Each accumulator element of the thread plus its A row times its B column."""
        c_local, c = self._base(s.accumulator)
        _, a = self._base(s.a)
        _, b = self._base(s.b)
        k = c_local.fragment.shape[2]
        return [f"{pad}for (int td_t = 0; td_t < {self.per_thread(c_local)}; td_t++) {{",
                f"{pad}  {self.value_type} td_s = {s.accumulator.array}[{c} + td_t];",
                f"{pad}  for (int td_k = 0; td_k < {k}; td_k++) td_s = fma("
                f"{s.a.array}[{a} + td_t * {k} + td_k], {s.b.array}[{b} + td_k], td_s);",
                f"{pad}  {s.accumulator.array}[{c} + td_t] = td_s;",
                f"{pad}}}"]


def beside_swizzle(offset: ir.Expr, shift: int, bits: int = 3) -> tuple[ir.Expr, ir.Expr]:
    """``offset`` in a tile swizzled by ``shift`` (XOR of ``bits`` bits) as ``high + low``,
    ``high`` its terms that are multiples of ``2 ** (shift + bits)``: adding them moves no bit
    the swizzle reads or changes, so ``swizzled(offset) = high + swizzled(low)`` and the XOR,
    of ``low`` alone, stays out of what changes per step (a buffer's offset)."""
    unit = 1 << (shift + bits)
    terms, constant = ir.affine(offset)
    high = [times(c, t) for t, c in terms.items() if c % unit == 0]
    low = [times(c, t) for t, c in terms.items() if c % unit]
    return (plus(*high, ir.Int(constant - constant % unit)),
            plus(*low, ir.Int(constant % unit)))


def by_rows(offset: ir.Expr, ld: int) -> tuple[ir.Expr, int, ir.Expr]:
    """A fragment's first element ``offset`` in a tile of rows ``ld`` apart as the rows'
    variable part, their constant (multiples of ``ld``) and the column: ``offset`` is their
    sum. In a swizzled tile (:func:`ir.swizzled`, rows of 32 elements or more: the strategy's
    ``SWIZZLED_ROW``) a fragment starts at a multiple of 16 rows (its variable rows' terms
    are multiples of ``16 ld``) and of 16 columns, so the XOR of its lane's element depends
    on the lane's row alone and applies to the column:
    ``swizzled(offset + r ld + c) = rows + constant + r ld + (column ^ (swizzled(r ld + c)
    - r ld))``, every term but the rows' loop-invariant (tests/test_mma_sync.py checks it)."""
    terms, constant = ir.affine(offset)
    rows = [times(c, t) for t, c in terms.items() if c % (16 * ld) == 0]
    columns = [times(c, t) for t, c in terms.items() if c % (16 * ld)]
    return plus(*rows), constant - constant % ld, plus(ir.Int(constant % ld), *columns)


def _split_constant(offset: ir.Expr) -> tuple[ir.Expr, int]:
    """``offset`` as a variable part and a non-negative constant, their sum."""
    terms, constant = ir.affine(offset)
    if constant <= 0:
        return offset, 0
    return plus(*(times(c, t) for t, c in terms.items())), constant


def _tile_element(first: ir.Load, row: ir.Expr, column: ir.Expr, ld: int,
                  row_major: bool) -> ir.Load:
    """Element (``row``, ``column``) of the fragment's tile that starts at ``first``: at
    ``row * ld + column`` from it in a row-major tile, ``column * ld + row`` in a column-major
    one."""
    major, minor = (row, column) if row_major else (column, row)
    return ir.Load(first.array, ir.Binary(ir.Op.ADD, first.offset, ir.Binary(
        ir.Op.ADD, ir.Binary(ir.Op.MUL, major, ir.Int(ld)), minor)))

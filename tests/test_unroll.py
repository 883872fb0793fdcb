"""Unrolling in the kernel IR (treduda.codegen.unroll): isl scans register tiles as loops, the
pass makes one copy per register with constant indices and the guards isl would have printed
for it, and the kernels still match numpy.einsum on PoCL with tiles that the sizes cut."""

from __future__ import annotations

import pytest
from conftest import plus, times

import treduda
from treduda.codegen import ir
from treduda.codegen.unroll import unroll, unroll_uneven
from treduda.polyhedral import ast_build

BX, TX = ir.Index(ir.Builtin.BLOCK_ID, 0), ir.Index(ir.Builtin.THREAD_ID, 0)
TY = ir.Index(ir.Builtin.THREAD_ID, 1)
C = ir.Var("c")


def const(value: int) -> ir.Int:
    return ir.Int(value)



def unrolled(condition: ir.Expr, known: dict) -> tuple[ir.Stmt, ...]:
    """``for (c = 0; condition; c++) acc[c] = 0`` unrolled over c = 0..7."""
    loop = ir.For("c", const(0), condition, const(1),
                  ir.Assign(ir.Load("acc", C), "=", ir.Float(0.0)))
    kernel = ir.KernelIR(name="k", dtype="float32", index_bits=32, params=(), locals=(),
                         body=ir.Block((loop,)))
    return unroll(kernel, {"c": (0, 7)}, known).body.body


def stores(s: ir.Stmt) -> list[int]:
    return [c.target.offset.value for c in ir.nested(s) if isinstance(c, ir.Assign)]


def test_an_iteration_that_every_thread_runs_has_no_guard_and_the_last_has_isls():
    """A cyclic tile of 8 x 16 threads crossing the end of 376 values: isl bounds the loop by
    ``c <= min(7, -8 * bx - (tx + 8) / 16 + 23)``; every block of 0..2 runs c <= 6, and c = 7
    only where ``128 * bx + tx + 112 <= 375``, which isl prints ``128 * bx + tx <= 263``."""
    bound = ir.Binary(ir.Op.MIN, const(7), plus(times(-8, BX), ir.Neg(ir.Binary(
        ir.Op.DIV, plus(TX, const(8)), const(16))), const(23)))
    body = unrolled(ir.Binary(ir.Op.LE, C, bound), {BX: (0, 2), TX: (0, 15)})
    assert [stores(s) for s in body] == [[n] for n in range(8)]
    assert all(isinstance(s, ir.Assign) for s in body[:7])
    assert body[7] == ir.If(ir.Binary(ir.Op.LE, plus(times(128, BX), TX), const(263)),
                            ir.Assign(ir.Load("acc", const(7)), "=", ir.Float(0.0)))


def test_iterations_with_equal_guards_share_one():
    """Adjacent registers, 8 per thread of 381 values: ``c <= 380 - 32 * bx - 8 * tx`` holds
    for c = 5, 6 and 7 exactly where ``4 * bx + tx <= 46`` (the coefficients' divisor taken
    out), so the three share one guard, as in isl's unrolled code."""
    bound = plus(times(-32, BX), times(-8, TX), const(380))
    body = unrolled(ir.Binary(ir.Op.LE, C, bound), {BX: (0, 11), TX: (0, 3)})
    assert [type(s) for s in body] == [ir.Assign] * 5 + [ir.If]
    guard = body[5]
    assert guard.condition == ir.Binary(ir.Op.LE, plus(times(4, BX), TX), const(46))
    assert stores(guard) == [5, 6, 7]


def test_a_guard_that_one_term_decides_is_a_bound_on_it():
    """``32 * (bx % 12) + tx <= 348 - 16 * c`` with 16 threads: for c = 0 it is
    ``bx % 12 <= 10`` whatever the thread; c = 1 holds for some threads of block 10."""
    block = ir.Binary(ir.Op.MOD, BX, const(12))
    bound = plus(times(-32, block), ir.Neg(TX), const(348))
    condition = ir.Binary(ir.Op.LE, times(16, C), bound)
    body = unrolled(condition, {BX: (0, 47), TX: (0, 15)})
    assert body[0].condition == ir.Binary(ir.Op.LE, block, const(10))
    assert body[1].condition == ir.Binary(ir.Op.LE, plus(times(32, block), TX), const(332))


def test_without_known_ranges_every_cut_iteration_keeps_its_guard():
    """Symbolic sizes: nothing decides ``c <= n - 1 - tx``, each iteration is guarded."""
    n = ir.Var("n")
    bound = plus(n, ir.Neg(TX), const(-1))
    body = unrolled(ir.Binary(ir.Op.LE, C, bound), {})
    assert [type(s) for s in body] == [ir.If] * 8
    assert body[2].condition == ir.Binary(ir.Op.LE, TX, plus(n, const(-3)))


def test_a_loop_with_a_step_runs_the_values_it_reaches():
    """``for (c = tx % 2; c <= 7; c += 2)``: each thread runs every other register, from
    its parity on."""
    loop = ir.For("c", ir.Binary(ir.Op.MOD, TX, const(2)), ir.Binary(ir.Op.LE, C, const(7)),
                  const(2), ir.Assign(ir.Load("acc", C), "=", ir.Float(0.0)))
    kernel = ir.KernelIR(name="k", dtype="float32", index_bits=32, params=(), locals=(),
                         body=loop)
    body = unroll(kernel, {"c": (0, 7)}, {TX: (0, 3)}).body.body
    assert all(isinstance(s, ir.If) for s in body)
    for thread in range(4):
        run = [v for s in body if ir.evaluate(s.condition, {}, (thread, 0, 0))
               for v in stores(s.then)]
        assert run == list(range(thread % 2, 8, 2))


def register_accesses(kernel: treduda.Kernel) -> list[ir.Expr]:
    """The offsets of every access to an accumulator of the kernel's IR (preloaded registers
    are indexed by the copy loop, which the C compiler unrolls)."""
    built = kernel.built.kernel
    registers = set(kernel.program.accumulators)
    found = []

    def visit(e: ir.Expr) -> None:
        if isinstance(e, ir.Load) and e.array in registers:
            found.append(e.offset)
        for child in ir.children(e):
            visit(child)
        if isinstance(e, ir.Load):
            visit(e.offset)

    for s in ir.nested(built.body):
        if isinstance(s, ir.Assign):
            visit(s.target)
            visit(s.value)
        elif isinstance(s, ir.VectorStore):
            for value in s.values:
                visit(value)
    return found


GEMM = "C[i,j] = A[i,k] * B[k,j]"
CASES = {
    "cyclic": (GEMM, {"i": 37, "j": 45, "k": 13},
               {"order": "j,i", "block_x": 8, "reg_x": 4, "block_y": 4, "reg_y": 8, "step": 8}),
    "adjacent": (GEMM, {"i": 37, "j": 45, "k": 13},
                 {"order": "j,i", "block_x": 4, "reg_x": 8, "assign_x": "adjacent",
                  "block_y": 8, "reg_y": 2, "assign_y": "adjacent", "step": 4}),
    "grouped": ("C[a,b,c] = A[a,k,c] * B[k,b]", {"a": 5, "b": 11, "c": 7, "k": 9},
                {"order": "c*b,a", "block_x": 8, "reg_x": 4, "block_y": 4, "reg_y": 2,
                 "step": 4}),
    "three_axes": ("C[a,b,c] = A[a,k,b] * B[k,c]", {"a": 9, "b": 13, "c": 6, "k": 10},
                   {"order": "c,b,a", "block_x": 4, "reg_x": 2, "block_y": 4, "reg_y": 4,
                    "block_z": 2, "reg_z": 2, "step": 4}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("strategy", ["tiled", "tiled+staged"])
def test_register_tiles_cut_by_the_sizes_match_einsum_with_constant_indices(case, strategy):
    expression, sizes, params = CASES[case]
    staged = {"preload": True, "double_buffer": True} if strategy == "tiled+staged" else {}
    kernel = treduda.compile(expression, sizes, strategy=strategy, params={**params, **staged})
    offsets = register_accesses(kernel)
    assert offsets and all(isinstance(o, ir.Int) for o in offsets)
    assert kernel.verify().ok


def test_a_symbolic_kernel_unrolls_its_tile_and_guards_each_register():
    kernel = treduda.compile(GEMM, symbolic=True, strategy="tiled",
                             params={"order": "j,i", "block_x": 8, "reg_x": 4, "block_y": 4,
                                     "reg_y": 2, "step": 8})
    assert all(isinstance(o, ir.Int) for o in register_accesses(kernel))
    for sizes in ({"i": 9, "j": 45, "k": 7}, {"i": 8, "j": 32, "k": 16}):
        assert kernel.verify(sizes).ok


def copy_rounds(bound: ir.Expr, unrolled: ir.Unroll = ir.Unroll.FULL) -> ir.For:
    """``for (c = 0; c <= bound; c++) A_sh[t_y / 2 + 2 c] = A[..]``: rows of a tile dealt to
    thread rows two apart (the copy loop of tccg_38's pick, whose 11 rows go to 2 rows of
    threads: rows 0, 2, .., 10 to t_y / 2 = 0, rows 1, .., 9 to t_y / 2 = 1)."""
    row = plus(ir.Binary(ir.Op.DIV, TY, const(2)), times(2, C))
    return ir.For("c", const(0), ir.Binary(ir.Op.LE, C, bound), const(1),
                  ir.Assign(ir.Load("A_sh", row), "=", ir.Load("A", row)), unrolled)


def evened(loop: ir.Stmt, known: dict) -> ir.Stmt:
    kernel = ir.KernelIR(name="k", dtype="float32", index_bits=32, params=(), locals=(),
                         body=loop)
    return unroll_uneven(kernel, known).body


# isl's bound of the rounds above: c <= 5 - (t_y + 2) / 4, i.e. 6 rounds for t_y <= 1, 5 else
UNEVEN = plus(const(5), ir.Neg(ir.Binary(ir.Op.DIV, plus(TY, const(2)), const(4))))


def test_a_copy_that_threads_repeat_unevenly_is_unrolled_with_its_last_round_guarded():
    body = evened(copy_rounds(UNEVEN), {TY: (0, 3)})
    assert isinstance(body, ir.Block) and len(body.body) == 6
    *every, last = body.body
    assert all(isinstance(s, ir.Assign) for s in every)  # rounds 0..4: every thread, no test
    assert isinstance(last, ir.If) and stores_rows(last.then) == [10]
    assert [ir.evaluate(last.condition, {}, (0, ty, 0)) for ty in range(4)] == [1, 1, 0, 0]
    for ty in range(4):  # each thread row copies the rows it copied in the loop
        rows = [r for s in body.body
                if not isinstance(s, ir.If) or ir.evaluate(s.condition, {}, (0, ty, 0))
                for r in stores_rows(s.then if isinstance(s, ir.If) else s, ty)]
        assert rows == list(range(ty // 2, 11, 2))


def stores_rows(s: ir.Stmt, ty: int = 0) -> list[int]:
    return [ir.evaluate(c.target.offset, {}, (0, ty, 0)) for c in ir.nested(s)
            if isinstance(c, ir.Assign)]


@pytest.mark.parametrize("loop", [
    copy_rounds(UNEVEN, ir.Unroll.COMPILER),  # the compiler's to decide
    copy_rounds(const(5)),  # the same rounds in every thread: nvcc unrolls it without tests
    copy_rounds(plus(UNEVEN, ir.Var("s"))),  # a bound that reads another loop's iterator
])
def test_loops_that_are_not_uneven_copies_stay_loops(loop):
    assert evened(loop, {TY: (0, 3)}) == loop


def uneven_loops(kernel: treduda.Kernel) -> list[ir.For]:
    """The loops of the kernel's IR that nvcc is asked to unroll and whose bounds read thread
    ids: nvcc unrolls them by four with a remainder loop, branches in the step loop."""
    def reads_thread(e: ir.Expr) -> bool:
        return e in (TX, TY) or any(reads_thread(c) for c in ir.children(e))

    return [s for s in ir.nested(kernel.built.kernel.body) if isinstance(s, ir.For)
            and s.unroll is ir.Unroll.FULL and reads_thread(ir.Binary(ir.Op.AND, s.start,
                                                                      s.condition))]


# Tiles of 16 x 16 in steps of 16 over sizes they do not divide: the short last step and the
# edge blocks copy fewer values than 32 threads' rounds cover, so isl bounds those copy loops
# by thread ids (``c <= 7 - (t_y + 2) / 4``; the test checks each case has some)
COPIES = {"plain": {}, "async": {"async_copy": True},
          "double": {"async_copy": True, "double_buffer": True},
          "preload": {"preload": True}, "split": {"async_copy": True, "split": 2}}
CONTRACTIONS = {
    "gemm": (GEMM, {"i": 45, "j": 70, "k": 40}),
    "scaled": ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", {"i": 37, "j": 66, "k": 47}),
    "accumulate": ("C[i,j] += A[i,k]*B[k,j]", {"i": 69, "j": 35, "k": 45}),
}
SAMPLE = {("gemm", "C", "async"), ("gemm", "C", "split"), ("scaled", "F", "plain"),
          ("scaled", "C", "double"), ("accumulate", "F", "preload"),
          ("accumulate", "C", "split")}


@pytest.mark.parametrize(("name", "layout", "how"), [
    pytest.param(name, layout, how, marks=() if (name, layout, how) in SAMPLE
                 else pytest.mark.matrix)
    for name in CONTRACTIONS for layout in "CF" for how in COPIES
    # beta * C is no sum of parts; column-major GEMM's tiles of A and B split evenly
    if not (name == "scaled" and how == "split") and (name, layout) != ("gemm", "F")])
def test_uneven_copies_unrolled_match_einsum(name, layout, how):
    expression, sizes = CONTRACTIONS[name]
    params = {"order": "j,i" if layout == "C" else "i,j", "block_x": 8, "reg_x": 2,
              "block_y": 4, "reg_y": 4, "step": 16, "unroll": True, "stage": "A,B",
              **COPIES[how]}
    treduda.api._forget()  # as a new process, without the kernels built before
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ast_build, "unroll_uneven", lambda kernel, known: kernel)
        loops = uneven_loops(treduda.compile(expression, sizes, layout=layout, cache=False,
                                             strategy="tiled+staged", params=params))
    treduda.api._forget()
    assert loops  # the case has uneven copies to unroll
    kernel = treduda.compile(expression, sizes, layout=layout, strategy="tiled+staged",
                             cache=False, params=params)
    assert not uneven_loops(kernel)
    assert kernel.verify().ok
    assert kernel.verify(backend="emulator").ok

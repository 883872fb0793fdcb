"""The short last step peeled off the step loop (treduda.codegen.unroll.peel, issue 38): the
loop over full steps tests nothing, the short step runs once after it; the kernels still match
numpy.einsum on PoCL and run hazard-free in the emulator, in both layouts, with alpha/beta and
``+=``, synchronous and asynchronous copies."""

from __future__ import annotations

import pytest

import treduda
from treduda.codegen import ir
from treduda.codegen.unroll import peel
from treduda.polyhedral import ast_build
from treduda.run.counters import main_loop

C = ir.Var("c")
TX = ir.Index(ir.Builtin.THREAD_ID, 0)
# a step of 8 over an extent of 30 (c = 0..3): the last step holds 6 values
FULL = ir.Binary(ir.Op.GE, ir.Binary(ir.Op.SUB, ir.Int(29), ir.Binary(ir.Op.MUL, ir.Int(8), C)),
                 ir.Int(7))


def accumulate(offset: int) -> ir.Assign:
    return ir.Assign(ir.Load("acc", ir.Int(offset)), "+=", ir.Load("A", C))


def steps(body: ir.Stmt, last: int = 3) -> ir.For:
    return ir.For("c", ir.Int(0), ir.Binary(ir.Op.LE, C, ir.Int(last)), ir.Int(1),
                  ir.Block((ir.Barrier(), body)))


def peeled(body: ir.Stmt) -> ir.Stmt:
    kernel = ir.KernelIR(name="k", dtype="float32", index_bits=32, params=(), locals=(),
                         body=body)
    return peel(kernel, {TX: (0, 15)}).body


def test_the_short_last_step_runs_after_the_loop():
    loop = steps(ir.If(FULL, accumulate(0), accumulate(1)))
    result = peeled(loop)
    assert isinstance(result, ir.Block) and len(result.body) == 3  # loop, then c = 3 inline
    first, *last = result.body
    assert first == steps(accumulate(0), last=2)  # c = 0..2: 29 - 8c >= 7 holds, no test
    assert last == [ir.Barrier(), ir.Assign(ir.Load("acc", ir.Int(1)), "+=",
                                            ir.Load("A", ir.Int(3)))]


def test_a_first_step_that_differs_runs_before_the_loop():
    waits = ir.If(ir.Binary(ir.Op.GE, C, ir.Int(1)), accumulate(0))  # a pipeline's prologue
    result = peeled(steps(waits, last=5))
    assert result.body == (ir.Barrier(),  # c = 0: nothing to wait for
                           ir.For("c", ir.Int(1), ir.Binary(ir.Op.LE, C, ir.Int(5)), ir.Int(1),
                                  ir.Block((ir.Barrier(), accumulate(0)))))


@pytest.mark.parametrize("loop", [
    steps(ir.If(ir.Binary(ir.Op.LE, TX, ir.Int(9)), accumulate(0))),  # the same in every step
    ir.For("c", ir.Int(0), ir.Binary(ir.Op.LE, C, ir.Int(3)), ir.Int(1),
           ir.If(FULL, accumulate(0), accumulate(1))),  # no barrier: unswitch's business
    ir.For("c", ir.Int(0), ir.Binary(ir.Op.LE, C, ir.Var("n")), ir.Int(1),
           ir.Block((ir.Barrier(), ir.If(FULL, accumulate(0))))),  # a bound of the sizes
])
def test_loops_with_nothing_to_peel_stay_as_they_are(loop):
    assert peeled(loop) == loop


GEMM = "C[i,j] = A[i,k]*B[k,j]"
CONTRACTIONS = {
    "gemm": (GEMM, {"i": 45, "j": 70, "k": 21}),
    "scaled": ("C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]", {"i": 37, "j": 66, "k": 30}),
    "accumulate": ("C[i,j] += A[i,k]*B[k,j]", {"i": 69, "j": 35, "k": 29}),
}
TILES = {"block_x": 8, "reg_x": 4, "block_y": 4, "reg_y": 2, "step": 8, "unroll": True,
         "stage": "A,B"}


def reads_the_step(loop: ir.For) -> bool:
    """Whether a guard or loop bound inside ``loop`` reads its iterator (which step it is)."""
    def reads(e: ir.Expr) -> bool:
        return e == ir.Var(loop.iterator) or any(reads(c) for c in ir.children(e))

    return any(isinstance(s, ir.If) and reads(s.condition)
               or isinstance(s, ir.For) and reads(s.condition) for s in ir.nested(loop.body))


def unpeeled(expression, sizes, layout, order, copies) -> ir.For:
    """The main loop of the same kernel built without peeling."""
    treduda.api._forget()  # as a new process: this one keeps the peeled kernel
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ast_build, "peel", lambda kernel, known: kernel)
        kernel = treduda.compile(expression, sizes, layout=layout, strategy="tiled+staged",
                                 cache=False, params={**TILES, "order": order, **copies})
    treduda.api._forget()
    return main_loop(kernel.built.kernel)


COPIES = {"plain": {}, "async": {"async_copy": True},
          "double": {"async_copy": True, "double_buffer": True}}
# by default each contraction, layout and way of copying once; the rest under the matrix marker
SAMPLE = {("gemm", "C", "async"), ("gemm", "F", "double"), ("scaled", "F", "plain"),
          ("scaled", "C", "double"), ("accumulate", "C", "plain"), ("accumulate", "F", "async")}


@pytest.mark.parametrize(("name", "layout", "how"), [
    pytest.param(name, layout, how, marks=() if (name, layout, how) in SAMPLE
                 else pytest.mark.matrix)
    for name in CONTRACTIONS for layout in "CF" for how in COPIES])
def test_peeled_kernels_match_einsum(name, layout, how):
    expression, sizes = CONTRACTIONS[name]
    copies = COPIES[how]
    order = "j,i" if layout == "C" else "i,j"
    kernel = treduda.compile(expression, sizes, layout=layout, strategy="tiled+staged",
                             cache=False, params={**TILES, "order": order, **copies})
    loop = main_loop(kernel.built.kernel)  # the inner blocks' step loop
    assert loop is not None and not reads_the_step(loop)
    assert reads_the_step(unpeeled(expression, sizes, layout, order, copies))
    assert kernel.verify().ok
    assert kernel.verify(backend="emulator").ok

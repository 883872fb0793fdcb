"""Loop unswitching (treduda.codegen.unswitch): the guards of partial tiles and the short last
step leave the compute loop of inner blocks, which runs a copy without them; the kernels still
match numpy.einsum on PoCL, where edge blocks take the guarded copy and inner ones the other.
With fixed sizes the kernel scans full blocks apart, with no guard at all
(treduda.polyhedral.ast_build, issue 38)."""

from __future__ import annotations

import pytest

import treduda
from treduda.codegen import ir
from treduda.codegen.unswitch import unswitch

K = ir.Var("k")
TX = ir.Index(ir.Builtin.THREAD_ID, 0)
EDGE = ir.Binary(ir.Op.LE, TX, ir.Int(5))  # a register's output point inside the tensor
VARYING = ir.Binary(ir.Op.LE, K, ir.Int(3))  # changes with the loop's iterator


def accumulate(offset: int) -> ir.Assign:
    return ir.Assign(ir.Load("acc", ir.Int(offset)), "+=", ir.Load("A", K))


def loop(body: ir.Stmt, condition: ir.Expr | None = None) -> ir.For:
    return ir.For("k", ir.Int(0), condition or ir.Binary(ir.Op.LE, K, ir.Int(7)), ir.Int(1),
                  body, ir.Unroll.FULL)


def kernel(body: ir.Stmt) -> ir.KernelIR:
    return ir.KernelIR(name="k", dtype="float32", index_bits=32, params=(), locals=(),
                       body=body)


def test_invariant_guards_leave_the_loop_and_varying_ones_stay():
    body = ir.Block((accumulate(0), ir.If(EDGE, ir.Block((accumulate(1),
                                                          ir.If(VARYING, accumulate(2)))))))
    result = unswitch(kernel(loop(body))).body
    assert isinstance(result, ir.If) and result.condition == EDGE
    fast, slow = result.then, result.otherwise
    assert slow == loop(body)  # the original, for threads whose point lies outside
    assert [type(s) for s in fast.body.body] == [ir.Assign, ir.Assign, ir.If]
    assert fast.body.body[2].condition == VARYING


def test_a_step_bounded_by_the_extent_gets_a_constant_length():
    end = ir.Binary(ir.Op.SUB, ir.Var("K"), ir.Binary(ir.Op.MUL, ir.Int(8), ir.Var("c")))
    bounded = ir.Binary(ir.Op.LE, K, ir.Binary(ir.Op.MIN, ir.Int(7), end))
    result = unswitch(kernel(loop(accumulate(0), bounded))).body
    assert result.condition == ir.Binary(ir.Op.GE, end, ir.Int(7))
    assert result.then.condition == ir.Binary(ir.Op.LE, K, ir.Int(7))
    assert result.otherwise.condition == bounded


@pytest.mark.parametrize("body", [
    ir.Block((ir.If(EDGE, accumulate(0)), ir.Barrier())),  # threads would wait apart
    ir.If(ir.Binary(ir.Op.LE, ir.Load("acc", ir.Int(0)), ir.Int(0)), accumulate(0)),  # memory
    accumulate(0),  # nothing to decide
])
def test_loops_that_cannot_be_unswitched_stay_as_they_are(body):
    assert unswitch(kernel(loop(body))).body == loop(body)


def test_only_innermost_loops_are_unswitched():
    inner = loop(ir.If(EDGE, accumulate(0)))
    outer = ir.For("c", ir.Int(0), ir.Binary(ir.Op.LE, ir.Var("c"), ir.Int(3)), ir.Int(1),
                   ir.Block((ir.If(EDGE, accumulate(1)), inner)))
    result = unswitch(kernel(outer)).body
    assert isinstance(result, ir.For) and result.body.body[0] == ir.If(EDGE, accumulate(1))
    assert isinstance(result.body.body[1], ir.If) and result.body.body[1].otherwise == inner


GEMM = "C[i,j] = A[i,k] * B[k,j]"
SIZES = {"i": 45, "j": 70, "k": 21}  # no tile divides them; two blocks or more per axis


def compute_loops(k: treduda.Kernel) -> list[ir.If]:
    """The unswitched loops of the kernel that accumulate."""
    return [s for s in ir.nested(k.built.kernel.body)
            if isinstance(s, ir.If) and isinstance(s.then, ir.For)
            and isinstance(s.otherwise, ir.For)
            and any(isinstance(a, ir.Assign) and a.op == "+=" for a in ir.nested(s.then))]


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("strategy", "params"), [
    ("tiled", {}),
    ("tiled+staged", {"stage": "A", "preload": True, "double_buffer": True}),
    ("tiled+staged", {"stage": "A,B", "pad": 1}),
])
@pytest.mark.parametrize("symbolic", [False, True])
def test_unswitched_kernels_match_numpy(layout, strategy, params, symbolic):
    order = "j,i" if layout == "C" else "i,j"
    k = treduda.compile(GEMM, SIZES, layout=layout, strategy=strategy, symbolic=symbolic,
                        params={"order": order, "block_x": 8, "reg_x": 4, "block_y": 4,
                                "reg_y": 2, "step": 8, "unroll": True, **params})
    if symbolic:
        unswitched = compute_loops(k)
        assert unswitched, "the compute loop keeps its guards"
        fast = [s.then for s in unswitched]  # the inner blocks' copy
    else:  # fixed sizes: the whole scan again for the blocks no tensor's end cuts
        split = k.built.kernel.body
        assert isinstance(split, ir.If) and split.otherwise is not None
        fast = [s for s in ir.nested(split.then) if isinstance(s, ir.For)  # innermost ones
                and any(isinstance(a, ir.Assign) and a.op == "+=" for a in ir.nested(s))
                and not any(isinstance(c, ir.For) for c in ir.nested(s.body))]
        assert fast, "no compute loop in the scan of full blocks"
    for s in fast:  # no guard left
        assert not any(isinstance(c, ir.If) for c in ir.nested(s))
    k.verify(SIZES)
    assert not k.hazards(SIZES)


@pytest.mark.parametrize(("sizes", "divergent"), [
    ({"i": 37, "j": 35, "k": 30}, True),  # the short last step: some threads copy no A
    ({"i": 37, "j": 35, "k": 32}, False),  # every step alike: the steps separated
])
def test_the_separate_scan_is_skipped_only_where_it_would_be_thrown_away(
        monkeypatch, sizes, divergent):
    """The scan of full blocks with its steps separated gives barriers to some threads only
    where some thread runs a statement in steps that others skip; foreseen, that scan is not
    made, and the kernel is the one made when it was (and then thrown away)."""
    from treduda.polyhedral import ast_build

    params = {"block_x": 8, "block_y": 4, "reg_x": 2, "reg_y": 2, "step": 4, "stage": "A,B"}
    found = []
    split = ast_build._split_by_thread
    monkeypatch.setattr(ast_build, "_split_by_thread",
                        lambda *args: found.append(split(*args)) or False)
    monkeypatch.setattr(ast_build, "_divergent_barrier",
                        lambda s, check=ast_build._divergent_barrier: found.append(check(s))
                        or found[-1])
    scanned = treduda.compile(GEMM, sizes, strategy="tiled+staged", params=params,
                              cache=False).cuda_source
    assert found == [divergent, divergent]  # foreseen, then found by the scan
    monkeypatch.undo()
    treduda.api._forget()  # as a new process: this one keeps its kernel
    del found[:]
    monkeypatch.setattr(ast_build, "_divergent_barrier",
                        lambda s, check=ast_build._divergent_barrier: found.append(check(s))
                        or found[-1])
    assert treduda.compile(GEMM, sizes, strategy="tiled+staged", params=params,
                           cache=False).cuda_source == scanned
    assert found == ([] if divergent else [False])  # made again, with no scan thrown away

"""The emulator backend: it computes what the kernel IR says (checked against numpy.einsum,
like PoCL), and it reports each kind of hazard, each shown on a kernel built to have it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import EXAMPLES

import treduda
from treduda.codegen import ir
from treduda.errors import HazardError, TredudaError
from treduda.run.emulator import emulate
from treduda.run.launch import Launch

TILED_STAGED = {"block_x": 8, "block_y": 4, "reg_x": 2, "reg_y": 2, "step": 8, "unroll": True,
                "stage": "A,B", "pad": 1}


@pytest.mark.parametrize("name", ["gemm", "gemm_scaled_transposed", "dot", "tccg_3",
                                  "curvature"])
@pytest.mark.parametrize("strategy", ["thread_per_element", "tiled+staged"])
def test_emulator_matches_einsum(name, strategy):
    expression, sizes = EXAMPLES[name]
    kernel = treduda.compile(expression, sizes, strategy=strategy, layout="F")
    assert kernel.verify(backend="emulator").ok
    assert kernel.hazards() == []


def test_emulator_runs_with_user_arrays():
    a, b = np.arange(12.0).reshape(3, 4), np.arange(20.0).reshape(4, 5)
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 3, "j": 5, "k": 4},
                             dtype="float64", strategy="tiled+staged",
                             params={"block_x": 2, "block_y": 2, "step": 4})
    np.testing.assert_array_equal(kernel.run(backend="emulator", A=a, B=b), a @ b)


# Hand-written kernels over one shared array of 4 elements and a block of 4 threads: each has
# exactly one hazard, and its correct twin (where there is one) has none.
TX = ir.Index(ir.Builtin.THREAD_ID, 0)
OUT = ir.Param("C", ir.ParamKind.OUTPUT)


def _kernel(*body: ir.Stmt) -> ir.KernelIR:
    return ir.KernelIR("k", "float32", 32, (OUT,),
                       (ir.Local("S", ir.Space.SHARED, (4,)),
                        ir.Local("R", ir.Space.REGISTER, (2,))), ir.Block(body))


ONE = ir.Float(1.0)


def _store(array: str, offset: ir.Expr, value: ir.Expr = ONE) -> ir.Assign:
    return ir.Assign(ir.Load(array, offset), "=", value)


def _hazards(kernel: ir.KernelIR) -> set[str]:
    launch = Launch("k", (1, 1, 1), (4, 1, 1), (np.zeros(4, np.float32),), 0, (4,), "C")
    return {h.kind for h in emulate(kernel, launch)[1]}


NEIGHBOUR = ir.Binary(ir.Op.MOD, ir.Binary(ir.Op.ADD, TX, ir.Int(1)), ir.Int(4))
HAZARDS = {
    "race": (_store("S", TX), _store("C", TX, ir.Load("S", NEIGHBOUR))),
    "out of bounds": (_store("S", ir.Binary(ir.Op.ADD, TX, ir.Int(1))), ir.Barrier()),
    "uninitialised read": (_store("S", TX), ir.Barrier(),
                           _store("C", TX, ir.Load("R", ir.Int(0)))),
    "divergent barrier": (ir.If(ir.Binary(ir.Op.LT, TX, ir.Int(2)), ir.Barrier()),),
}


@pytest.mark.parametrize("kind", HAZARDS)
def test_each_hazard_is_reported(kind):
    assert _hazards(_kernel(*HAZARDS[kind])) == {kind}


def test_a_barrier_between_write_and_read_removes_the_race():
    write, read = HAZARDS["race"]
    assert _hazards(_kernel(write, ir.Barrier(), read)) == set()


def test_a_raced_kernel_cannot_be_run_on_the_emulator(monkeypatch):
    """Staging with its barriers taken out: the emulator refuses the result and says where."""
    from treduda.strategies import staging_kernel

    monkeypatch.setattr(staging_kernel.Stager, "_sync",
                        _no_barrier(staging_kernel.Stager._sync))
    kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", {"i": 19, "j": 17, "k": 21},
                             strategy="tiled+staged", params=TILED_STAGED, cache=False)
    assert "race" in {h.kind for h in kernel.hazards()}
    with pytest.raises(HazardError, match=r"race on [AB]_sh\[\d+\] \(threads \d+, \d+\)"):
        kernel.verify(backend="emulator")


def _no_barrier(sync):
    def without(self, *args, **kwargs):
        statement, schedule = sync(self, *args, **kwargs)
        return dataclasses.replace(statement, body=ir.Block(())), schedule
    return without


def _reusing(*body: ir.Stmt) -> ir.KernelIR:
    """A kernel whose shared tile T takes over S's memory (as the tensor-core C tile takes
    the operand tiles')."""
    return ir.KernelIR("k", "float32", 32, (OUT,),
                       (ir.Local("S", ir.Space.SHARED, (4,)),
                        ir.Local("T", ir.Space.SHARED, (4,), reuses=("S",))), ir.Block(body))


def test_a_tile_that_reuses_memory_is_written_a_barrier_after_the_last_access_of_it():
    """Each thread reads its neighbour's S, then writes T over S's memory: without a barrier
    between, a neighbour may still be reading; reading S after T was written reads T's
    values. The correct order (S written, barrier, read, barrier, T written) has none."""
    write, read = _store("S", TX), _store("C", TX, ir.Load("S", NEIGHBOUR))
    reuse = _store("T", TX)
    assert _hazards(_reusing(write, ir.Barrier(), read, reuse)) == {"reused memory"}
    assert _hazards(_reusing(write, ir.Barrier(), read, ir.Barrier(), reuse, ir.Barrier(),
                             read)) == {"reused memory"}
    assert _hazards(_reusing(write, ir.Barrier(), read, ir.Barrier(), reuse)) == set()


def _random_expression(rng: np.random.Generator, depth: int) -> ir.Expr:
    """An integer expression of sizes ``n``, ``m``, iterators ``i``, ``j``, thread and block
    ids: every operator (comparisons in conditions), divisions by nonzero constants only (as
    kernels divide)."""
    if depth == 0 or rng.random() < 0.2:
        leaves = [ir.Int(int(rng.integers(-9, 10))), ir.Var("n"), ir.Var("m"), ir.Var("i"),
                  ir.Var("j"), ir.Index(ir.Builtin.THREAD_ID, int(rng.integers(3))),
                  ir.Index(ir.Builtin.BLOCK_ID, int(rng.integers(3)))]
        return leaves[rng.integers(len(leaves))]
    kind = rng.integers(6)
    if kind == 0:
        return ir.Neg(_random_expression(rng, depth - 1))
    if kind == 1:
        compare = [ir.Op.LT, ir.Op.LE, ir.Op.EQ, ir.Op.GE, ir.Op.GT]
        first, second = (ir.Binary(compare[rng.integers(len(compare))],
                                   *(_random_expression(rng, depth - 1) for _ in "lr"))
                         for _ in "ab")
        condition = ir.Binary(ir.Op.AND if rng.random() < 0.5 else ir.Op.OR, first, second)
        return ir.Select(condition, *(_random_expression(rng, depth - 1) for _ in "tf"))
    arithmetic = [ir.Op.ADD, ir.Op.SUB, ir.Op.MUL, ir.Op.DIV, ir.Op.MOD, ir.Op.FLOOR_DIV,
                  ir.Op.MIN, ir.Op.MAX]
    op = arithmetic[rng.integers(len(arithmetic))]
    if op in (ir.Op.DIV, ir.Op.MOD, ir.Op.FLOOR_DIV):
        divisor = int(rng.choice([-7, -3, 1, 2, 4, 5, 16]))
        return ir.Binary(op, _random_expression(rng, depth - 1), ir.Int(divisor))
    return ir.Binary(op, *(_random_expression(rng, depth - 1) for _ in "lr"))


def test_an_evaluator_computes_what_evaluate_does():
    """The emulator's evaluators (:func:`ir.evaluator`: what depends on no loop iterator
    computed once per block) give the values, types and shapes of :func:`ir.evaluate`,
    iterator by iterator, block by block; an iterator as one integer gives every thread
    what the same iterator as an array does."""
    rng = np.random.default_rng(7)
    lane = np.arange(24)
    threads = (lane % 4, lane // 4 % 3, lane // 12)
    sizes = {"n": 13, "m": 6}
    for _ in range(300):
        expr = _random_expression(rng, 4)
        function, varies = ir.evaluator(expr, sizes)
        for block in ((1, 0, 2), (0, 3, 1)):
            memo = {}
            for i, j in ((0, 3), (5, -2), (lane - 7, 4)):  # iterators: scalars or per thread
                env = {**sizes, "i": i, "j": j}
                expected = ir.evaluate(expr, env, threads, block)
                got = function(env, threads, block, memo)
                assert type(got) is type(expected)
                assert np.array_equal(got, expected) and np.shape(got) == np.shape(expected)
                assert np.result_type(got) == np.result_type(expected)
                # an iterator the emulator keeps as one integer: the values of an array of it
                spread = {**env, "i": np.broadcast_to(i, lane.shape).copy()}
                assert np.array_equal(np.broadcast_to(got, lane.shape), np.broadcast_to(
                    ir.evaluate(expr, spread, threads, block), lane.shape))
        assert varies == any(isinstance(e, ir.Var) and e.name in "ij" for e in _nodes(expr))


def test_an_evaluator_without_a_value_raises_what_evaluate_raises():
    """An index expression of a size the kernel was not given (a symbolic kernel) fails in
    the emulator's evaluator with :func:`ir.evaluate`'s message, naming the variable."""
    expr = ir.Binary(ir.Op.ADD, ir.Var("i"), ir.Var("n"))
    function, _ = ir.evaluator(expr, {"m"})
    with pytest.raises(TredudaError, match="no value for 'n'"):
        function({"i": 1}, (0, 0, 0), (0, 0, 0), {})


def _nodes(e: ir.Expr):
    yield e
    for child in ir.children(e):
        yield from _nodes(child)

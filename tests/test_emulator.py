"""The emulator backend: it computes what the kernel IR says (checked against numpy.einsum,
like PoCL), and it reports each kind of hazard, each shown on a kernel built to have it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import EXAMPLES

import treduda
from treduda.codegen import ir
from treduda.errors import HazardError
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

"""Idle threads clamped (treduda.codegen.idle): a thread whose whole register tile lies past a
tensor's end (tccg_04: b = 24 on 4 threads x 8 registers) computes a working thread's values
instead of branching around the FMAs of a step loop with barriers; its registers are never
stored. Worked by hand on a small IR, then verified on PoCL against numpy.einsum (partial
tiles), run hazard-free in the emulator, and read in the SASS of tccg_04's pick (issue 38)."""

from __future__ import annotations

import pytest

import treduda
from treduda.codegen import ir
from treduda.codegen.idle import clamp_idle
from treduda.run.counters import LOAD
from treduda.run.nvcc import nvcc_available
from treduda.run.sass import find_disassembler
from treduda.suites import load

TX = ir.Index(ir.Builtin.THREAD_ID, 0)
WORKS = ir.Binary(ir.Op.LE, TX, ir.Int(2))  # thread x = 3 holds b = 24 .. 31 of 24
CLAMPED = ir.Binary(ir.Op.MIN, TX, ir.Int(2))
K = ir.Var("k")


def multiply(tx: ir.Expr) -> ir.Assign:
    """acc[0] += A_sh[k] * B_sh[25 k + 8 tx]: a register from two shared tiles."""
    b = ir.Binary(ir.Op.ADD, ir.Binary(ir.Op.MUL, ir.Int(25), K),
                  ir.Binary(ir.Op.MUL, ir.Int(8), tx))
    return ir.Assign(ir.Load("acc", ir.Int(0)), "+=",
                     ir.Binary(ir.Op.MUL, ir.Load("A_sh", K), ir.Load("B_sh", b)))


def step(body: ir.Stmt) -> ir.For:
    return ir.For("k", ir.Int(0), ir.Binary(ir.Op.LE, K, ir.Int(19)), ir.Int(1),
                  ir.Block((ir.Barrier(), body)))


STORE = ir.Assign(ir.Load("C", TX), "=", ir.Load("acc", ir.Int(0)))
INIT = ir.Assign(ir.Load("acc", ir.Int(0)), "=", ir.Float(0.0))
LOCALS = (ir.Local("acc", ir.Space.REGISTER, (1,)), ir.Local("A_sh", ir.Space.SHARED, (20,)),
          ir.Local("B_sh", ir.Space.SHARED, (100,)))


def kernel(*body: ir.Stmt) -> ir.KernelIR:
    return ir.KernelIR(name="k", dtype="float32", index_bits=32, params=(), locals=LOCALS,
                       body=ir.Block(body))


def test_the_guard_of_a_register_only_body_becomes_a_clamp_and_the_store_keeps_it():
    before = kernel(ir.If(WORKS, INIT), step(ir.If(WORKS, multiply(TX))), ir.If(WORKS, STORE))
    # thread 3 reads B_sh[25 k + 16] as thread 2 does (never B_sh[25 k + 24], past the tile
    # for k = 3: 99 of 100 is its last element), into an acc nobody stores
    assert clamp_idle(before).body == ir.Block(
        (INIT, step(multiply(CLAMPED)), ir.If(WORKS, STORE)))


@pytest.mark.parametrize("body", [
    # the register is stored unguarded: thread 3's values would be seen
    (ir.If(WORKS, INIT), step(ir.If(WORKS, multiply(TX))), STORE),
    # the guarded body reads global memory: idle threads would add loads
    (step(ir.If(WORKS, ir.Assign(ir.Load("acc", ir.Int(0)), "=", ir.Load("A", TX)))),),
    # it writes shared memory (a copy): idle threads would write past the tile
    (step(ir.If(WORKS, ir.Assign(ir.Load("B_sh", TX), "=", ir.Float(1.0)))),),
    # a guard on a loop iterator, and one outside any loop with barriers
    (step(ir.If(ir.Binary(ir.Op.LE, K, ir.Int(2)), multiply(TX))),),
    (ir.If(WORKS, multiply(TX)), ir.If(WORKS, STORE)),
])
def test_guards_whose_idle_threads_could_be_seen_stay(body):
    assert clamp_idle(kernel(*body)) == kernel(*body)


TCCG04 = next(r for r in load("tccg_fp32") if r.id == "tccg_04")
# tccg_04's pick before codegen.idle (b on x, a on y, d on z, adjacent): the search now
# prefers its z-cyclic twin (96 registers, 76.9% FFMA), which the model cannot tell apart
PICK04 = {"order": "b,a,d", "stage": "A,B", "block_x": 4, "reg_x": 8, "assign_x": "adjacent",
          "block_y": 8, "reg_y": 1, "assign_y": "cyclic", "block_z": 4, "reg_z": 8,
          "assign_z": "adjacent", "step": 4, "split": 1, "preload": True,
          "double_buffer": False, "pad": 1, "async_copy": False, "unroll": True}
# b = 12 on 4 threads x 4: thread 3 idle; no tile divides a, d or e (partial blocks and step);
# unpadded, so that B's rows stay aligned and the kernel IR reads them in 16-byte vectors
SMALL = {"a": 11, "b": 12, "c": 3, "d": 37, "e": 10}


def guards_in_steps(k: treduda.Kernel) -> list[ir.If]:
    """Tests of thread ids alone inside the kernel's loops with barriers."""
    return [s for loop in ir.nested(k.built.kernel.body)
            if isinstance(loop, ir.For) and ir.has_barrier(loop.body)
            for s in ir.nested(loop.body) if isinstance(s, ir.If)
            and ir.reads_thread_id(s.condition) and "block" not in str(s.condition)
            and not any(isinstance(c, ir.Assign) and c.target.array.endswith("_sh")
                        for c in ir.nested(s.then))]


@pytest.mark.parametrize(("statement", "params"), [
    ("C[a,b,c,d] = alpha * A[d,e,c,a] * B[b,e] + beta * C[a,b,c,d]", {}),
    pytest.param("C[a,b,c,d] += A[d,e,c,a] * B[b,e]",
                 {"preload": False, "double_buffer": True, "async_copy": True},
                 marks=pytest.mark.matrix),
])
def test_clamped_kernels_verify_and_run_hazard_free(statement, params):
    k = treduda.compile(statement, SMALL, layout="F", strategy="tiled+staged",
                        params={**PICK04, "reg_x": 4, "pad": 0, **params})
    assert guards_in_steps(k) == []  # the FMAs' guard became a clamp
    assert k.verify().ok
    assert k.hazards() == []
    loads = [t for t in k.counters().traffic if t.operation == LOAD and t.array == "B_sh"]
    assert loads and all((t.width, t.ways) == (16, 1) for t in loads)  # thread 3's too


@pytest.mark.matrix
@pytest.mark.skipif(not (nvcc_available() and find_disassembler()),
                    reason="nvcc and nvdisasm (CUDA toolkit) not installed")
def test_tccg04s_main_loop_has_no_branch_around_its_fmas():
    # sm_90, CUDA 13: guarded, 330 instructions (BSSY, BRA, BSYNC and the shared tiles'
    # addresses recomputed after the branch), 77.6% FFMA; clamped, 312 and 82.1%
    report = treduda.compile(TCCG04.expression, TCCG04.sizes, layout="F",
                             strategy="tiled+staged", params=PICK04).sass_report()
    assert "BSSY" not in report.main_loop_opcodes
    assert report.main_loop_shared_load_widths[128] == 14
    assert report.ffma_share > 0.80

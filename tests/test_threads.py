"""Many threads at once: every entry point, called by 8 threads together on their own data
(on PoCL), gives each thread numpy.einsum's result, with shapes the threads share (one kernel,
plan or self-tuning state used by all) and shapes that differ (kernels made side by side).

Before plans kept each call's intermediates apart, 8 threads calling one 3-operand contract
got 19 of 40 results wrong: a plan had one scratch array per intermediate, shared by all."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import treduda
from treduda.once import once_per_key
from treduda.tuning import incremental, policy

THREADS = 8
ROUNDS = 3
VARIANTS = 2  # sets of shapes: the threads n and n + 2 share theirs
# tccg_14's shape (a small output, a long sum), split into 4 parts added in a fixed order
SHORT_AND_DEEP = "C[a,b] = A[c,a,d]*B[d,c,b]"
SPLIT = {"order": "a,b", "block_x": 8, "reg_x": 1, "block_y": 4, "reg_y": 1, "step": 4,
         "split": 4}
PROGRAM = "T[i,k] = A[i,j]*B[j,k]\nD[i,l] = T[i,k]*C[k,l]"
SCALED = "D[i,l] = alpha*A[i,j]*B[j,k]*C[k,l]"  # a ContractExpression of a 3-operand path
TILED = {"strategy": "tiled"}


def extents(variant: int) -> dict[str, int]:
    """Small extents, none a multiple of a tile; each variant of the shapes its own."""
    return {"a": 5 + variant, "b": 7, "c": 17, "d": 9, "i": 9 + 2 * variant, "j": 7, "k": 5,
            "l": 6, "m": 4}


def arrays(rng: np.random.Generator, variant: int, *subscripts: str) -> list[np.ndarray]:
    size = extents(variant)
    return [rng.standard_normal([size[i] for i in s]) for s in subscripts]


Call = Callable[[np.random.Generator], tuple[object, object]]  # -> (result, numpy's)


def entry_points(variant: int) -> tuple[dict[str, Call], treduda.ContractExpression]:
    """What a thread calls: each returns treduda's result and numpy's for fresh data. The
    shared objects (a plan planned at its first call, a contract_expression, a self-tuning
    kernel, which is returned too) are made once here and called by every thread of this
    variant. Calls of two and three operands are searched (kernels made side by side with
    the search's shared state), the others take the tiled strategy, whose kernels take a
    tenth of the time to make."""
    size = extents(variant)
    plan = treduda.program(PROGRAM, dtype="float64", **TILED)  # planned by the first call
    shapes = [tuple(size[i] for i in s) for s in ("ij", "jk", "kl")]
    scaled = treduda.contract_expression(SCALED, A=shapes[0], B=shapes[1], C=shapes[2],
                                         dtype="float64", **TILED)
    tuned = treduda.contract_expression("ik,kj->ij", (size["i"], size["k"]),
                                        (size["k"], size["l"]), dtype="float64",
                                        tune="incremental")

    def two(rng):
        a, b = arrays(rng, variant, "ij", "jk")
        return treduda.contract("ij,jk->ik", a, b), np.einsum("ij,jk->ik", a, b)

    def three(rng):
        ops = arrays(rng, variant, "ij", "jk", "kl")
        return treduda.contract("ij,jk,kl->il", *ops), np.einsum("ij,jk,kl->il", *ops)

    def four(rng):
        ops = arrays(rng, variant, "ij", "jk", "kl", "lm")
        return (treduda.contract("ij,jk,kl,lm->im", *ops, **TILED),
                np.einsum("ij,jk,kl,lm->im", *ops))

    def program(rng):
        a, b, c = arrays(rng, variant, "ij", "jk", "kl")
        return plan(A=a, B=b, C=c)["D"], a @ b @ c

    def expression(rng):
        a, b, c = arrays(rng, variant, "ij", "jk", "kl")
        alpha = rng.uniform(0.5, 2.0)
        return scaled(A=a, B=b, C=c, alpha=alpha), alpha * (a @ b @ c)

    def self_tuning(rng):
        a, b = arrays(rng, variant, "ik", "kl")
        return tuned(a, b), a @ b

    def deterministic(rng):
        a, b = arrays(rng, variant, "cad", "dcb")
        return (treduda.contract(SHORT_AND_DEEP, A=a, B=b, strategy="tiled+staged",
                                 params=SPLIT, deterministic=True),
                np.einsum("cad,dcb->ab", a, b))

    return {f.__name__: f for f in (two, three, four, program, expression, self_tuning,
                                    deterministic)}, tuned


@pytest.fixture
def quick(monkeypatch):
    """Searches of 20 nodes (what is tested is the threads, not the picks), and incremental
    tuning with 2 candidates timed once each: its trials end within the first round, so the
    later rounds run its winner side by side."""
    monkeypatch.setattr(policy, "SMALL_PROBLEM_BUDGET", 20)
    monkeypatch.setattr(incremental, "CANDIDATES", 2)
    monkeypatch.setattr(incremental, "SAMPLES", 1)


def test_eight_threads_on_every_entry_point_get_numpys_results(quick):
    """Each round, the 8 threads start together and each runs every entry point once (in an
    order of its own) on data of its own. The even threads share one set of shapes, the odd
    ones another: four threads use each kernel, plan and self-tuning kernel at once, while
    the other four make and run theirs."""
    calls, tuned = zip(*(entry_points(variant) for variant in range(VARIANTS)), strict=True)
    names = list(calls[0])
    start = threading.Barrier(THREADS)

    def thread(n: int, round_: int) -> list[str]:
        rng = np.random.default_rng(1000 * round_ + n)
        start.wait()
        wrong = []
        for name in names[n % len(names):] + names[:n % len(names)]:
            result, expected = calls[n % VARIANTS][name](rng)
            if not np.allclose(result, expected, rtol=1e-10, atol=1e-12):
                wrong.append(f"{name} in thread {n}, round {round_}")
        return wrong

    with ThreadPoolExecutor(THREADS) as pool:
        for round_ in range(ROUNDS):
            wrong = [w for found in pool.map(thread, range(THREADS), [round_] * THREADS)
                     for w in found]
            assert not wrong, wrong
    for planned in tuned:  # each timed its trials once, one call at a time, and chose
        assert planned.kernel.timed_calls == 2 and planned.kernel.winner is not None


def test_a_kept_value_is_made_once_while_other_values_are_made_beside_it():
    """What kernels, plans and self-tuning kernels are kept with (treduda.once): threads
    asking for one value while it is made wait for it; one asking for another goes on."""
    made, release, start = [], threading.Event(), threading.Barrier(4)

    @once_per_key(None)
    def value(key: str) -> object:
        made.append(key)
        if key == "slow":
            assert release.wait(60)
        return object()

    def ask() -> object:
        start.wait()
        return value("slow")

    with ThreadPoolExecutor(4) as pool:
        slow = [pool.submit(ask) for _ in range(3)]
        start.wait()  # the three are asking
        assert pool.submit(value, "other").result(60) is not None  # not held up by "slow"
        release.set()
        assert len({id(f.result(60)) for f in slow}) == 1
    assert made.count("slow") == 1 and value.cache_info().currsize == 2

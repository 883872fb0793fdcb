"""What a newcomer tries first, as numpy.einsum users expect it: rank-0 outputs on every path."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import needs_nvcc

import treduda
from treduda.search import Searcher

RANK0 = [("s[] = A[i]*B[i]", {"i": 37}), ("s[] = alpha*A[i,j]*B[j,i] + beta*s[]",
                                          {"i": 13, "j": 29})]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_contract_to_a_rank0_output_matches_einsum(dtype):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(37).astype(dtype), rng.standard_normal(37).astype(dtype)
    s = treduda.contract("s[]=A[i]*B[i]", A=a, B=b)
    assert s.shape == () and s.dtype == dtype
    np.testing.assert_allclose(s, np.einsum("i,i->", a, b), rtol=1e-5)


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize(("expr", "sizes"), RANK0, ids=["dot", "trace-scaled"])
def test_a_searched_rank0_kernel_verifies_on_pocl_and_the_emulator(expr, sizes, layout):
    kernel = treduda.compile(expr, sizes, layout=layout, cache=False)  # no strategy: searched
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    assert kernel.hazards() == []


@needs_nvcc
def test_a_searched_rank0_kernel_compiles_as_cuda():
    expr, sizes = RANK0[1]
    assert treduda.compile(expr, sizes, cache=False).compile_cuda().spill_stores == 0


@pytest.mark.parametrize(("expr", "sizes"), RANK0, ids=["dot", "trace-scaled"])
def test_the_rank0_bound_is_below_the_estimate_of_every_candidate(expr, sizes):
    searcher = Searcher(expr, sizes, restrict=False)
    points = list(searcher.space.points())
    assert len(points) > 50
    for point in points:
        assert searcher.model.bound(point).seconds <= searcher.model.estimate(point).seconds
    assert searcher.model.bound({}).seconds <= min(searcher.model.estimate(p).seconds
                                                   for p in points)

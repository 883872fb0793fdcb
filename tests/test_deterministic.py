"""``deterministic=True``: no atomic additions, so a split reduction gives the same result bit
for bit on every run. Each part is stored into a workspace and a second kernel adds the parts
in a fixed order (treduda.codegen.parts); the model prices that, and without the switch
nothing changes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import bound_paths_hold, needs_nvcc

import treduda
from treduda.app.cli import main
from treduda.model.gpus import gpu as find_gpu
from treduda.model.model import Model
from treduda.polyhedral.lower import plan
from treduda.run.nvcc import compile_cuda
from treduda.run.nvrtc import compile_nvrtc, nvrtc_available
from treduda.tuning.cache import CacheKey, TuningCache
from treduda.tuning.search import Searcher
from treduda.tuning.walk import estimate_kernel

SHORT_AND_DEEP = "C[a,b] = A[c,a,d]*B[d,c,b]"  # tccg_14's shape: a small output, a long sum
SIZES = {"a": 37, "b": 21, "c": 45, "d": 19}  # not multiples of the tiles or the step
SPLIT = {"order": "a,b", "block_x": 16, "reg_x": 2, "block_y": 4, "reg_y": 2, "step": 8,
         "split": 4}
GEMM = "C[i,j] += alpha * A[i,k] * B[k,j] * D[i]"
GEMM_SIZES = {"i": 9, "j": 30, "k": 70}
GEMM_SPLIT = {"order": "j,i", "block_x": 16, "reg_x": 2, "block_y": 4, "reg_y": 2, "step": 8,
              "split": 4}


def _runs(kernel: treduda.Kernel, count: int = 5, **values) -> list[np.ndarray]:
    return [kernel.run(**{k: v.copy() if isinstance(v, np.ndarray) else v
                          for k, v in values.items()}) for _ in range(count)]


def _same_bits(results: list[np.ndarray]) -> bool:
    return all(r.tobytes() == results[0].tobytes() for r in results)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_a_deterministic_split_gives_the_same_bits_on_every_run(dtype):
    kernel = treduda.compile(SHORT_AND_DEEP, SIZES, layout="F", dtype=dtype,
                             strategy="tiled+staged", params=SPLIT, deterministic=True)
    assert kernel.deterministic and kernel.grid[0] == 2 * 3  # 6 steps of c: 3 parts of 2
    rng = np.random.default_rng(0)
    A = rng.standard_normal((45, 37, 19)).astype(dtype)
    B = rng.standard_normal((19, 45, 21)).astype(dtype)
    if dtype.startswith("complex"):
        A = A + 1j * rng.standard_normal(A.shape)
    # '=' ignores the output's old values: the second kernel stores the sum, once
    results = _runs(kernel, A=A, B=B, C=np.full((37, 21), np.nan, dtype))
    assert _same_bits(results)
    np.testing.assert_allclose(results[0], np.einsum("cad,dcb->ab", A, B), rtol=1e-12)
    assert "atomic" not in kernel.opencl_source
    assert "must be zero before the launch" not in kernel.opencl_source


@pytest.mark.parametrize("op", ["+=", "-="])
def test_a_deterministic_split_applies_the_operator_and_scalars_once(op):
    kernel = treduda.compile(GEMM.replace("+=", op), GEMM_SIZES, dtype="float64",
                             strategy="tiled", params=GEMM_SPLIT, deterministic=True)
    rng = np.random.default_rng(1)
    A, B, D, C = rng.random((9, 70)), rng.random((70, 30)), rng.random(9), rng.random((9, 30))
    results = _runs(kernel, A=A, B=B, D=D, C=C, alpha=0.5)
    assert _same_bits(results)
    product = 0.5 * np.einsum("ik,kj,i->ij", A, B, D)
    np.testing.assert_allclose(results[0], C + product if op == "+=" else C - product,
                               rtol=1e-12)


def test_the_emulator_finds_no_hazard_in_a_deterministic_split():
    staged = treduda.compile(SHORT_AND_DEEP, SIZES, layout="F", strategy="tiled+staged",
                             params=SPLIT, deterministic=True)
    assert staged.hazards() == []
    kernel = treduda.compile(GEMM, GEMM_SIZES, strategy="tiled", params=GEMM_SPLIT,
                             deterministic=True)
    assert kernel.hazards() == []
    assert kernel.verify(backend="emulator").ok  # both kernels, every block


@needs_nvcc
@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_deterministic_cuda_has_no_atomics_and_launches_both_kernels(dtype):
    kernel = treduda.compile(SHORT_AND_DEEP, SIZES, layout="F", dtype=dtype,
                             strategy="tiled+staged", params=SPLIT, deterministic=True)
    source = kernel.cuda_source
    assert "atomic" not in source.lower() and "cudaMemsetAsync" not in source
    assert f"{kernel.name}_sum<<<dim3(4, 1, 1), dim3(256, 1, 1), 0, stream>>>(C, td_parts);" \
        in source  # 37 x 21 outputs, 256 per block
    assert {r.kernel for r in compile_cuda(source)} == {kernel.name, f"{kernel.name}_sum"}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC (pip install nvidia-cuda-nvrtc) absent")
def test_nvrtc_compiles_both_kernels_as_cupy_loads_them():
    kernel = treduda.compile(GEMM, GEMM_SIZES, dtype="complex64", strategy="tiled",
                             params=GEMM_SPLIT, deterministic=True)
    ptx = compile_nvrtc(kernel.cuda_source)
    assert f".entry {kernel.name}(" in ptx and f".entry {kernel.name}_sum(" in ptx
    assert "atom." not in ptx


def test_the_process_wide_switch_sets_the_default_and_resets():
    assert not treduda.is_deterministic()
    with treduda.use_deterministic(True):
        assert treduda.is_deterministic()
        kernel = treduda.compile(GEMM, GEMM_SIZES, strategy="tiled", params=GEMM_SPLIT)
        assert kernel.deterministic and "td_parts" in kernel.opencl_source
        overridden = treduda.compile(GEMM, GEMM_SIZES, strategy="tiled", params=GEMM_SPLIT,
                                     deterministic=False)
        assert not overridden.deterministic and "td_atomic_add" in overridden.opencl_source
        assert kernel.name != overridden.name  # the kernel identity holds the switch
        planned = treduda.contract_expression("ik,kj", (9, 70), (70, 30), strategy="tiled",
                                              params=GEMM_SPLIT)
    assert not treduda.is_deterministic()  # the block's end restores the setting before it
    plain = treduda.contract_expression("ik,kj", (9, 70), (70, 30), strategy="tiled",
                                        params=GEMM_SPLIT)
    assert planned.kernel.deterministic and not plain.kernel.deterministic  # kept apart
    treduda.use_deterministic(True)
    try:
        assert treduda.is_deterministic()
    finally:
        treduda.use_deterministic(False)
    assert not treduda.is_deterministic()


def test_deterministic_is_part_of_the_tuning_cache_key(tmp_path):
    store = TuningCache(tmp_path / "tuning.sqlite3")
    sizes = {"i": 8, "j": 8, "k": 512}
    for deterministic in (False, True):
        kernel = treduda.compile("C[i,j] = A[i,k]*B[k,j]", sizes, cache=store,
                                 deterministic=deterministic)
        assert kernel.deterministic == deterministic
    keys = [entry.key for entry in store.entries()]
    assert sorted(k.deterministic for k in keys) == [False, True]
    plain = CacheKey.of(plan("C[i,j] = A[i,k]*B[k,j]", sizes), "H100-SXM")
    assert "deterministic" not in plain.to_json()  # keys stored before the switch still match
    marked = CacheKey.of(plan("C[i,j] = A[i,k]*B[k,j]", sizes, deterministic=True), "H100-SXM")
    assert CacheKey.from_json(marked.to_json()) == marked != plain


def _searcher(deterministic: bool) -> Searcher:
    program = plan(SHORT_AND_DEEP, {"a": 32, "b": 32, "c": 96, "d": 64}, "F",
                   deterministic=deterministic)
    return Searcher(program, "H100", strategy="tiled+staged",
                    values={"order": ("a,b",), "block_x": (16,), "block_y": (4, 8),
                            "reg_x": (2,), "reg_y": (2, 4), "step": (8, 16),
                            "stage": ("A,B",), "pad": (1,), "preload": (False,),
                            "double_buffer": (False,)})


def test_the_model_prices_the_second_kernel_and_both_searches_still_split():
    atomic, ordered = _searcher(False), _searcher(True)
    assert bound_paths_hold(ordered) > 8  # bound <= estimate with the second kernel's cost
    for searcher in (atomic, ordered):  # a 6144-long sum over 1024 outputs: a split pays
        assert searcher.branch_and_bound().best.params["split"] > 1
    for point in ordered.space.points():
        extra = ordered.model.estimate(point).seconds - atomic.model.estimate(point).seconds
        assert (extra > 3e-6) == (point["split"] > 1)  # a launch and the parts' traffic


def test_the_walk_over_a_deterministic_kernel_pays_for_its_second_kernel_too():
    kernel = treduda.compile(GEMM, GEMM_SIZES, strategy="tiled", params=GEMM_SPLIT,
                             deterministic=True)
    h100 = find_gpu("H100")
    model = Model(kernel.program, h100, "tiled")
    walked = estimate_kernel(kernel, h100, use_nvcc=False)
    assert walked.seconds >= model.bound(kernel.params).seconds
    assert walked.seconds > model.parts_seconds(4) > 3e-6


def test_the_command_line_compiles_a_deterministic_split(capsys):
    sizes = [arg for i, n in GEMM_SIZES.items() for arg in ("-s", f"{i}={n}")]
    params = [arg for k, v in GEMM_SPLIT.items() for arg in ("-p", f"{k}={v}")]
    assert main(["compile", GEMM, *sizes, "--strategy", "tiled", *params,
                 "--deterministic"]) == 0
    source = capsys.readouterr().out
    assert "_sum<<<" in source and "atomic" not in source

"""Tensor maps on the host (:mod:`treduda.run.tensor_maps`): cuTensorMapEncodeTiled's
arguments worked out by hand for GEMM operands and a box over several indices, the tensors
no map describes, a bundle's maps through to the kernel's argument list (the driver's
refusal named), and (on a GPU only) the encoded map passed by value to a kernel whose bulk
copies read it."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace

import numpy as np
import pytest
from test_tensor_copy import _expected, _launch, _source, tile_gemm
from test_warpgroup_tma import GEMM, TILES
from treduda.strategies.warpgroup_kernel import step_boxes

import treduda
from treduda.bundle import load
from treduda.codegen import ir
from treduda.errors import BackendUnavailable, StrategyError
from treduda.polyhedral.lower import plan
from treduda.run import tensor_maps
from treduda.run.cuda import with_tensor_maps
from treduda.run.emulator import emulate
from treduda.run.launch import address
from treduda.run.tensor_maps import (
    TENSOR_MAP_BYTES,
    TiledEncoding,
    encoding,
    kernel_argument,
    unmappable,
)

BUNDLED = {"i": 70, "j": 40, "k": 72}  # partial tiles; rows of 80 and 144 bytes


def test_gemm_operands_by_hand():
    """GEMM 4096^3: A[i,k] (k fastest) in 128 x 64 boxes of float16, rows 8192 bytes apart,
    one 128-byte swizzled line of K per row; B[k,j] (j fastest, wgmma's MN-major operand) in
    64 x 64 boxes, a line of N per K; TF32's float32 A in 128 x 32 (a line of 32 words)."""
    a = ir.TensorMap("map_a", "A", (4096, 4096), (1, 4096), (64, 128), 128)
    assert encoding(a, "float16") == TiledEncoding(
        data_type=6, rank=2, global_dims=(4096, 4096), global_strides=(8192,),
        box_dims=(64, 128), element_strides=(1, 1), interleave=0, swizzle=3,
        l2_promotion=2, oob_fill=0)
    b = ir.TensorMap("map_b", "B", (4096, 4096), (1, 4096), (64, 64), 128)
    assert encoding(b, "bfloat16").data_type == 9
    tf32 = encoding(ir.TensorMap("map_a", "A", (4096, 4096), (1, 4096), (32, 128), 128),
                    "float32")
    assert (tf32.data_type, tf32.global_strides, tf32.swizzle) == (7, (16384,), 3)
    # a TCCG-shaped operand of three dimensions: A[c,a,b] of 24 x 16 x 72, b fastest
    three = ir.TensorMap("map_a", "A", (72, 16, 24), (1, 72, 1152), (64, 16, 2), 128)
    assert encoding(three, "float16").global_strides == (144, 2304)



def test_a_box_over_several_indices_by_hand():
    """A[g,b,a,k] of 2 x 7 x 16 x 72 (k fastest), M = (a, b): a K-major tile of 64 rows is all
    16 of a by 4 of b, one g; a step of 32 values of K is one 64-byte swizzled line: a map of
    four dimensions, rows 144 bytes apart, a's 16 of them 2304, b's 7 of those 16128."""
    program = plan("C[g,b,n,a] = A[g,b,a,k]*B[g,k,n]", {"a": 16, "b": 7, "k": 72, "n": 40,
                                                      "g": 2}, dtype="float16")
    a, _ = step_boxes(program, {**TILES, "frags_m": 1, "tile_n": 32, "frags_k": 2})
    assert (a.boxes, a.k_major) == (1, True)
    assert encoding(a.map, "float16") == TiledEncoding(
        data_type=6, rank=4, global_dims=(72, 16, 7, 2), global_strides=(144, 2304, 16128),
        box_dims=(32, 16, 4, 1), element_strides=(1, 1, 1, 1), swizzle=2)

@pytest.mark.parametrize(("extents", "strides", "dtype", "reason"), [
    ((4095, 4096), (1, 4095), "float16", "stride of 8190 bytes"),  # rows of odd length
    ((4096, 4096), (4096, 1), "float16", "not contiguous"),
    ((2,) * 6, (1, 2, 4, 8, 16, 32), "float32", "6 dimensions"),
    ((8, 8), (1, 8), "int32", "moves no int32"),
])
def test_tensors_no_map_describes_say_why(extents, strides, dtype, reason):
    assert reason in unmappable(extents, strides, dtype)


@pytest.mark.parametrize(("box", "swizzle", "reason"), [
    ((128, 64), 128, "256 bytes wide in a 128-byte swizzle"),
    ((64, 300), 128, "each extent 1 to 256"),
    ((4, 64), 0, "8 bytes wide"),
])
def test_boxes_the_driver_refuses_raise_before_it(box, swizzle, reason):
    with pytest.raises(StrategyError, match=reason):
        encoding(ir.TensorMap("m", "A", (4096, 4096), (1, 4096), box, swizzle), "float16")


def test_an_encoded_map_is_one_128_byte_element_passed_by_value():
    """CuPy passes a numpy array of size one by value (its bytes), not a 128-byte scalar."""
    value = kernel_argument(bytes(range(TENSOR_MAP_BYTES)))
    assert isinstance(value, np.ndarray) and value.shape == (1,)
    assert value.dtype.itemsize == TENSOR_MAP_BYTES and value.tobytes() == bytes(range(128))


def test_the_emulator_refuses_a_map_the_driver_would():
    """Rows of 100 float16 values lie 200 bytes apart: no tensor map describes them."""
    kernel = tile_gemm()
    odd = ir.TensorMap("map_a", "A", (100, 50), (1, 100), (64, 64), 128)
    with pytest.raises(StrategyError, match="200 bytes"):
        emulate(replace(kernel, tensor_maps=(odd, kernel.tensor_maps[1])), _launch())


def test_the_tile_runs_on_a_gpu_with_its_encoded_maps():
    """Only where a CUDA driver and CuPy are: the tensor maps encoded by the driver, passed
    by value, the boxes moved by the copy engine (skipped, never failed, elsewhere)."""
    from treduda.run.cuda import gpu_present, run_cuda

    if not gpu_present():
        pytest.skip("no CUDA GPU")
    kernel = tile_gemm()
    launch = _launch()
    maps = tuple((n, encoding(m, kernel.dtype)) for n, m in zip((1, 2), kernel.tensor_maps,
                                                                strict=True))
    try:
        result = run_cuda(_source(kernel, cuda=True), replace(launch, tensor_maps=maps))
    except BackendUnavailable as error:
        pytest.skip(str(error))
    np.testing.assert_array_equal(np.asarray(result), _expected())


@pytest.fixture(scope="module")
def tma_bundle(tmp_path_factory):
    """A GEMM whose tiles the tensor memory accelerator moves (partial tiles), exported."""
    kernel = treduda.compile(GEMM, BUNDLED, dtype="float16", strategy="warpgroup",
                             params=TILES)
    path = tmp_path_factory.mktemp("tma") / "tma.zip"
    treduda.export({"gemm_tma": kernel}, path)
    return kernel, path


def _bundled_launch(path, backend: str = "opencl"):
    """The bundled kernel, the operands of a call and the call's launch on the host."""
    bundled = load(path, backend=backend)["gemm_tma"]
    rng = np.random.default_rng(39)
    operands = {t: rng.uniform(-1, 1, tuple(BUNDLED[i] for i in idx)).astype("float16")
                for t, idx in bundled.contraction.inputs.items()}
    return bundled, operands, bundled.launch(operands)


def test_a_bundle_keeps_the_maps_and_its_runner_passes_them_last_by_value(tma_bundle):
    """The signature a bundle records holds each map (its tensor, extents, strides, box,
    swizzle); a call's launch carries their encodings; the runner encodes each from the
    address of the tensor it describes and appends it, one 128-byte element, after the
    values, in the order the CUDA source declares them."""
    kernel, path = tma_bundle
    bundled, _, launch = _bundled_launch(path)
    first, _ = bundled._signature
    assert first.tensor_maps == kernel.built.kernel.tensor_maps and len(first.tensor_maps) == 2
    names = [p.name for p in first.params]
    assert launch.tensor_maps == tuple((names.index(m.tensor), encoding(m, "float16"))
                                       for m in first.tensor_maps)
    encoded = []

    def driver(tiled: TiledEncoding, where: int) -> bytes:
        encoded.append((tiled, where))
        return bytes([len(encoded)]) * TENSOR_MAP_BYTES

    arguments = with_tensor_maps(launch, list(launch.values), driver)
    assert encoded == [(tiled, address(launch.values[n])) for n, tiled in launch.tensor_maps]
    assert arguments[:len(names)] == list(launch.values)
    maps = arguments[len(names):]
    assert [m.tobytes() for m in maps] == [bytes([1]) * 128, bytes([2]) * 128]
    assert all(m.shape == (1,) for m in maps)  # one element each: CuPy passes it by value
    declared = re.search(rf"{first.name}\((.*?)\)", bundled.cuda_source, re.S).group(1)
    parameters = [p.strip().split()[-1] for p in declared.split(",")]
    assert parameters == names + [m.name for m in first.tensor_maps] == bundled.entry[
        "arguments"]
    described = [json.loads(json.dumps({"parameter": m.name, "tensor": m.tensor,
                                        **asdict(tiled)}))
                 for m, (_, tiled) in zip(first.tensor_maps, launch.tensor_maps, strict=True)]
    assert bundled.entry["tensor_maps"] == described  # the manifest says it for a reader
    assert declared.count("const __grid_constant__ td_tensor_map") == 2


class _Driver:
    """libcuda's calls as a driver that refuses every tensor map answers them."""

    def cuInit(self, flags):  # noqa: N802 (the driver's name)
        return 0

    def cuTensorMapEncodeTiled(self, *arguments):  # noqa: N802
        return 1

    def cuGetErrorName(self, result, name):  # noqa: N802
        name._obj.value = b"CUDA_ERROR_INVALID_VALUE"
        return 0


class _OldDriver:
    def cuInit(self, flags):  # noqa: N802
        return 0


def test_a_map_the_driver_refuses_fails_naming_the_kernel_parameter_and_error(tma_bundle,
                                                                            monkeypatch):
    _, _, launch = _bundled_launch(tma_bundle[1])
    monkeypatch.setattr(tensor_maps, "_driver", _Driver)
    with pytest.raises(StrategyError, match=rf"kernel {launch.name}, tensor map 0 \(of its "
                       r"argument 1\): the CUDA driver refused a tensor map \("
                       r"cuTensorMapEncodeTiled: CUDA_ERROR_INVALID_VALUE, CUresult 1\)"
                       r".*box_dims=\(64, 128\).*tma=False"):
        with_tensor_maps(launch, list(launch.values))
    monkeypatch.setattr(tensor_maps, "_driver", _OldDriver)
    with pytest.raises(BackendUnavailable, match="no cuTensorMapEncodeTiled"):
        with_tensor_maps(launch, list(launch.values))


def test_a_bundled_tma_kernel_runs_on_a_gpu_with_its_maps(tma_bundle):
    """Only where a CUDA driver and CuPy are (skipped elsewhere): the bundle's kernel, its
    maps encoded from the operands on the GPU, against numpy.einsum."""
    from treduda.run.cuda import gpu_present

    if not gpu_present():
        pytest.skip("no CUDA GPU")
    bundled, operands, _ = _bundled_launch(tma_bundle[1], backend="cuda")
    result = bundled(**operands)
    expected = np.einsum("ik,kj->ij", *(operands[t].astype(np.float64) for t in "AB"))
    np.testing.assert_allclose(result.astype(np.float64), expected, atol=0.05)

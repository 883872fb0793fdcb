"""Tensor maps on the host: the arguments of ``cuTensorMapEncodeTiled`` (CUDA driver API,
"Tensor Map Object Management") for each bulk tensor copy's map (:class:`ir.TensorMap`),
which operands a tensor map can describe at all, and the encoding itself where a CUDA driver
is present.

The driver's requirements that decide the rest (cuTensorMapEncodeTiled's documentation):
rank 1 to 5; ``globalDim`` each at most 2**32; ``globalStrides``, the rank - 1 outer
dimensions' strides in bytes, each a multiple of 16 and under 2**40 (the innermost dimension
is contiguous: it has no stride to give); ``boxDim`` each at most 256, the innermost in bytes
a multiple of 16 and, with a swizzle, no more than its span (32, 64 or 128 bytes);
``elementStrides`` at most 8 (1 here: every element of the box); the tensor's address
aligned to 16 bytes and the map to 64. An operand that breaks one of them keeps its
cp.async copies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..codegen import ir
from ..errors import BackendUnavailable, StrategyError
from ..frontend.dtypes import itemsize

MAX_RANK = 5
MAX_BOX = 256
MAX_DIM = 2 ** 32
MAX_STRIDE = 2 ** 40
STRIDE_BYTES = 16  # globalStrides' multiple, and the innermost box's in bytes
TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap)
TENSOR_MAP_ALIGNMENT = 64

# CUtensorMapDataType: TF32 operands move as float32 and are rounded to TF32 in shared
# memory after the barrier, as the cp.async path rounds them (the copy engine's own TF32
# conversion, CU_TENSOR_MAP_DATA_TYPE_TFLOAT32, names no rounding the twin could match)
DATA_TYPES = {"float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}  # CUtensorMapSwizzle by the span's bytes
INTERLEAVE_NONE = 0
L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B, as CUTLASS's Hopper GEMMs ask
OOB_FILL_ZERO = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements outside read as zero


@dataclass(frozen=True)
class TiledEncoding:
    """``cuTensorMapEncodeTiled``'s arguments but the tensor's address: every list innermost
    dimension first, ``global_strides`` in bytes (rank - 1 of them), enums as the driver's
    numbers."""

    data_type: int
    rank: int
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int = INTERLEAVE_NONE
    swizzle: int = 0
    l2_promotion: int = L2_PROMOTION_128B
    oob_fill: int = OOB_FILL_ZERO


def unmappable(extents: Sequence[int], strides: Sequence[int], dtype: str) -> str | None:
    """Why no tensor map describes a tensor of ``extents`` and ``strides`` (in elements,
    innermost first, after merging indices that lie together), or None where one does."""
    size = itemsize(dtype)
    if dtype not in DATA_TYPES:
        return f"the copy engine moves no {dtype}"
    if len(extents) > MAX_RANK:
        return f"{len(extents)} dimensions after merging, more than a tensor map's {MAX_RANK}"
    if strides[0] != 1:
        return "its fastest index is not contiguous (stride 1)"
    for extent, stride in zip(extents[1:], strides[1:], strict=True):
        if stride * size % STRIDE_BYTES or stride * size >= MAX_STRIDE:
            return (f"a stride of {stride * size} bytes, not a multiple of {STRIDE_BYTES} "
                    "under 2**40")
        if extent > MAX_DIM:
            return f"an extent of {extent}, over 2**32"
    return None


def encoding(tensor_map: ir.TensorMap, dtype: str) -> TiledEncoding:
    """The driver's arguments for ``tensor_map`` over a tensor of ``dtype``; a map that the
    driver would refuse raises :class:`StrategyError` saying which requirement it breaks."""
    reason = unmappable(tensor_map.extents, tensor_map.strides, dtype)
    size = itemsize(dtype)
    inner = tensor_map.box[0] * size
    if reason is None and len(tensor_map.box) != len(tensor_map.extents):
        reason = f"a box of {len(tensor_map.box)} dimensions for {len(tensor_map.extents)}"
    elif reason is None and any(not 0 < b <= MAX_BOX for b in tensor_map.box):
        reason = f"a box of {tensor_map.box}, each extent 1 to {MAX_BOX}"
    elif reason is None and inner % STRIDE_BYTES:
        reason = f"a box {inner} bytes wide, not a multiple of {STRIDE_BYTES}"
    elif reason is None and tensor_map.swizzle not in SWIZZLES:
        reason = f"a swizzle of {tensor_map.swizzle} bytes (0, 32, 64 or 128)"
    elif reason is None and tensor_map.swizzle and inner > tensor_map.swizzle:
        reason = f"a box {inner} bytes wide in a {tensor_map.swizzle}-byte swizzle"
    if reason is not None:
        raise StrategyError(f"tensor map '{tensor_map.name}' of {tensor_map.tensor}: {reason}; "
                            "its tiles need cp.async copies")
    rank = len(tensor_map.extents)
    return TiledEncoding(DATA_TYPES[dtype], rank, tensor_map.extents,
                         tuple(s * size for s in tensor_map.strides[1:]), tensor_map.box,
                         (1,) * rank, swizzle=SWIZZLES[tensor_map.swizzle])


def _driver() -> ctypes.CDLL:
    """The CUDA driver library (``libcuda.so``), which a GPU's driver installs."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        return ctypes.CDLL(name)
    except OSError as error:
        raise BackendUnavailable("encoding a tensor map needs the CUDA driver (libcuda.so), "
                                 "which only a machine with an NVIDIA GPU has") from error


def encode(tiled: TiledEncoding, address: int) -> bytes:
    """The 128 bytes of the ``CUtensorMap`` for the tensor at device ``address``: what a
    kernel's ``__grid_constant__`` parameter receives by value. Calls the driver's
    ``cuTensorMapEncodeTiled`` through ctypes (NVIDIA's cuda-python bindings wrap the same
    function; ctypes needs no package). A map the driver refuses raises
    :class:`StrategyError` with the driver's error name and the map's arguments."""
    if address % STRIDE_BYTES:
        raise StrategyError(f"a tensor at {address:#x} is not aligned to {STRIDE_BYTES} bytes, "
                            "as a tensor map needs")
    driver = _driver()
    started = driver.cuInit(0)  # the driver's calls need it once; CuPy has made it already
    if started:
        raise BackendUnavailable(f"the CUDA driver did not start ({_error_name(driver, started)}"
                                 "): no tensor map can be encoded")
    try:
        encode_tiled = driver.cuTensorMapEncodeTiled
    except AttributeError:  # drivers before CUDA 12 have no tensor maps
        raise BackendUnavailable("this CUDA driver has no cuTensorMapEncodeTiled (CUDA 12 "
                                 "and later): kernels fed by bulk tensor copies cannot run; "
                                 "export them with tma=False") from None
    storage = ctypes.create_string_buffer(TENSOR_MAP_BYTES + TENSOR_MAP_ALIGNMENT)
    offset = -ctypes.addressof(storage) % TENSOR_MAP_ALIGNMENT
    rank = tiled.rank

    def array(kind, values):
        return (kind * max(len(values), 1))(*values)

    result = encode_tiled(
        ctypes.c_void_p(ctypes.addressof(storage) + offset), ctypes.c_int(tiled.data_type),
        ctypes.c_uint32(rank), ctypes.c_void_p(address),
        array(ctypes.c_uint64, tiled.global_dims), array(ctypes.c_uint64, tiled.global_strides),
        array(ctypes.c_uint32, tiled.box_dims), array(ctypes.c_uint32, tiled.element_strides),
        ctypes.c_int(tiled.interleave), ctypes.c_int(tiled.swizzle),
        ctypes.c_int(tiled.l2_promotion), ctypes.c_int(tiled.oob_fill))
    if result:
        raise StrategyError(f"the CUDA driver refused a tensor map (cuTensorMapEncodeTiled: "
                            f"{_error_name(driver, result)}) of the tensor at {address:#x}: "
                            f"{tiled}; this kernel needs cp.async copies here (tma=False)")
    return storage.raw[offset:offset + TENSOR_MAP_BYTES]


def _error_name(driver: ctypes.CDLL, result: int) -> str:
    """A driver call's ``CUresult`` as the driver names it (``cuGetErrorName``), with its
    number."""
    name = ctypes.c_char_p()
    if driver.cuGetErrorName(ctypes.c_int(result), ctypes.byref(name)) or not name.value:
        return f"CUresult {result}"
    return f"{name.value.decode()}, CUresult {result}"


# CUtensorMap as CuPy passes a structure by value: a numpy array of one element of a
# structured dtype, whose bytes CuPy hands to cuLaunchKernel (cupy/cuda/function.pyx,
# _pointer: "Only numpy.ndarrays of size one can be passed by value"; CuPy's
# examples/custom_struct). A numpy scalar (np.void) is no such value: CuPy converts scalars
# into a buffer of two complex long doubles (_scalar.pxd, CScalar._data), 64 bytes.
TENSOR_MAP_DTYPE = np.dtype([("opaque", "<u8", (TENSOR_MAP_BYTES // 8,))])


def kernel_argument(encoded: bytes) -> np.ndarray:
    """An encoded map as the value a ``__grid_constant__`` parameter receives: one element,
    its 128 bytes."""
    return np.frombuffer(encoded, TENSOR_MAP_DTYPE).copy()

"""What every backend needs to launch a kernel: its arguments as numpy values, in order.

Backends (PoCL through pyopencl, CUDA through CuPy or pycuda) differ only in how they move these
to a device; checking arrays against the expression and flattening them for the layout happens
here, once. Arrays already on a GPU stay there: they are flattened by CuPy instead of numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..codegen import ir
from ..codegen.parts import PartsSum
from ..errors import MissingArray, ShapeMismatch
from ..frontend.contraction import Contraction, check_arguments, infer_sizes
from ..frontend.dtypes import DEFAULT_CASTING, check_cast, compute
from .device_arrays import is_device_array, to_cupy, to_numpy
from .tensor_maps import TiledEncoding, encoding


@dataclass(frozen=True)
class Call:
    """A further kernel of a launch, run after the first in order, on some of its values:
    ``name<<<grid, block>>>(values[arguments[0]], values[arguments[1]], ..)``."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    arguments: tuple[int, ...]  # positions in the launch's values
    dynamic_shared: int = 0  # its tiles are static: a deterministic split's sum has none

    def global_size(self) -> tuple[int, int, int]:
        """OpenCL's global work size: the grid in threads."""
        return threads(self.grid, self.block)


@dataclass(frozen=True)
class Launch:
    """A kernel call: ``name<<<grid, block>>>(values)``; ``values[output_position]`` is written.
    ``then`` are the kernels that run after it, in order (a deterministic split's sum)."""

    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    values: tuple  # arrays (flat, in memory order; numpy or CuPy) and numpy scalars
    output_position: int
    output_shape: tuple[int, ...]
    layout: str
    then: tuple[Call, ...] = ()
    workspaces: tuple[int, ...] = ()  # positions of values the kernels write besides the output
    # bytes of dynamic shared memory a CUDA launch passes, the kernel's attribute raised to
    # them (ir.dynamic_shared_bytes); 0: its tiles are static
    dynamic_shared: int = 0
    # the CUDA kernel's tensor maps (ir.KernelIR.tensor_maps), in order: the position of the
    # value each describes and the driver's arguments, encoded once the tensor is on the GPU
    tensor_maps: tuple[tuple[int, TiledEncoding], ...] = ()

    def global_size(self) -> tuple[int, int, int]:
        """OpenCL's global work size: the grid in threads."""
        return threads(self.grid, self.block)

    def result(self, flat: np.ndarray) -> np.ndarray:
        """The output array from its flat device copy, in the user's logical shape."""
        return flat.reshape(self.output_shape, order=self.layout)


def threads(grid: tuple[int, int, int], block: tuple[int, int, int]) -> tuple[int, int, int]:
    """A grid of blocks in threads, per axis."""
    return tuple(g * b for g, b in zip(grid, block, strict=True))


def bind(contraction: Contraction, dtype: str, fixed_sizes: Mapping[str, int] | None,
         values: Mapping[str, object], empty: bool = False, casting: str = DEFAULT_CASTING
         ) -> tuple[dict[str, int], dict[str, np.ndarray], dict[str, float]]:
    """Check user values against the expression: sizes, arrays (numpy, or CuPy views of
    arrays on a GPU) and scalars for a kernel computing in ``dtype``, each converted as
    numpy's ``casting`` rule allows (a refused one raises DtypeError). ``empty`` allows axes
    of extent 0 (nothing to launch)."""
    check_arguments(contraction, values)
    arrays = {name: _array(name, v, dtype, casting) for name, v in values.items()
              if name != contraction.output and name not in contraction.scalars}
    if contraction.output in values:
        arrays[contraction.output] = _array(contraction.output, values[contraction.output],
                                            dtype, casting)
    require_scalars(contraction, values)
    for s in contraction.scalars:
        check_cast(s, values[s], dtype, casting)
    scalars = {s: np.asarray(values[s]).item() for s in contraction.scalars}
    sizes = infer_sizes(contraction, arrays, empty=empty)
    if fixed_sizes is not None and sizes != dict(fixed_sizes):
        changed = [f"{i}: {sizes[i]} (compiled for {fixed_sizes[i]})" for i in sizes
                   if sizes[i] != fixed_sizes[i]]
        raise ShapeMismatch("the arrays do not have the sizes this kernel was compiled for: "
                            + ", ".join(changed) + "; compile with symbolic=True to reuse a "
                            "kernel across sizes")
    return sizes, arrays, scalars


def prepare(contraction: Contraction, kernel: ir.KernelIR, layout: str,
            grid: tuple[int, int, int], block: tuple[int, int, int], sizes: Mapping[str, int],
            kernel_sizes: Mapping[str, int], arrays: Mapping[str, np.ndarray],
            scalars: Mapping[str, float], xp=np) -> Launch:
    """Flatten arrays in the kernel's layout and dtype and order every argument.

    ``sizes`` are the expression's extents, ``kernel_sizes`` those of the kernel's (merged)
    indices; ``xp`` is the array module that holds the arrays: numpy, or CuPy on a GPU."""
    dtype = np.dtype(kernel.dtype)  # tensors' elements, as stored
    value = np.dtype(compute(kernel.dtype))  # scalars', as computed
    index = np.int32 if kernel.index_bits == 32 else np.int64
    output_shape = tuple(sizes[i] for i in contraction.output_indices)
    values: list = []
    for p in kernel.params:
        if p.kind == ir.ParamKind.OUTPUT:
            # A kernel that adds into its output (a split reduction) starts from zeros.
            initial = (xp.zeros(output_shape, dtype) if kernel.zeroed_output
                       else arrays.get(p.name, xp.zeros(output_shape, dtype)))
            values.append(_flat(xp, initial, dtype, layout, copy=True))
        elif p.kind == ir.ParamKind.INPUT:
            values.append(_flat(xp, arrays[p.name], dtype, layout, copy=False))
        elif p.kind == ir.ParamKind.WORKSPACE:  # as large as its local says, never read unset
            values.append(xp.empty(next(v.size for v in kernel.locals if v.name == p.name),
                                   value))
        elif p.kind == ir.ParamKind.SCALAR:  # converted as numpy converts (integers wrap)
            values.append(np.asarray(scalars[p.name]).astype(value)[()])
        else:  # sizes are named N_<index>
            values.append(index(kernel_sizes[p.name[2:]]))
    output = next(n for n, p in enumerate(kernel.params) if p.kind == ir.ParamKind.OUTPUT)
    workspaces = tuple(n for n, p in enumerate(kernel.params)
                       if p.kind == ir.ParamKind.WORKSPACE)
    positions = {p.name: n for n, p in enumerate(kernel.params)}
    maps = tuple((positions[m.tensor], encoding(m, kernel.dtype)) for m in kernel.tensor_maps)
    return Launch(kernel.name, grid, block, tuple(values), output, output_shape, layout,
                  workspaces=workspaces, dynamic_shared=ir.dynamic_shared_bytes(kernel),
                  tensor_maps=maps)


def prepare_all(contraction: Contraction, first: ir.KernelIR, then: PartsSum | None, layout: str,
                grid: tuple[int, int, int], block: tuple[int, int, int],
                sizes: Mapping[str, int], kernel_sizes: Mapping[str, int],
                arrays: Mapping[str, np.ndarray], scalars: Mapping[str, float], xp=np) -> Launch:
    """:func:`prepare` for kernel ``first`` (its body is not needed), followed by ``then``,
    the kernel that adds a deterministic split's parts, where there is one. A generated
    kernel and a bundled one (:mod:`treduda.bundle`) launch through here alike."""
    launch = prepare(contraction, first, layout, grid, block, sizes, kernel_sizes, arrays,
                     scalars, xp)
    if then is None:
        return launch
    return followed(launch, first, then.kernel, then.grid, then.block)


def followed(launch: Launch, first: ir.KernelIR, kernel: ir.KernelIR,
             grid: tuple[int, int, int], block: tuple[int, int, int]) -> Launch:
    """``launch`` (of kernel ``first``) with ``kernel`` run after it, on the values of the
    parameters of ``first`` that it names."""
    names = [p.name for p in first.params]
    arguments = tuple(names.index(p.name) for p in kernel.params)
    return replace(launch, then=(*launch.then, Call(kernel.name, grid, block, arguments)))


def require_scalars(contraction: Contraction, values: Mapping[str, object]) -> None:
    """Raise :class:`MissingArray` for a scalar of ``contraction`` that ``values`` lacks."""
    missing = [s for s in contraction.scalars if s not in values]
    if missing:
        raise MissingArray(f"no value for scalar(s) {', '.join(missing)}; pass e.g. "
                           f"{missing[0]}=1.0")


def checked_operand(name: str, value: object, dtype: str, casting: str,
                    scalar: bool = False) -> object:
    """A call's ``value`` for ``name`` as numpy.einsum takes it, checked before anything is
    planned or run: a ``scalar`` as it is; an array on a GPU as it is (the kernel checks it);
    anything else (an array, a list, a number) as ``numpy.asarray`` converts it. DtypeError
    where numpy's ``casting`` rule does not convert it to ``dtype``."""
    if not scalar and is_device_array(value):
        return value
    checked = value if scalar else to_numpy(value)
    check_cast(name, checked, dtype, casting)
    return checked


def _array(name: str, value: object, dtype: str, casting: str) -> np.ndarray:
    """``value`` as an array, refused where numpy's ``casting`` rule does not convert it to
    the kernel's ``dtype``."""
    array = to_cupy(name, value) if is_device_array(value) else to_numpy(value)
    check_cast(name, array, dtype, casting)
    return array


def _flat(xp, array: np.ndarray, dtype: np.dtype, layout: str, copy: bool) -> np.ndarray:
    """The array's elements in memory order for ``layout`` (C: last index fastest), aligned to
    ir.VECTOR_BYTES as CUDA kernels assume: a view that starts elsewhere (``x[1:]``) is
    copied, as is a strided one."""
    flat = xp.asarray(array, dtype=dtype).ravel(order=layout)
    aligned = address(flat) % ir.VECTOR_BYTES == 0
    return flat.copy() if copy or not aligned or not flat.flags.c_contiguous else flat


def address(array: np.ndarray) -> int:
    """Where ``array``'s first element lies, in host or device memory."""
    return array.data.ptr if is_device_array(array) else array.ctypes.data

"""The GPU backend: the CUDA text run through CuPy (NVRTC, no CUDA toolkit needed; the extra
``treduda[cupy]``) when it is installed, else through pycuda (nvcc; ``treduda[cuda]``).

Both runtimes take the same :class:`~treduda.run.launch.Launch` as PoCL, so on a machine without
a GPU everything up to the driver call is still exercised by the tests. They differ only in how
they compile, move arrays and launch; running and timing are written once, here.

Where the caller holds cubins (a bundle's, :mod:`treduda.bundle`), the one for this GPU's
architecture is loaded instead of compiling the source.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen.targets import cuda_target
from ..errors import BackendUnavailable, StrategyError
from ..frontend.dtypes import BFLOAT16
from ..once import once_per_key
from .device_arrays import cupy_module
from .launch import Call, Launch, address
from .nvrtc import compile_nvrtc, include_options
from .tensor_maps import TiledEncoding, encode, kernel_argument
from .timing import REPEATS, WARMUP, TimedRun, Timing

INSTALL = ("pip install 'treduda[cupy]' (CuPy compiles with NVRTC: no CUDA toolkit needed; "
           "the README says which CuPy build fits your driver) or 'treduda[cuda]' (pycuda) on "
           "a machine with an NVIDIA GPU, or use backend='opencl'")


class CupyRuntime:
    """CuPy: ``RawModule`` compiles with NVRTC; arrays are CuPy arrays."""

    def __init__(self):
        self.cupy = cupy_module()
        try:
            count = self.cupy.cuda.runtime.getDeviceCount()
        except self.cupy.cuda.runtime.CUDARuntimeError as error:
            raise BackendUnavailable(f"CuPy found no usable CUDA device ({error}); "
                                     "use backend='opencl'") from error
        if count == 0:
            raise BackendUnavailable("CuPy found no CUDA device; use backend='opencl'")
        properties = self.cupy.cuda.runtime.getDeviceProperties(self.cupy.cuda.Device().id)
        self.device = f"{properties['name'].decode()} (CuPy, CUDA events)"
        self.arch = f"sm_{properties['major']}{properties['minor']}"

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        yield  # CuPy keeps a current device of its own

    def function(self, source: str, name: str, cubins: Mapping[str, bytes] | None = None):
        binary = _binary(source, self.arch, cubins)
        module = _cupy_module(source) if binary is None else _cupy_binary(binary)
        return module.get_function(name)

    def upload(self, launch: Launch) -> list:
        """The values on the GPU, then the kernel's tensor maps of them, encoded."""
        return with_tensor_maps(launch, [self.cupy.asarray(v) if _is_array(v) else v
                                         for v in launch.values])

    def call(self, function, launch: Launch | Call, arguments: list) -> None:
        if launch.dynamic_shared:  # CuPy sets cudaFuncAttributeMaxDynamicSharedMemorySize
            function.max_dynamic_shared_size_bytes = launch.dynamic_shared
        function(launch.grid, launch.block, tuple(arguments), shared_mem=launch.dynamic_shared)

    def download(self, array) -> np.ndarray:
        return self.cupy.asnumpy(array)

    def event(self):
        return self.cupy.cuda.Event()

    def elapsed(self, start, end) -> float:
        return self.cupy.cuda.get_elapsed_time(start, end) / 1e3

    def registers(self, function) -> int:
        return int(function.num_regs)


class PycudaRuntime:
    """pycuda: ``SourceModule`` compiles with nvcc; arrays are ``GPUArray``s; host arrays only."""

    def __init__(self):
        self.driver = _pycuda_driver()
        self.context = _pycuda_context(self.driver)
        self.device = f"{self.context.get_device().name()} (pycuda, CUDA events)"
        self.arch = "sm_{}{}".format(*self.context.get_device().compute_capability())

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        self.context.push()
        try:
            yield
        finally:
            self.context.pop()

    def function(self, source: str, name: str, cubins: Mapping[str, bytes] | None = None):
        binary = _binary(source, self.arch, cubins)
        if binary is not None:
            return self.driver.module_from_buffer(binary).get_function(name)
        from pycuda.compiler import SourceModule

        return SourceModule(source, no_extern_c=True).get_function(name)

    def upload(self, launch: Launch) -> list:
        from pycuda import gpuarray

        if any(_is_array(v) and not isinstance(v, np.ndarray) for v in launch.values):
            raise BackendUnavailable("pycuda runs kernels on numpy arrays only; arrays already "
                                     "on the GPU need CuPy: pip install 'treduda[cupy]'")
        if launch.tensor_maps:
            raise BackendUnavailable("kernels fed by bulk tensor copies take their tensor maps "
                                     "by value, which the CuPy runtime passes: pip install "
                                     "'treduda[cupy]'")
        return [gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v for v in launch.values]

    def call(self, function, launch: Launch | Call, arguments: list) -> None:
        if launch.dynamic_shared:
            function.set_attribute(
                self.driver.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                launch.dynamic_shared)
        function(*[getattr(a, "gpudata", a) for a in arguments], grid=launch.grid,
                 block=launch.block, shared=launch.dynamic_shared)

    def download(self, array) -> np.ndarray:
        return array.get()

    def event(self):
        return self.driver.Event()

    def elapsed(self, start, end) -> float:
        return end.time_since(start) / 1e3

    def registers(self, function) -> int:
        return int(function.num_regs)


Runtime = CupyRuntime | PycudaRuntime


def with_tensor_maps(launch: Launch, placed: list,
                     encoder: Callable[[TiledEncoding, int], bytes] = encode) -> list:
    """A kernel's arguments in its parameters' order: ``placed`` (``launch.values`` on the
    GPU), then its tensor maps (the last parameters, as the CUDA source declares them), each
    encoded from the address of the tensor it describes and passed by value. A map the
    driver refuses raises, naming the kernel and the parameter."""
    maps = []
    for number, (position, tiled) in enumerate(launch.tensor_maps):
        try:
            maps.append(kernel_argument(encoder(tiled, address(placed[position]))))
        except StrategyError as error:
            raise StrategyError(f"kernel {launch.name}, tensor map {number} (of its argument "
                                f"{position}): {error}") from None
    return placed + maps


def cuda_runtime() -> Runtime:
    """CuPy when it is installed, else pycuda; BackendUnavailable naming the extras when
    neither is, or when the one found sees no GPU."""
    if importlib.util.find_spec("cupy") is not None:
        return _cached(CupyRuntime)
    if importlib.util.find_spec("pycuda") is not None:
        return _cached(PycudaRuntime)
    raise BackendUnavailable(f"no CUDA runtime is installed: {INSTALL}")


def gpu_present() -> bool:
    """Whether kernels can run on a GPU here."""
    try:
        cuda_runtime()
    except BackendUnavailable:
        return False
    return True


def run_cuda(source: str, launch: Launch, cubins: Mapping[str, bytes] | None = None) -> Any:
    """Compile ``source`` (or load the cubin of ``cubins`` for this GPU), run ``launch`` and
    return the output: a numpy array when the launch holds numpy arrays, a device array (CuPy)
    when it holds device arrays."""
    return _run(source, launch, timed=False, cubins=cubins).result


def run_cuda_timed(source: str, launch: Launch) -> TimedRun:
    """Run ``launch`` as :func:`run_cuda` does, timed by a pair of CUDA events around its
    kernels (the uploads and the download are outside)."""
    return _run(source, launch, timed=True)


def _run(source: str, launch: Launch, timed: bool,
         cubins: Mapping[str, bytes] | None = None) -> TimedRun:
    """The output of ``launch`` and, when ``timed``, the seconds its kernels took (else 0)."""
    runtime = cuda_runtime()
    stored = launch.values[launch.output_position].dtype
    launch = _as_bits(launch)
    with runtime.active():
        run = _launcher(runtime, source, launch, cubins)
        arguments = runtime.upload(launch)
        seconds = 0.0
        if timed:
            start, end = runtime.event(), runtime.event()
            start.record()
            run(arguments)
            end.record()
            end.synchronize()
            seconds = runtime.elapsed(start, end)
        else:
            run(arguments)
        out = arguments[launch.output_position]
        on_host = isinstance(launch.values[launch.output_position], np.ndarray)
        result = launch.result((runtime.download(out) if on_host else out).view(stored))
    return TimedRun(result, seconds, runtime.device)


def time_cuda(source: str, launch: Launch, repeats: int = REPEATS, warmup: int = WARMUP,
              cubins: Mapping[str, bytes] | None = None) -> Timing:
    """Time ``launch`` with CUDA events (arguments uploaded once, outside the timing)."""
    runtime = cuda_runtime()
    launch = _as_bits(launch)
    with runtime.active():
        run = _launcher(runtime, source, launch, cubins)
        arguments = runtime.upload(launch)
        return time_calls(lambda: run(arguments), repeats, warmup)


def _launcher(runtime: Runtime, source: str, launch: Launch,
              cubins: Mapping[str, bytes] | None = None) -> Callable[[list], None]:
    """A function that launches every kernel of ``launch`` on uploaded ``arguments``, in order
    on one stream (the first, then those of ``launch.then`` on the values they name)."""
    first = runtime.function(source, launch.name, cubins)
    later = [(runtime.function(source, call.name, cubins), call) for call in launch.then]

    def run(arguments: list) -> None:
        runtime.call(first, launch, arguments)
        for function, call in later:
            runtime.call(function, call, [arguments[n] for n in call.arguments])

    return run


def registers_cuda(source: str, name: str, cubins: Mapping[str, bytes] | None = None) -> int:
    """Registers per thread of kernel ``name`` as the driver loaded it (no nvcc needed)."""
    runtime = cuda_runtime()
    with runtime.active():
        return runtime.registers(runtime.function(source, name, cubins))


def time_calls(call: Callable[[], Any], repeats: int = REPEATS,
               warmup: int = WARMUP) -> Timing:
    """Time ``call`` (work queued on the current CUDA stream: a kernel, cupy.einsum,
    torch.einsum) with a pair of CUDA events per call, after ``warmup`` untimed calls."""
    if repeats < 1:
        raise BackendUnavailable(f"repeats must be at least 1, got {repeats}")
    runtime = cuda_runtime()
    with runtime.active():
        for _ in range(warmup):
            call()
        seconds = []
        for _ in range(repeats):
            start, end = runtime.event(), runtime.event()
            start.record()
            call()
            end.record()
            end.synchronize()
            seconds.append(runtime.elapsed(start, end))
    return Timing.of(seconds, runtime.device)


@once_per_key(None)
def _cached(kind: type) -> Runtime:
    """One runtime per process, made once however many threads ask first (a failed start
    is not cached: it raises every time)."""
    return kind()


def _binary(source: str, arch: str, cubins: Mapping[str, bytes] | None) -> bytes | None:
    """What the runtime loads in place of compiling ``source`` its own way: the caller's cubin
    for ``arch``, else for a source that needs an architecture-specific target (wgmma:
    sm_90a, :func:`~treduda.codegen.targets.cuda_target`), which neither runtime asks for
    by itself, its PTX from NVRTC for that target (the driver loads PTX as it loads cubins);
    None where the runtime compiles the source."""
    binary = (cubins or {}).get(arch)
    if binary is None and cuda_target(source, arch) != arch:
        return _specific_ptx(source, arch)
    return binary


@functools.lru_cache(maxsize=256)
def _specific_ptx(source: str, arch: str) -> bytes:
    """NVRTC's PTX of ``source`` for ``arch``'s specific variant, compiled once."""
    return compile_nvrtc(source, arch).encode()


@functools.lru_cache(maxsize=256)
def _cupy_module(source: str):
    """The NVRTC-compiled module of ``source`` (CuPy also keeps compiled binaries on disk)."""
    cupy = cupy_module()
    return cupy.RawModule(code=source, backend="nvrtc", options=tuple(include_options(source)))


@functools.lru_cache(maxsize=256)
def _cupy_binary(binary: bytes):
    """The module of a cubin, loaded by CuPy from a file (``RawModule`` reads cubins from
    files, when first asked for a function, so the file stays for the process)."""
    path = Path(_binaries(), hashlib.sha256(binary).hexdigest()[:16] + ".cubin")
    path.write_bytes(binary)
    return cupy_module().RawModule(path=str(path))


@functools.cache
def _binaries() -> str:
    """A folder of this process's cubin files."""
    return tempfile.mkdtemp(prefix="treduda-cubins-")


def _pycuda_driver():
    try:
        import pycuda.driver as driver
    except ImportError as error:  # pycuda is there, the CUDA driver library is not
        raise BackendUnavailable(f"pycuda could not load the CUDA driver ({error}); this "
                                 "machine has no usable NVIDIA GPU: use backend='opencl'"
                                 ) from error
    return driver


def _pycuda_context(driver):
    """The primary context of device 0, or an explanation of why there is none."""
    try:
        driver.init()
        if driver.Device.count() == 0:
            raise BackendUnavailable("pycuda found no CUDA device; use backend='opencl'")
        return driver.Device(0).retain_primary_context()
    except driver.Error as error:
        raise BackendUnavailable(f"the CUDA driver could not start ({error}); "
                                 "use backend='opencl'") from error


def _as_bits(launch: Launch) -> Launch:
    """``launch`` with its bfloat16 arrays (on the host or on the GPU) as their 16-bit
    patterns: pycuda and CuPy before 14 do not know the type, and the kernel reads the bits
    (as ``__nv_bfloat16``)."""
    return replace(launch, values=tuple(
        v.view(np.uint16) if _is_array(v) and v.dtype == BFLOAT16 else v
        for v in launch.values))


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not np.isscalar(value)

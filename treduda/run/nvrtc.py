"""Compile CUDA text with NVRTC, the runtime compiler CuPy's ``RawModule`` uses, without a GPU.

NVRTC compiles device code only and defines ``__CUDACC_RTC__``; a source that nvcc accepts may
still fail here (host code, headers nvcc includes by itself). The library comes from the pip
package ``nvidia-cuda-nvrtc`` (in the test extra) or a CUDA toolkit, loaded through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os
from pathlib import Path

from ..codegen.targets import cuda_target
from ..errors import BackendUnavailable, CompileError

# Where the pip packages put the library (CUDA 13: nvidia/cu13/lib; CUDA 12:
# nvidia/cuda_nvrtc/lib), then a toolkit's lib64.
_PACKAGED = ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12")


def _candidates() -> list[str]:
    found = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        found += [str(Path(root, p)) for p in _PACKAGED if Path(root, p).is_file()]
    for home in filter(None, (os.environ.get("CUDA_HOME"), "/usr/local/cuda")):
        found += [str(p) for p in sorted(Path(home, "lib64").glob("libnvrtc.so*"))]
    system = ctypes.util.find_library("nvrtc")
    return found + ([system] if system else [])


@functools.cache
def _library() -> ctypes.CDLL:
    for path in _candidates():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        library.nvrtcGetErrorString.restype = ctypes.c_char_p
        return library
    raise BackendUnavailable("NVRTC was not found: pip install nvidia-cuda-nvrtc (or install "
                             "the CUDA toolkit) to compile CUDA text as CuPy does")


def nvrtc_available() -> bool:
    try:
        _library()
    except BackendUnavailable:
        return False
    return True


@functools.cache
def toolkit_headers() -> str | None:
    """An include folder that holds ``mma.h``: tensor-core kernels include it
    (``nvcuda::wmma``), and NVRTC finds no header by itself. A CUDA toolkit's, or the one of a
    pip package of CUDA headers (``nvidia-cuda-runtime``, which CuPy's ``[ctk]`` extra
    installs); ``nvidia-cuda-nvrtc`` ships none."""
    homes = [os.environ.get("CUDA_HOME"), "/usr/local/cuda",
             *sorted(map(str, Path("/usr/local").glob("cuda-*")), reverse=True)]
    folders = [Path(home, "include") for home in filter(None, homes)]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        folders += sorted(Path(root).glob("*/include"))
    return next((str(f) for f in folders if Path(f, "mma.h").is_file()), None)


def include_options(source: str) -> list[str]:
    """NVRTC's options for the headers ``source`` includes: the toolkit's include folder
    where it includes any (BackendUnavailable where there is none)."""
    if "#include" not in source:
        return []
    headers = toolkit_headers()
    if headers is None:
        raise BackendUnavailable("this kernel includes CUDA headers (mma.h: tensor cores), "
                                 "which NVRTC finds only in a CUDA toolkit: install one, or "
                                 "set CUDA_HOME")
    return [f"--include-path={headers}"]


def compile_nvrtc(source: str, arch: str = "compute_90", name: str = "treduda.cu") -> str:
    """Compile ``source`` to PTX for ``arch``, or its architecture-specific variant where the
    source needs it (:func:`~treduda.codegen.targets.cuda_target`); returns the PTX. Any
    warning in NVRTC's log is an error, as with nvcc (:data:`treduda.run.nvcc.NVCC_FLAGS`)."""
    arch = cuda_target(source, arch)
    nvrtc = _library()
    program = ctypes.c_void_p()
    _check(nvrtc.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0,
                                    None, None), "nvrtcCreateProgram")
    try:
        options = [o.encode() for o in (f"--gpu-architecture={arch}",
                                        *include_options(source))]
        result = nvrtc.nvrtcCompileProgram(program, len(options),
                                           (ctypes.c_char_p * len(options))(*options))
        log = _text(nvrtc, program, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog")
        if result != 0 or "warning" in log.lower():
            raise CompileError(f"NVRTC rejected the source for {arch}", log.strip())
        return _text(nvrtc, program, "nvrtcGetPTXSize", "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))


def _text(nvrtc: ctypes.CDLL, program: ctypes.c_void_p, size_call: str, text_call: str) -> str:
    size = ctypes.c_size_t()
    _check(getattr(nvrtc, size_call)(program, ctypes.byref(size)), size_call)
    buffer = ctypes.create_string_buffer(size.value)
    _check(getattr(nvrtc, text_call)(program, buffer), text_call)
    return buffer.value.decode(errors="replace")


def _check(result: int, call: str) -> None:
    if result != 0:
        message = _library().nvrtcGetErrorString(result).decode()
        raise CompileError(f"NVRTC's {call} failed: {message}")

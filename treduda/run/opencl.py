"""The embedded backend: OpenCL on the CPU through PoCL (``pyopencl`` +
``pocl-binary-distribution``), so every kernel can run and be checked on any machine.

PoCL's CPU device has real work-groups, local memory and barriers, so the OpenCL text printed
from the same IR as the CUDA text exercises the same loops, guards and synchronisation.
"""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np

from ..errors import BackendUnavailable, CompileError
from .launch import Launch


@functools.cache
def _queue():
    """One command queue on PoCL's CPU device (or $PYOPENCL_CTX's choice when set)."""
    try:
        import pyopencl as cl
    except ImportError as error:  # pragma: no cover - pyopencl is a dependency
        raise BackendUnavailable("pyopencl is not installed: pip install pyopencl "
                                 "pocl-binary-distribution") from error
    try:
        if "PYOPENCL_CTX" in os.environ:
            context = cl.create_some_context(interactive=False)
        else:
            platforms = cl.get_platforms()
            pocl = [p for p in platforms if "Portable Computing Language" in p.name]
            context = cl.Context(devices=(pocl or platforms)[0].get_devices())
    except (cl.Error, IndexError) as error:
        raise BackendUnavailable("no OpenCL device found; pip install pocl-binary-distribution "
                                 f"for a CPU device ({error})") from error
    return cl.CommandQueue(context)


@functools.lru_cache(maxsize=256)
def _program(source: str):
    import pyopencl as cl

    queue = _queue()
    try:
        with warnings.catch_warnings():  # pyopencl warns about non-empty build logs
            warnings.simplefilter("ignore")
            return cl.Program(queue.context, source).build()
    except cl.RuntimeError as error:
        raise CompileError("the OpenCL compiler rejected a generated kernel", str(error)) from error


def run_opencl(source: str, launch: Launch) -> np.ndarray:
    """Run ``launch`` with the OpenCL ``source`` and return the output array."""
    import pyopencl as cl

    queue = _queue()
    kernel = cl.Kernel(_program(source), launch.name)
    flags = cl.mem_flags
    buffers, arguments = [], []
    for position, value in enumerate(launch.values):
        if isinstance(value, np.ndarray):
            access = flags.READ_WRITE if position == launch.output_position else flags.READ_ONLY
            buffer = cl.Buffer(queue.context, access | flags.COPY_HOST_PTR, hostbuf=value)
            buffers.append(buffer)
            arguments.append(buffer)
        else:
            arguments.append(value)
    kernel(queue, launch.global_size(), launch.block, *arguments)
    output = np.empty_like(launch.values[launch.output_position])
    cl.enqueue_copy(queue, output, arguments[launch.output_position])
    queue.finish()
    return launch.result(output)

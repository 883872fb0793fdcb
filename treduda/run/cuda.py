"""The GPU backend: the CUDA text run through pycuda (the optional extra ``treduda[cuda]``).

The arguments come from the same :class:`~treduda.run.launch.Launch` as PoCL's, so on a machine
without a GPU everything up to the driver call is still exercised by the tests.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from ..errors import BackendUnavailable
from .launch import Launch


def cuda_device():
    """Initialise the CUDA driver and return a context on device 0, or explain why not."""
    if importlib.util.find_spec("pycuda") is None:
        raise BackendUnavailable("pycuda is not installed: pip install 'treduda[cuda]' on a "
                                 "machine with an NVIDIA GPU, or use backend='opencl'")
    try:
        import pycuda.driver as driver
    except ImportError as error:  # pycuda is there, the CUDA driver library is not
        raise BackendUnavailable(f"pycuda could not load the CUDA driver ({error}); this "
                                 "machine has no usable NVIDIA GPU: use backend='opencl'"
                                 ) from error
    try:
        driver.init()
        if driver.Device.count() == 0:
            raise BackendUnavailable("pycuda found no CUDA device; use backend='opencl'")
        return driver.Device(0).retain_primary_context()
    except driver.Error as error:
        raise BackendUnavailable(f"the CUDA driver could not start ({error}); "
                                 "use backend='opencl'") from error


def driver_arguments(launch: Launch, driver) -> list:
    """pycuda's view of the arguments: arrays copied in (the output also back out)."""
    return [(driver.InOut(v) if n == launch.output_position else driver.In(v))
            if isinstance(v, np.ndarray) else v for n, v in enumerate(launch.values)]


def run_cuda(source: str, launch: Launch, arch: str | None = None) -> np.ndarray:
    """Compile ``source`` with nvcc through pycuda, run ``launch`` and return the output."""
    context = cuda_device()
    context.push()
    try:
        import pycuda.driver as driver
        from pycuda.compiler import SourceModule

        module = SourceModule(source, no_extern_c=True, arch=arch)
        function = module.get_function(launch.name)
        function(*driver_arguments(launch, driver), grid=launch.grid, block=launch.block)
        driver.Context.synchronize()
        return launch.result(launch.values[launch.output_position])
    finally:
        context.pop()

"""The embedded backend: OpenCL on the CPU through PoCL (``pyopencl`` +
``pocl-binary-distribution``), so every kernel can run and be checked on any machine.

PoCL's CPU device has real work-groups, local memory and barriers, so the OpenCL text printed
from the same IR as the CUDA text exercises the same loops, guards and synchronisation.

With ``guard=True`` every tensor lives between two guard zones, so an access outside it can be
seen instead of silently touching (or crashing on) neighbouring memory: inputs are padded with
NaN, which poisons any result computed from a stray read, and the output with a sentinel that
must still be there afterwards, which catches a stray write.
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import BackendUnavailable, CompileError, VerificationError
from ..frontend.dtypes import poison
from ..once import once_per_key
from .launch import Launch
from .timing import REPEATS, WARMUP, TimedRun, Timing

GUARD_ELEMENTS = 1024  # at least this many guard elements on each side of a tensor
# Written into the output's guard zones. Finite and of moderate size, so that a stray
# read-modify-write (``C[x] += v``) changes it too; a NaN would survive ``NaN + v`` unchanged.
SENTINEL = -7.25


@once_per_key(None)
def _queue():
    """One command queue on PoCL's CPU device (or $PYOPENCL_CTX's choice when set), made once
    however many threads ask for it first; OpenCL's queues take commands from many threads."""
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
    # Profiling gives each launch the device's own start and end times (Kernel.time).
    return cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)


def build_options() -> list[str]:
    """OpenCL compiler options for a generated kernel.

    Argument names are kept so that guard errors can name the tensor. PoCL 3.0 runs some
    loops that contain barriers wrongly, e.g. this one stores for ``j == 3`` (local size 2,
    global size 4) when optimised::

        float acc = 0.0f;
        for (int s = 0; s < 2; s++) {
          barrier(CLK_LOCAL_MEM_FENCE);
          if (j <= 2) { for (int c = 0; c < 4; c++) acc += 1.0f; }
        }
        if (j <= 2) D[j] = acc;   // j = get_global_id(0)

    and some preloaded staging kernels even unoptimised (the emulator of
    :mod:`treduda.run.emulator` finds those correct and race-free). A barrier closing each
    such loop fixes both, so the OpenCL printer adds one (``Dialect.barrier_closes_loops``).
    Kernels with barriers are still built without optimisation, and so is every other: PoCL
    runs them to check them at small sizes, where LLVM's optimisation took most of the time
    (with an empty PoCL kernel cache, tests/test_suites.py 45 -> 16 CPU s, test_strategies.py
    45 -> 27; timing on PoCL, ``measure=True`` without a GPU, ranks unoptimised builds).
    """
    return ["-cl-kernel-arg-info", "-cl-opt-disable"]


@functools.lru_cache(maxsize=256)
def _program(source: str):
    """The built program (see :func:`build_options`)."""
    import pyopencl as cl

    queue = _queue()
    try:
        with warnings.catch_warnings():  # pyopencl warns about non-empty build logs
            warnings.simplefilter("ignore")
            return cl.Program(queue.context, source).build(options=build_options())
    except cl.RuntimeError as error:
        raise CompileError("the OpenCL compiler rejected a generated kernel", str(error)) from error


def run_opencl(source: str, launch: Launch, guard: bool = False) -> np.ndarray:
    """Run ``launch`` with the OpenCL ``source`` and return the output array.

    With ``guard``, tensors are surrounded by guard zones (see the module's docstring) and a
    write outside the output raises :class:`~treduda.errors.VerificationError`.
    """
    return _run(source, launch, guard)[0]


def bind_opencl(source: str, launch: Launch) -> None:
    """Build ``source`` and bind ``launch``'s arguments to its kernels (each in device
    memory, the sizes and scalars as the source declares them) without running them: what a
    run proves before the device works, for a kernel too large to run on the CPU (the dry
    run of full-size bundles). Raises where the source does not build or an argument does
    not fit its parameter."""
    kernels, placed = _placed(source, launch, guard=False)
    values = [p.region if isinstance(p, _Placed) else p for p in placed]
    kernels[0].set_args(*values)
    for kernel, call in zip(kernels[1:], launch.then, strict=True):
        kernel.set_args(*[values[n] for n in call.arguments])


def run_opencl_timed(source: str, launch: Launch) -> TimedRun:
    """Run ``launch`` as :func:`run_opencl` does, timed by the profiling events of its own
    kernels (from the start of the first to the end of the last; the copies are outside)."""
    result, events = _run(source, launch, guard=False)
    return TimedRun(result, _elapsed(events), opencl_device())


def opencl_device() -> str:
    """What times kernels here, as :class:`~treduda.run.timing.Timing` names it."""
    return f"{_queue().device.name.strip()} (OpenCL profiling events)"


def _run(source: str, launch: Launch, guard: bool) -> tuple[np.ndarray, list]:
    """The output array of ``launch`` and the events of its kernels."""
    import pyopencl as cl

    queue = _queue()
    kernels, placed = _placed(source, launch, guard)
    events = _enqueue(queue, kernels, launch, placed)
    out = placed[launch.output_position]
    memory = np.empty_like(out.host)
    cl.enqueue_copy(queue, memory, out.buffer)
    queue.finish()
    if guard:
        _check_guards(memory, out.before, out.size, launch.name,
                      _argument_name(kernels[0], launch))
    return launch.result(memory[out.before:out.before + out.size]), events


def _elapsed(events: list) -> float:
    """Seconds from the start of the first event's command to the end of the last's."""
    return (events[-1].profile.end - events[0].profile.start) * 1e-9


def time_opencl(source: str, launch: Launch, repeats: int = REPEATS,
                warmup: int = WARMUP) -> Timing:
    """Time ``launch`` by OpenCL profiling events (arguments placed once, outside the timing),
    from the start of its first kernel to the end of its last.

    On PoCL this is a CPU's time: it ranks candidates by what runs here, not on a GPU."""
    if repeats < 1:
        raise BackendUnavailable(f"repeats must be at least 1, got {repeats}")
    queue = _queue()
    kernels, placed = _placed(source, launch, guard=False)
    for _ in range(warmup):
        _enqueue(queue, kernels, launch, placed)[-1].wait()
    seconds = []
    for _ in range(repeats):
        events = _enqueue(queue, kernels, launch, placed)
        events[-1].wait()
        seconds.append(_elapsed(events))
    return Timing.of(seconds, opencl_device())


def _placed(source: str, launch: Launch, guard: bool) -> tuple[list, list]:
    """The kernels (the first, then those of ``launch.then``), and the arguments in device
    memory (guarded if asked) or as scalars."""
    import pyopencl as cl

    queue = _queue()
    program = _program(source)
    kernels = [cl.Kernel(program, name) for name in (launch.name,
                                                     *(c.name for c in launch.then))]
    align = queue.device.mem_base_addr_align // 8  # the device reports bits
    placed: list = []
    for position, value in enumerate(launch.values):
        if isinstance(value, np.ndarray):
            zone = guard_elements(value.itemsize, align) if guard else 0
            written = position == launch.output_position or position in launch.workspaces
            placed.append(_Placed.create(queue.context, value, written, zone))
        else:
            placed.append(value)  # a scalar or a size
    return kernels, placed


def _enqueue(queue, kernels: list, launch: Launch, placed: list) -> list:
    """Launch every kernel once, in order (the queue runs them so); returns their events."""
    values = [p.region if isinstance(p, _Placed) else p for p in placed]
    events = [kernels[0](queue, launch.global_size(), launch.block, *values)]
    for kernel, call in zip(kernels[1:], launch.then, strict=True):
        events.append(kernel(queue, call.global_size(), call.block,
                             *[values[n] for n in call.arguments]))
    return events


def guard_elements(itemsize: int, align: int) -> int:
    """Elements in one guard zone: at least :data:`GUARD_ELEMENTS`, and a whole number of the
    device's base address alignment (``align`` bytes), because OpenCL only places a sub-buffer
    (the tensor inside its guarded allocation) at an aligned offset."""
    unit = math.lcm(align, itemsize)
    return -(-GUARD_ELEMENTS * itemsize // unit) * unit // itemsize


@dataclass(frozen=True)
class _Placed:
    """A tensor in device memory: ``before`` guard elements, the ``size`` tensor elements, as
    many guard elements again; ``region`` is the tensor's part, which the kernel receives."""

    host: np.ndarray  # the whole allocation's initial contents
    buffer: object  # pyopencl.Buffer over all of it
    region: object  # the tensor: the buffer itself, or a sub-buffer of it
    before: int
    size: int

    @classmethod
    def create(cls, context, value: np.ndarray, output: bool, zone: int) -> _Placed:
        import pyopencl as cl

        host = value
        if zone:
            # a stray read of an input yields NaN (an integer type's most negative value)
            fill = SENTINEL if output else poison(value.dtype.name)
            host = np.full(zone + value.size + zone, fill, dtype=value.dtype)
            host[zone:zone + value.size] = value
        access = cl.mem_flags.READ_WRITE if output else cl.mem_flags.READ_ONLY
        buffer = cl.Buffer(context, access | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
        region = buffer.get_sub_region(zone * value.itemsize, value.nbytes, access) if zone \
            else buffer
        return cls(host, buffer, region, zone, value.size)


def _check_guards(memory: np.ndarray, before: int, size: int, kernel: str,
                  tensor: str) -> None:
    """Raise if any guard element of the output no longer holds the sentinel (bit for bit)."""
    sentinel = np.array([SENTINEL], dtype=memory.dtype).view(np.uint8)
    changed = (memory.view(np.uint8).reshape(memory.size, -1) != sentinel).any(axis=1)
    below = int(np.count_nonzero(changed[:before]))
    above = int(np.count_nonzero(changed[before + size:]))
    if below or above:
        where = " and ".join(f"{n} element(s) {side} it" for n, side in
                             ((below, "before"), (above, "after")) if n)
        raise VerificationError(f"kernel {kernel} wrote outside its output {tensor} "
                                f"({size} elements): {where}")


def _argument_name(kernel, launch: Launch) -> str:
    """The output's name as the source declares it (needs ``-cl-kernel-arg-info``)."""
    import pyopencl as cl

    try:
        return kernel.get_arg_info(launch.output_position, cl.kernel_arg_info.NAME)
    except cl.Error:  # an OpenCL implementation that does not keep argument names
        return f"(argument {launch.output_position} of {launch.name})"

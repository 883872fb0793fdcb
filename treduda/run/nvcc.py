"""Compile CUDA sources with nvcc and read back ptxas's per-kernel resource usage.

No GPU is needed: ``-cubin`` stops after ptxas, whose ``-v`` report (registers, spills,
shared memory, stack) is what tells whether a generated kernel is any good. Every nvcc
call costs about a second of start-up, so :func:`compile_cuda_batch` compiles many
sources as one translation unit.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from treduda.codegen.targets import cuda_target
from treduda.errors import BackendUnavailable, CompileError
from treduda.once import once_per_key

TIMEOUT_SECONDS = 300
# -Werror all-warnings reaches every stage -cubin runs: the gcc preprocessor (-Werror: macro
# redefinitions, #warning), the EDG front end for host and device code (--promote_warnings:
# unused or uninitialised variables, `=` in conditions) and ptxas (--warning-as-error).
# -rdc=false (nvcc's default, said out loud) compiles whole programs, as NVRTC does.
NVCC_FLAGS = ("-cubin", "-rdc=false", "-Xptxas", "-v", "-Werror", "all-warnings")

_ARCH = re.compile(r"sm_\d+[af]?")
_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\("
)
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+)(?:\+\d+)? bytes smem")  # old sm_1x ptxas printed "N+M bytes smem"
_COUNTS = ("registers", "spill_stores", "spill_loads", "shared_bytes", "stack_bytes")
_WARNING = re.compile(r"\bwarning\s*(?:#\S+\s*)?:", re.IGNORECASE)


@dataclass(frozen=True)
class CudaReport:
    """What ptxas says one kernel costs on one architecture."""

    kernel: str
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    stack_bytes: int

    @property
    def name(self) -> str:
        """The kernel's own name, without a namespace ptxas may put before it."""
        return self.kernel.rpartition("::")[2]

    @property
    def spill_bytes(self) -> int:
        """Bytes of spill stores and spill loads per thread."""
        return self.spill_stores + self.spill_loads

    def __str__(self) -> str:
        return (
            f"{self.kernel}: {self.registers} registers, {self.spill_bytes} B spills, "
            f"{self.shared_bytes} B shared ({self.arch})"
        )


def find_nvcc() -> str | None:
    """Locate nvcc on PATH, else in $CUDA_HOME/bin or /usr/local/cuda/bin."""
    found = shutil.which("nvcc")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    for home in filter(None, homes):
        candidate = Path(home, "bin", "nvcc")
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def nvcc_available() -> bool:
    """Whether CUDA kernels can be compiled here (a GPU is not needed)."""
    return find_nvcc() is not None


@functools.cache
def nvcc_supports(arch: str) -> bool:
    """Whether this nvcc compiles for ``arch`` (e.g. ``"sm_90"``); CUDA 13 dropped the
    oldest architectures (``nvcc --list-gpu-arch``)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return False
    listed = run_tool([nvcc, "--list-gpu-arch"], "nvcc could not list its architectures")
    return arch.replace("sm_", "compute_") in listed.stdout.split()


def kernel_names(source: str) -> list[str]:
    """The ``__global__`` function names declared in ``source``, in source order."""
    return _KERNEL.findall(source)


def code_of(source: str) -> str:
    """``source`` as ptxas sees it: equal for sources that differ only in their kernels'
    names and their comments, which compile alike (tccg_28: a thread's eight registers
    along an axis of one thread, assigned cyclic, adjacent or as vectors, make one kernel;
    its header names the parameters, its name their hash)."""
    names = kernel_names(source)
    for number, name in sorted(enumerate(names), key=lambda pair: -len(pair[1])):
        source = source.replace(name, f"kernel_{number}")  # the longest first: no prefix
    return "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith("//"))


def code_digest(source: str) -> str:
    """A short hash of :func:`code_of` ``source``: what the GPU benchmark records of each kernel
    it times, so that a later fidelity run knows whether today's kernel is the one timed."""
    return hashlib.sha256(code_of(source).encode()).hexdigest()[:16]


def _demangle(symbol: str) -> str:
    """Turn ``_Z4gemmPf`` into ``gemm`` and ``_ZN2ns4gemmEPf`` into ``ns::gemm``.

    ptxas reports mangled symbols; only the name part is needed, not the full C++ type.
    """
    match = re.match(r"_Z(N?)", symbol)
    if not match:
        return symbol  # extern "C"
    nested, position, parts = bool(match.group(1)), match.end(), []
    while length := re.match(r"\d+", symbol[position:]):
        start = position + length.end()
        position = start + int(length.group())
        parts.append(symbol[start:position])
        if not nested:
            break
    return "::".join(parts) or symbol


def parse_ptxas(log: str) -> list[CudaReport]:
    """One report per entry function in a ptxas ``-v`` log, in the order ptxas lists them.

    ``__noinline__`` device functions get "Function properties" lines of their own; those
    are skipped so that a helper's stack and spills are not booked to a kernel.
    """
    rows: list[dict] = []
    row: dict | None = None
    symbol = properties_of = ""
    for line in log.splitlines():
        if entry := _ENTRY.search(line):
            symbol, arch = entry.groups()
            properties_of = ""
            row = {"kernel": _demangle(symbol), "arch": arch, **dict.fromkeys(_COUNTS, 0)}
            rows.append(row)
        elif properties := _PROPERTIES.search(line):
            properties_of = properties.group(1)
        elif row is None:
            continue
        elif (frame := _FRAME.search(line)) and properties_of == symbol:
            stack, stores, loads = map(int, frame.groups())
            row.update(stack_bytes=stack, spill_stores=stores, spill_loads=loads)
        elif registers := _REGISTERS.search(line):
            row["registers"] = int(registers.group(1))
            if smem := _SMEM.search(line):
                row["shared_bytes"] = int(smem.group(1))
    return [CudaReport(**row) for row in rows]


def _target(arch: str) -> list[str]:
    """nvcc's options for ``arch``: an architecture-specific one (``sm_90a``: wgmma,
    setmaxnreg) as ``-gencode`` of its own virtual architecture, which nvcc 13's ``-arch``
    shorthand was seen to follow with a plain sm_90 pass that rejects those instructions
    (/work/.library/device/HOPPER.md)."""
    if arch.endswith("a"):
        number = arch.removeprefix("sm_")
        return [f"-gencode=arch=compute_{number},code=sm_{number}"]
    return [f"-arch={arch}"]


@contextlib.contextmanager
def cubin(source: str, arch: str = "sm_90") -> Iterator[tuple[Path, str]]:
    """Compile ``source`` into a temporary cubin for ``arch``, or its architecture-specific
    variant where the source needs it (:func:`~treduda.codegen.targets.cuda_target`); yields
    its path and ptxas's log.

    Any warning is an error. The cubin disappears when the ``with`` block ends."""
    arch = cuda_target(source, arch)
    if not _ARCH.fullmatch(arch):
        raise CompileError(
            f"invalid CUDA architecture {arch!r}: expected 'sm_' and a compute capability, "
            "e.g. 'sm_80' or 'sm_90'"
        )
    nvcc = find_nvcc()
    if nvcc is None:
        raise BackendUnavailable(
            "nvcc was not found on PATH (nor in $CUDA_HOME/bin); install the CUDA toolkit "
            "to compile and inspect CUDA kernels"
        )
    data, log = _compiled(nvcc, arch, source)
    with tempfile.TemporaryDirectory(prefix="treduda-nvcc-") as tmp:
        binary = Path(tmp, "k.cubin")
        binary.write_bytes(data)
        yield binary, log


# The last 64 kept: nvcc makes the same cubin of the same source (CUDA 13: byte for byte;
# ptxas's log differs in its "Compile time" line only, which nothing reads), and one process
# compiles a kernel again where the search's check, its model's refinement, its SASS report
# and its export each compile it (about a CPU second each). Failures are not kept.
@once_per_key(64)
def _compiled(nvcc: str, arch: str, source: str) -> tuple[bytes, str]:
    """nvcc's cubin of ``source`` for ``arch`` and ptxas's log."""
    names = ", ".join(kernel_names(source)) or "<no __global__ function>"
    failure = f"nvcc failed to compile kernel {names} for {arch}"
    with tempfile.TemporaryDirectory(prefix="treduda-nvcc-") as tmp:
        cu, binary = Path(tmp, "k.cu"), Path(tmp, "k.cubin")
        cu.write_text(source)
        done = run_tool([nvcc, *_target(arch), *NVCC_FLAGS, "-o", str(binary), str(cu)],
                        failure)
        log = done.stdout + done.stderr
        # Warnings nvcc does not promote (its own driver messages) must fail too.
        if done.returncode != 0 or _WARNING.search(log):
            raise CompileError(failure, log=log)
        return binary.read_bytes(), log


def run_tool(command: list[str], failure: str) -> subprocess.CompletedProcess[str]:
    """Run a CUDA tool with the time limit; a time-out is a CompileError saying ``failure``.

    The tool runs in a process group of its own, so that a time-out also stops what nvcc
    started (cicc, ptxas), which would otherwise run on, holding a core."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as exc:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise CompileError(f"{failure}: timed out after {TIMEOUT_SECONDS} s") from exc
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def nvrtc_view(source: str) -> str:
    """``source`` as NVRTC sees it: preprocessed with ``__CUDACC_RTC__`` defined, the macro
    NVRTC defines, so code guarded against it (the host glue) is gone.

    nvcc preprocesses it as plain C++ (``-x c++``): its CUDA runtime header, which it would
    otherwise include first, does not compile with that macro defined."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise BackendUnavailable("nvcc was not found on PATH (nor in $CUDA_HOME/bin); install "
                                 "the CUDA toolkit to preprocess CUDA sources")
    with tempfile.TemporaryDirectory(prefix="treduda-nvcc-") as tmp:
        cu = Path(tmp, "k.cu")
        cu.write_text(source)
        done = run_tool([nvcc, "-E", "-x", "c++", "-D__CUDACC_RTC__", "-Xcompiler", "-P",
                         str(cu)], "nvcc failed to preprocess a source as NVRTC sees it")
    if done.returncode != 0:
        raise CompileError("nvcc failed to preprocess a source as NVRTC sees it", done.stderr)
    return done.stdout


class Named(Protocol):
    """A per-kernel report: what a batch hands back to the source holding that kernel."""

    @property
    def name(self) -> str: ...


Report = TypeVar("Report", bound=Named)
# What a compilation reads of its cubin and ptxas's log: one report per kernel.
Reader = Callable[[Path, str], list[Report]]


def _ptxas(_binary: Path, log: str) -> list[CudaReport]:
    return parse_ptxas(log)


def compile_cuda(source: str, arch: str = "sm_90", read: Reader = _ptxas) -> list[Report]:
    """Compile one source to a cubin; one report per kernel (ptxas's, or what ``read`` makes
    of the cubin and ptxas's log while the cubin exists). Any warning is an error."""
    with cubin(source, arch) as (binary, log):
        return read(binary, log)


def compile_cuda_batch(sources: Sequence[str], arch: str = "sm_90", read: Reader = _ptxas
                       ) -> list[list[Report]]:
    """Compile many sources in as many nvcc calls as there are cores, running at once, and
    give each source its own reports (ptxas's, or ``read``'s as for :func:`compile_cuda`).

    The sources must be legal as one translation unit (unique kernel names, guarded
    macros); a source given twice is compiled once. If a call fails, each of its sources is
    compiled alone so that the error names the source at fault (and if none fails alone,
    those results are returned).
    """
    unique = list(dict.fromkeys(sources))
    if not unique:
        return []
    calls = min(len(unique), os.cpu_count() or 1)
    # a source that needs an architecture-specific target (wgmma: sm_90a) is compiled apart
    # from the others, which keep ``arch``
    targets: dict[str, list[str]] = {}
    for source in unique:
        targets.setdefault(cuda_target(source, arch), []).append(source)
    groups = [group for same in targets.values() for n in range(calls)
              if (group := same[n::calls])]
    with concurrent.futures.ThreadPoolExecutor(min(len(groups), calls)) as pool:
        reports = list(pool.map(lambda group: _batch(group, arch, read), groups))
    found = {source: report for group, got in zip(groups, reports, strict=True)
             for source, report in zip(group, got, strict=True)}
    return [found[source] for source in sources]


def _batch(sources: list[str], arch: str, read: Reader) -> list[list[Report]]:
    """One nvcc call for ``sources`` (each compiled alone where the batch fails); the batches
    of :func:`compile_cuda_batch` run at once, one per core: nvcc compiles a translation
    unit's kernels one after another, and each call spends half a second before the first."""
    try:
        reports = compile_cuda("\n".join(sources), arch, read)
    except CompileError:
        return [compile_cuda(source, arch, read) for source in sources]
    names = [set(kernel_names(source)) for source in sources]
    return [[r for r in reports if r.name in mine] for mine in names]

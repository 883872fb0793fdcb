"""The generated kernel as users hold it: its sources, launch geometry, and ways to run and check
it. Built by :func:`treduda.compile`; immutable afterwards."""

from __future__ import annotations

import functools
import importlib.resources
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .codegen import ir, parts, serial
from .codegen.printer import CUDA, OPENCL, Dialect, Printer
from .errors import (
    BackendUnavailable,
    MissingSize,
    StoredDataError,
    VerificationError,
)
from .frontend.contraction import Contraction
from .frontend.dtypes import DEFAULT_CASTING, real, uniform
from .frontend.identity import Identity
from .frontend.merge import Merging, merge
from .options import BACKENDS, check_tensor_names, merged_mapping
from .polyhedral.ast_build import Built, grid_at
from .polyhedral.lower import Program, plan
from .polyhedral.strategy import read_only
from .run import reference
from .run.device_arrays import cupy_module, first_device_array, like
from .run.launch import Launch, bind, prepare_all
from .run.timing import REPEATS, WARMUP, TimedRun, Timing
from .versions import installed_version, sources_digest

if TYPE_CHECKING:
    import jinja2

LAYOUT_NOTES = {"C": "row-major, last index fastest", "F": "column-major, first index fastest"}
RUN_KEYWORDS = ("backend", "casting", "arrays")  # Kernel.run's; tensors so named: arrays=
RECORD_FORMAT = 1  # of Kernel.record(); the generator's version hashes this module too


@dataclass(frozen=True, eq=False)
class Kernel:
    """A contraction compiled by one strategy with fixed parameters.

    Generated in this process (:meth:`generated`), it holds its program and kernel IR. Loaded
    from the kernel store (:meth:`from_record`), it holds its sources and what a launch needs
    (:attr:`signature`: geometry, parameters, locals); its IR's body is decoded when first
    asked for (:attr:`built`: the emulator, the walk) and its program planned, with isl, only
    where something needs it (:attr:`program`).

    Safe to call from many threads at once: it is immutable, each run binds, uploads and
    launches arrays of its own, and what it computes when first asked for (sources, IR,
    program) is the same whichever thread computes it."""

    contraction: Contraction
    identity: Identity  # everything that shaped it: the problem, strategy and parameters
    strategy: str
    params: Mapping[str, Any]  # read-only once made
    sizes: dict[str, int] | None  # the extents it was generated for; None when arguments
    signature: Built  # the launch geometry and the kernel IR, its body left out when stored
    planned: Program | None = field(default=None, repr=False)  # generated here: its program
    stored: Mapping[str, Any] | None = field(default=None, repr=False)  # loaded: its record

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", read_only(self.params))

    @classmethod
    def generated(cls, program: Program, built: Built, strategy: str,
                  params: Mapping[str, Any]) -> Kernel:
        """The kernel ``built`` from ``program`` by ``strategy`` with ``params``."""
        return cls(program.original, program.identity.generated(strategy, params), strategy,
                   params, program.expression_sizes, built, planned=program)

    @classmethod
    def from_record(cls, record: Mapping[str, Any], contraction: Contraction,
                    identity: Identity) -> Kernel:
        """The kernel :meth:`record` describes, for ``contraction`` (spelt as it likes: the
        sources are printed again where the spelling differs) and the problem of
        ``identity``; StoredDataError where the record is not one, or not of this problem."""
        try:
            if record.get("format") != RECORD_FORMAT:
                raise StoredDataError(f"a kernel record of format {record.get('format')!r}, "
                                      f"this treduda reads {RECORD_FORMAT}")
            stored = Identity(**{name: value for name, value in record["identity"].items()
                                 if name not in ("sizes", "params")},
                              sizes=(record["identity"]["sizes"]
                                     if isinstance(record["identity"]["sizes"], str) else
                                     tuple(tuple(pair) for pair in record["identity"]["sizes"])),
                              params=tuple(tuple(pair) for pair in record["identity"]["params"]))
            if stored.problem != identity.problem:
                raise StoredDataError(f"a record of the kernel {stored.to_json()}")
            signature = _decoder()(record["signature"])
            sizes = None if record["sizes"] is None else dict(record["sizes"])
            params = dict(record["params"])
            if not isinstance(signature, Built) or not isinstance(record["body"], dict):
                raise StoredDataError("its signature or body is not kernel IR")
            return cls(contraction, stored, record["strategy"], params, sizes, signature,
                       stored=record)
        except (KeyError, TypeError, ValueError) as e:
            raise StoredDataError(f"a damaged kernel record ({type(e).__name__}: {e})") from None

    def record(self) -> dict[str, Any]:
        """The kernel as JSON data, for the kernel store: its identity, the sources, what a
        launch needs, and the IR's body (decoded only when asked for)."""
        built = self.built
        signature = replace(built, kernel=replace(built.kernel, body=ir.Block(())))
        return {"format": RECORD_FORMAT, "identity": self.identity.fields(),
                "expression": self.expression, "strategy": self.strategy,
                "params": [[name, value] for name, value in self.params.items()],
                "sizes": None if self.sizes is None else [[i, n] for i, n in self.sizes.items()],
                "signature": serial.encode(signature),
                "body": serial.encode(built.kernel.body),
                "sources": {"cuda": self.cuda_source, "opencl": self.opencl_source}}

    @cached_property
    def built(self) -> Built:
        """The kernel IR and its launch geometry (a stored kernel's body decoded now)."""
        if self.stored is None:
            return self.signature
        body = _decoder()(self.stored["body"])
        return replace(self.signature, kernel=replace(self.signature.kernel, body=body))

    @cached_property
    def program(self) -> Program:
        """The polyhedral program (a stored kernel's planned now, which takes isl)."""
        if self.planned is not None:
            return self.planned
        return plan(self.contraction, self.sizes, self.layout, self.dtype,
                    symbolic=self.symbolic, deterministic=self.deterministic,
                    precision=self.precision)

    @cached_property
    def merging(self) -> Merging:
        """The indices the kernel treats as one (no isl: merging is the frontend's)."""
        return self.planned.merging if self.planned is not None else merge(self.contraction)

    @property
    def name(self) -> str:
        return self.signature.kernel.name

    @property
    def expression(self) -> str:
        return self.contraction.source

    @property
    def merged(self) -> dict[str, tuple[str, ...]]:
        """Indices the kernel treats as one (:mod:`~treduda.frontend.merge`): merged -> indices."""
        return self.merging.merges

    @property
    def symbolic(self) -> bool:
        return self.sizes is None

    @property
    def dtype(self) -> str:
        return self.identity.dtype

    @property
    def layout(self) -> str:
        return self.identity.layout

    @property
    def deterministic(self) -> bool:
        """Whether the kernel gives the same result bit for bit on every run (no atomics)."""
        return self.identity.deterministic

    @property
    def precision(self) -> str:
        """How the kernel's products round float32 inputs (``dtypes.PRECISIONS``)."""
        return self.identity.precision

    @property
    def block(self) -> tuple[int, int, int]:
        return self.signature.block

    @property
    def grid(self) -> tuple[int, int, int] | None:
        """Blocks per grid axis; None for a symbolic kernel (see :meth:`grid_for`)."""
        return None if self.symbolic else self.grid_for(self.sizes)

    def grid_for(self, sizes: Mapping[str, int]) -> tuple[int, int, int]:
        return grid_at(self.signature.grid, self.merging, sizes)

    @property
    def ast(self) -> str:
        """isl's AST of the kernel, as isl prints it."""
        return self.signature.ast

    @cached_property
    def cuda_source(self) -> str:
        return self._stored_source("cuda") or self._render(CUDA, "kernel.cu.j2")

    @cached_property
    def opencl_source(self) -> str:
        return self._stored_source("opencl") or self._render(OPENCL, "kernel.cl.j2")

    def _stored_source(self, dialect: str) -> str | None:
        """A stored kernel's source, where it was stored for this spelling of the expression
        (the source's header quotes it)."""
        if self.stored is None or self.stored["expression"] != self.expression:
            return None
        source = self.stored["sources"][dialect]
        if not isinstance(source, str):
            raise StoredDataError(f"the stored {dialect} source is not text")
        return source

    def run(self, *, backend: str = "opencl", casting: str = DEFAULT_CASTING,
            arrays: Mapping[str, Any] | None = None, **values: Any) -> Any:
        """Run on ``backend`` ("opencl": PoCL on the CPU; "cuda": CuPy or pycuda on a GPU;
        "emulator": the kernel IR in numpy, slow but with hazard checks) with tensors and
        scalars passed by name or in one mapping (``arrays=``: the only way for a tensor
        named ``backend``, ``casting`` or ``arrays``); returns the output array, of the
        kernel's dtype.

        Values are converted to the kernel's dtype as numpy's ``casting`` rule allows ("no",
        "equiv", "safe", "same_kind", "unsafe"): by default a float64 array is refused by a
        float32 kernel with a DtypeError, ``casting="same_kind"`` converts it.

        numpy in, numpy out. With ``backend="cuda"``, arrays already on the GPU (CuPy arrays,
        torch tensors, anything with ``__cuda_array_interface__`` or DLPack) are used where they
        are, and the output comes back as the same kind of array, still on the GPU."""
        return self._run(backend, casting, self._values(arrays, values), timed=False).result

    def run_timed(self, *, backend: str = "opencl", casting: str = DEFAULT_CASTING,
                  arrays: Mapping[str, Any] | None = None, **values: Any) -> TimedRun:
        """:meth:`run`, with the launch timed by the device's events around it ("cuda": a
        pair of CUDA events; "opencl": the kernels' OpenCL profiling events on PoCL, a CPU's
        time): one real launch, no warm-up (incremental tuning times the calls it serves)."""
        if backend not in ("cuda", "opencl"):
            raise BackendUnavailable(f"Kernel.run_timed() runs on backend 'cuda' or 'opencl', "
                                     f"not {backend!r}")
        return self._run(backend, casting, self._values(arrays, values), timed=True)

    def _values(self, arrays: Mapping[str, Any] | None, values: Mapping[str, Any]
                ) -> dict[str, Any]:
        """A run's values by name, from ``arrays`` and the keywords; a value the contraction
        reads under the name of a keyword of :meth:`run` must come in ``arrays``."""
        check_tensor_names(self.contraction.read_names, arrays or {}, RUN_KEYWORDS,
                           "Kernel.run()", "arrays", positional=False)
        return merged_mapping(arrays, values, "arrays")

    def _run(self, backend: str, casting: str, values: Mapping[str, Any],
             timed: bool) -> TimedRun:
        """:meth:`run`'s work; the seconds are the launch's where ``timed``, else 0."""
        sizes, arrays, scalars = bind(self.contraction, self.dtype, self.sizes, values,
                                      casting=casting)
        template = first_device_array(values, self.contraction.output)
        if template is None:
            return self._launch_timed(self._prepare(sizes, arrays, scalars), backend, timed)
        if backend != "cuda":
            raise BackendUnavailable(f"the arrays are on a GPU ({type(template).__name__}); run "
                                     f"them with backend='cuda', or pass numpy arrays to "
                                     f"backend={backend!r}")
        launch = self._prepare(sizes, arrays, scalars, cupy_module())
        ran = self._launch_timed(launch, backend, timed)
        return TimedRun(like(template, ran.result), ran.seconds, ran.device)

    def verify(self, sizes: Mapping[str, int] | None = None, *, seed: int = 0,
               backend: str = "opencl") -> reference.Verification:
        """Run on random data and compare with numpy.einsum; raise VerificationError if off.

        On PoCL every tensor sits between guard zones (see :mod:`treduda.run.opencl`), so a
        read outside an input poisons the result with NaN and a write outside the output is
        reported, instead of passing unseen or corrupting other memory.
        """
        sizes = self._sizes(sizes)
        arrays, scalars = self._random_operands(sizes, seed)
        c = self.contraction
        result = self._launch(self._prepare(sizes, arrays, scalars), backend, guard=True)
        expected = reference.evaluate(c, arrays, scalars, sizes)
        allowed = reference.tolerance(c, arrays, scalars, sizes, self.dtype,
                                      precision=self.precision)
        error = reference.error(result, expected)
        outcome = reference.Verification(bool(np.all(error <= allowed)) and bool(
            np.all(np.isfinite(result))), float(error.max(initial=0.0)),
            float(allowed.max(initial=0.0)), sizes)
        if not outcome.ok:
            raise VerificationError(self._mismatch(outcome, result, expected, error - allowed))
        return outcome

    def time(self, backend: str = "cuda", *, repeats: int = REPEATS, warmup: int = WARMUP,
             sizes: Mapping[str, int] | None = None, seed: int = 0, **values: Any) -> Timing:
        """Seconds per launch on ``backend``: the median of ``repeats`` launches timed by the
        device ("cuda": CUDA events; "opencl": OpenCL profiling events on PoCL), after
        ``warmup`` untimed ones, with the fastest and slowest. The arguments are uploaded once,
        outside the timing: tensors and scalars passed by name (as in :meth:`run`), else
        random data of the kernel's sizes (``sizes=`` for a symbolic kernel)."""
        if values:
            bound_sizes, arrays, scalars = bind(self.contraction, self.dtype, self.sizes, values)
        else:
            bound_sizes = self._sizes(sizes)
            arrays, scalars = self._random_operands(bound_sizes, seed)
        on_gpu = first_device_array(values, self.contraction.output) is not None
        launch = self._prepare(bound_sizes, arrays, scalars, cupy_module() if on_gpu else np)
        if backend == "cuda":
            from .run.cuda import time_cuda

            return time_cuda(self.cuda_source, launch, repeats, warmup)
        if backend == "opencl" and not on_gpu:
            from .run.opencl import time_opencl

            return time_opencl(self.opencl_source, launch, repeats, warmup)
        raise BackendUnavailable(f"Kernel.time() runs on backend 'cuda' (CUDA events) or "
                                 f"'opencl' (numpy arrays only), not {backend!r}")

    def _sizes(self, sizes: Mapping[str, int] | None) -> dict[str, int]:
        """The extents to run at: the kernel's own, or ``sizes`` (required when symbolic)."""
        if sizes is None and self.symbolic:
            raise MissingSize("this kernel has symbolic sizes; pass sizes={...}")
        return dict(self.sizes if sizes is None else sizes)  # {} for a kernel without indices

    def _random_operands(self, sizes: Mapping[str, int], seed: int
                         ) -> tuple[dict[str, np.ndarray], dict[str, float | complex]]:
        """Inputs (and the old output) uniform in [-1, 1), scalars in [0.5, 2) (each part of
        a complex value)."""
        rng = np.random.default_rng(seed)
        c = self.contraction
        shapes = {t: tuple(sizes[i] for i in idx) for t, idx in c.inputs.items()}
        shapes[c.output] = tuple(sizes[i] for i in c.output_indices)
        arrays = {t: uniform(rng, -1, 1, s, self.dtype) for t, s in shapes.items()}
        return arrays, {s: uniform(rng, 0.5, 2.0, (), self.dtype).item() for s in c.scalars}

    def _mismatch(self, outcome: reference.Verification, result: np.ndarray,
                  expected: np.ndarray, excess: np.ndarray) -> str:
        """Why verify() failed: the worst element (a non-finite one first), and how many
        elements are not finite, which points at a read outside an input (guards hold NaN)."""
        worst = np.unravel_index(int(np.argmax(excess)), excess.shape)  # argmax finds NaN first
        message = (f"{self.name} ({self.expression}) {outcome}; worst element "
                   f"{tuple(int(i) for i in worst)}: got {result[worst]!r}, "
                   f"expected {expected[worst]!r}")
        broken = int(np.count_nonzero(~np.isfinite(result)))
        if broken:
            message += (f"; {broken} of {result.size} element(s) are not finite (inputs are "
                        "surrounded by NaN: a read outside an input?)")
        return message

    def compile_cuda(self, arch: str = "sm_90"):
        """Compile the CUDA text with nvcc; returns registers, spills and shared memory."""
        from .run.nvcc import compile_cuda

        return next(r for r in compile_cuda(self.cuda_source, arch) if r.kernel == self.name)

    def estimate(self, gpu: str = "H100", sizes: Mapping[str, int] | None = None,
                 use_nvcc: bool = True):
        """Predicted time on ``gpu``: its strategy's model of these parameters, refined by
        what ptxas says of this kernel (registers, spills) where nvcc is present and
        ``use_nvcc``, the same number the search gives them; for a strategy without a model,
        a walk over this kernel's IR (:func:`treduda.tuning.walk.estimate_kernel`)."""
        from .tuning.walk import estimate

        return estimate(self, gpu, sizes=sizes, use_nvcc=use_nvcc)

    def hazards(self, sizes: Mapping[str, int] | None = None) -> list:
        """Races, out-of-bounds accesses, uninitialised reads and divergent barriers, found by
        emulating the blocks at the corners of the grid on zeros (see
        :mod:`treduda.run.emulator`); an empty list when there are none."""
        from .run.emulator import corners, emulate

        sizes = self._sizes(sizes)
        c = self.contraction
        zeros = {t: np.zeros([sizes[i] for i in idx]) for t, idx in c.inputs.items()}
        launch = self._prepare(sizes, zeros, dict.fromkeys(c.scalars, 0.0))
        return emulate(self.built.kernel, launch, corners(launch.grid), self._later())[1]

    def counters(self, sizes: Mapping[str, int] | None = None, *,
                 blocks: Sequence[tuple[int, int, int]] | None = None,
                 steps: int | None = None):
        """What a profiler would count of this kernel's memory accesses, from its own
        addresses on real warps (:mod:`treduda.run.counters`): per array, global sectors per
        request and shared wavefronts and bank-conflict ways, in the main loop and around it,
        named after Nsight Compute's metrics. Emulates ``blocks`` (the first by default),
        each for ``steps`` iterations of its main loop (None: all), on zeros that take no
        memory but the output's, so full sizes are fine where steps are few. A deterministic
        split's second kernel (the sum of the parts) is not counted."""
        from .run.counters import count

        sizes = self._sizes(sizes)
        c = self.contraction
        dtype = np.dtype(self.dtype)  # np.zeros leaves pages unmapped until written
        zeros = {t: np.zeros([sizes[i] for i in idx], dtype, order=self.layout)
                 for t, idx in c.inputs.items()}
        launch = self._prepare(sizes, zeros, dict.fromkeys(c.scalars, 0.0))
        return count(self.built.kernel, launch, blocks, steps)

    def sass_report(self, arch: str = "sm_90"):
        """The compiled kernel's SASS at a glance: FFMA share of its main loop, the vector
        widths of its global and shared loads, its barriers (needs nvcc and nvdisasm)."""
        from .run.sass import sass_report

        return next(r for r in sass_report(self.cuda_source, arch) if r.kernel == self.name)

    def _prepare(self, sizes, arrays, scalars, xp=np) -> Launch:
        return prepare_all(self.contraction, self.signature.kernel, self.signature.parts_sum,
                           self.layout, self.grid_for(sizes), self.block, sizes,
                           self.merging.sizes(sizes), arrays, scalars, xp)

    def _launch_timed(self, launch: Launch, backend: str, timed: bool) -> TimedRun:
        """Run on ``backend``, timed by the device where ``timed`` (else 0 seconds, no
        device)."""
        if not timed:
            return TimedRun(self._launch(launch, backend), 0.0, "")
        if backend == "opencl":
            from .run.opencl import run_opencl_timed

            return run_opencl_timed(self.opencl_source, launch)
        from .run.cuda import run_cuda_timed

        return run_cuda_timed(self.cuda_source, launch)

    def _launch(self, launch: Launch, backend: str, guard: bool = False) -> np.ndarray:
        """Run on ``backend``; ``guard`` adds PoCL's guard zones (the CUDA path has none)."""
        if backend == "opencl":
            from .run.opencl import run_opencl

            return run_opencl(self.opencl_source, launch, guard=guard)
        if backend == "cuda":
            from .run.cuda import run_cuda

            return run_cuda(self.cuda_source, launch)
        if backend == "emulator":
            from .run.emulator import run_emulated

            return run_emulated(self.built.kernel, launch, self._later())
        raise BackendUnavailable(f"unknown backend '{backend}'; choose one of "
                                 f"{', '.join(BACKENDS)}")

    def _later(self) -> tuple[ir.KernelIR, ...]:
        """The kernels launched after the first, in order (a deterministic split's sum)."""
        then = self.built.parts_sum
        return () if then is None else (then.kernel,)

    def _render(self, dialect: Dialect, template: str) -> str:
        printer = Printer(self.built.kernel, dialect, self.block)
        params = self.built.kernel.params
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items()) if self.sizes else (
            "symbolic: " + ", ".join(p.name for p in params if p.kind == ir.ParamKind.SIZE))
        grid = [printer.expr(g) for g in self.built.grid]
        return _templates().get_template(template).render(
            version=installed_version(), expression=self.expression, sizes=sizes,
            merged=self.merging.describe(), dtype=self.dtype, precision=self.precision,
            layout=self.layout, layout_note=LAYOUT_NOTES[self.layout], strategy=self.strategy,
            params=" ".join(f"{k}={v}" for k, v in self.params.items()), grid=grid,
            block=self.block, arguments=[p.name for p in params], function=printer.function(),
            name=self.name, host_arguments=printer.arguments(host=True),
            grid_formulas=[f"(unsigned int)({g})" for g in grid],
            call_arguments=[p.name for p in params] + [
                m.name for m in self.built.kernel.tensor_maps],
            double=real(self.dtype) == "float64",
            atomic_type=printer.atomics(), output=self.contraction.output,
            zeroed_bytes=self._zeroed_bytes(), alignment=ir.VECTOR_BYTES,
            dynamic_shared=ir.dynamic_shared_bytes(self.built.kernel),
            **self._parts_sum(dialect), **printer.helpers())

    def _parts_sum(self, dialect: Dialect) -> dict[str, Any]:
        """What the templates need to print and launch the kernel that adds a deterministic
        split's parts (:mod:`~treduda.codegen.parts`): nothing where there is none."""
        then = self.built.parts_sum
        if then is None:
            return {"parts": None}
        workspace = parts.workspace(then.kernel)
        return {"parts": {"function": Printer(then.kernel, dialect, then.block).function(),
                          "name": then.kernel.name, "grid": then.grid, "block": then.block,
                          "arguments": [p.name for p in then.kernel.params],
                          "workspace": workspace.name, "count": then.count,
                          "elements": workspace.size}}

    def _zeroed_bytes(self) -> int:
        """Bytes of the output the launch zeroes first (0: it does not; split kernels have
        fixed sizes)."""
        if not self.signature.kernel.zeroed_output:
            return 0
        c = self.contraction
        return math.prod(self.sizes[i] for i in c.output_indices) * np.dtype(self.dtype).itemsize

    def __repr__(self) -> str:
        geometry = f"grid={self.grid}, block={self.block}" if self.grid else f"block={self.block}"
        merged = self.merging.describe()
        precision = "" if self.precision == "highest" else f", precision={self.precision}"
        return (f"Kernel({self.expression!r}, {self.dtype}{precision}, layout={self.layout}, "
                f"strategy={self.strategy}, {geometry}{f', merged {merged}' if merged else ''})")


@functools.cache
def _decoder() -> serial.Decoder:
    return serial.Decoder([Built])


GENERATOR_PACKAGES = ("treduda.frontend", "treduda.polyhedral", "treduda.codegen",
                      "treduda.strategies", "treduda.templates")
"""The packages whose code makes a kernel: their sources, with this module's (the record's
format) and treduda's version, are the code generator's version (:func:`generator_version`)."""


@functools.cache
def generator_version() -> str:
    """treduda's version and a hash of the code generator's sources: a stored kernel made by
    another generator is not found (no version constant to forget to bump)."""
    return sources_digest(GENERATOR_PACKAGES, Path(__file__).read_bytes())


@functools.cache
def _templates() -> jinja2.Environment:
    """The templates of ``templates/``, installed as the package ``treduda.templates``.
    Jinja2 is imported here, when a first source is printed: it took a tenth of a second of
    a cold compile(), whose kernel's sources are printed later (ptxas's check, a run)."""
    import jinja2

    folder = importlib.resources.files("treduda.templates")
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)),
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                              undefined=jinja2.StrictUndefined)

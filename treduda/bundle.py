"""Kernels that travel without the compiler: a bundle written by :func:`treduda.export`, and the
small runtime that runs it.

    bundle = treduda.bundle.load("kernels.zip", backend="cuda")
    C = bundle["td_gemm_..."](A=a, B=b)              # a kernel by name, its tensors by name
    C = bundle.contract("C[i,j] = A[i,k] * B[k,j]", a, b)   # or found by expression and shapes

A bundle is one zip file: ``manifest.json`` (:data:`FORMAT`) describes each kernel (its
expression, dtype, layout, the exact sizes it was made for, its launch signature: parameter
order, geometry, dynamic shared memory, the tensor maps it takes by value) and each program
(its steps and intermediates), and ``kernels/`` holds the CUDA source of each kernel, its
OpenCL twin and, where the exporting machine had nvcc, cubins for the targets asked for.

The runtime needs numpy (and ml_dtypes, which treduda's dtypes use) and, to run, PoCL through
pyopencl (``backend="opencl"``) or CuPy or pycuda on a GPU (``backend="cuda"``: NVRTC compiles the
source there, unless the bundle holds a cubin for the GPU's architecture); never islpy, Jinja2,
opt_einsum or sqlite. It launches through the same code as
:class:`treduda.Kernel` (:func:`treduda.run.launch.prepare_all`, :mod:`treduda.run.opencl`,
:mod:`treduda.run.cuda`), so a bundled kernel runs exactly as the kernel it was exported from.
A bundle holds fixed shapes: a call with other shapes or another dtype is refused with an
error that says what the bundle holds.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from .errors import (
    ArgumentError,
    BackendUnavailable,
    DtypeError,
    MissingArray,
    ShapeMismatch,
    StoredDataError,
    did_you_mean,
)

FORMAT = 1  # of the manifest; a reader refuses any other
MANIFEST = "manifest.json"
SOURCES = "kernels"  # the zip's folder of sources and cubins
BACKENDS = ("opencl", "cuda")
SUFFIXES = {"cuda": ".cu", "opencl": ".cl"}


def source_path(name: str, dialect: str) -> str:
    """Where a kernel's source lies in the zip (``dialect``: "cuda" or "opencl")."""
    return f"{SOURCES}/{name}{SUFFIXES[dialect]}"


def cubin_path(name: str, arch: str) -> str:
    """Where a kernel's cubin for ``arch`` (e.g. sm_90) lies in the zip."""
    return f"{SOURCES}/{name}.{arch}.cubin"


def normalised(expression: str) -> str:
    """An expression as :meth:`Bundle.contract` matches it: without its spaces, and an
    einsum's indices renamed in the order they first appear (``"ik,kj->ij"`` becomes
    ``"ab,bc->ac"``, as :func:`treduda.run.reference.einsum_spec` writes it)."""
    from .run.reference import LETTERS

    text = "".join(expression.split())
    if "->" not in text or "[" in text:
        return text
    letters = dict.fromkeys(ch for ch in text.partition("->")[0] if ch.isalpha())
    renamed = dict(zip(letters, LETTERS, strict=False))
    return "".join(renamed.get(ch, ch) for ch in text)


@dataclass(frozen=True, eq=False)
class BundledKernel:
    """One kernel of a bundle, for the sizes it was exported at: call it with its tensors and
    scalars by name, as :meth:`treduda.Kernel.run`; it returns the output array."""

    name: str
    entry: Mapping[str, Any] = field(repr=False)  # its manifest entry
    cuda_source: str = field(repr=False)
    opencl_source: str = field(repr=False)
    cubins: Mapping[str, bytes] = field(repr=False)  # arch -> cubin, loaded in place of NVRTC
    backend: str = "opencl"

    @property
    def expression(self) -> str:
        return self.entry["expression"]

    @property
    def dtype(self) -> str:
        return self.entry["dtype"]

    @property
    def layout(self) -> str:
        return self.entry["layout"]

    @property
    def precision(self) -> str:
        """How its products round float32 inputs (treduda.compile's ``precision=``)."""
        return self.entry["precision"]

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.entry["sizes"])

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Each tensor's shape: the only ones this kernel runs on."""
        return {t: tuple(s) for t, s in self.entry["shapes"].items()}

    @property
    def einsum(self) -> str | None:
        """The einsum a user would write for it (``"ik,kj->ij"``), where it is one product."""
        return self.entry.get("einsum")

    @property
    def metadata(self) -> dict[str, Any]:
        """What the exporter added (a benchmark row's suite, id, rivals' ranks, ...)."""
        return dict(self.entry.get("metadata") or {})

    @cached_property
    def contraction(self):
        from .frontend.contraction import analyse

        return analyse(self.expression)

    @cached_property
    def _signature(self):
        """The first kernel's IR without its body (what a launch needs) and the kernel that
        adds a deterministic split's parts, or None."""
        from .codegen.serial import Decoder

        decode = Decoder()
        try:
            return decode(self.entry["signature"]), decode(self.entry["parts_sum"])
        except (KeyError, TypeError, ValueError) as error:
            raise StoredDataError(f"bundle kernel {self.name}: a damaged launch signature "
                                  f"({type(error).__name__}: {error})") from None

    def holds(self, shapes: Mapping[str, tuple[int, ...]]) -> bool:
        """Whether this kernel runs on tensors of these ``shapes`` (by name)."""
        return _fits(self.shapes, shapes)

    def held(self) -> str:
        """What this kernel runs on, for error messages."""
        shapes = ", ".join(f"{t} {s}" for t, s in self.shapes.items())
        return f"{self.name} ({self.expression}): {self.dtype}, {shapes}"

    def __call__(self, *, casting: str | None = None, **values: Any) -> Any:
        """Run on the bundle's backend; numpy in, numpy out (CuPy or torch arrays on the GPU
        stay there with ``backend="cuda"``, as with :meth:`treduda.Kernel.run`)."""
        from .run.device_arrays import cupy_module, first_device_array, like

        template = first_device_array(values, self.contraction.output)
        if template is None:
            return run_launch(self, self.launch(values, casting))
        if self.backend != "cuda":
            raise BackendUnavailable(f"the arrays are on a GPU ({type(template).__name__}); "
                                     "load the bundle with backend='cuda', or pass numpy arrays")
        return like(template, run_launch(self, self.launch(values, casting, cupy_module())))

    def launch(self, values: Mapping[str, Any], casting: str | None = None, xp=np):
        """The :class:`~treduda.run.launch.Launch` of a call on ``values`` (checked against
        the shapes and dtype held; ``xp``: numpy, or CuPy for arrays on a GPU)."""
        from .frontend.dtypes import DEFAULT_CASTING
        from .run.launch import bind, prepare_all

        self._check(values)
        try:
            sizes, arrays, scalars = bind(self.contraction, self.dtype, self.sizes, values,
                                          casting=casting or DEFAULT_CASTING)
        except DtypeError as error:
            raise DtypeError(f"{error}; the bundle holds {self.held()}") from None
        first, then = self._signature
        return prepare_all(self.contraction, first, then, self.layout,
                           tuple(self.entry["grid"]), tuple(self.entry["block"]), sizes,
                           self.entry["kernel_sizes"], arrays, scalars, xp)

    def _check(self, values: Mapping[str, Any]) -> None:
        """Refuse names this kernel does not take and shapes it was not exported for."""
        c = self.contraction
        known = [c.output, *c.inputs, *c.scalars]
        for name in values:
            if name not in known:
                raise ArgumentError(f"no argument {name!r}{did_you_mean(name, known)}: bundle "
                                    f"kernel {self.name} takes {', '.join(known)}")
        shapes = {t: tuple(np.shape(v)) for t, v in values.items() if t not in c.scalars}
        if not self.holds(shapes):
            given = ", ".join(f"{t} {s}" for t, s in shapes.items())
            raise ShapeMismatch(f"the bundle holds no kernel for {given}; it holds "
                                f"{self.held()} (export one at these sizes)")


def _fits(held: Mapping[str, tuple[int, ...]], shapes: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether every tensor of ``shapes`` has the shape ``held`` gives it."""
    return all(held.get(t) == tuple(s) for t, s in shapes.items())


def run_launch(kernel: BundledKernel, launch) -> Any:
    """Run ``launch`` with ``kernel``'s source for its backend; the output array."""
    if kernel.backend == "opencl":
        from .run.opencl import run_opencl

        return run_opencl(kernel.opencl_source, launch)
    from .run.cuda import run_cuda

    return run_cuda(kernel.cuda_source, launch, kernel.cubins)


@dataclass(frozen=True, eq=False)
class BundledProgram:
    """A program of a bundle (:class:`treduda.Plan` exported): its kernels run in order, each
    call with intermediates of its own. Called with its inputs by name; returns its results by
    name, as a plan does."""

    name: str
    entry: Mapping[str, Any] = field(repr=False)
    steps: tuple[BundledKernel, ...]

    @property
    def source(self) -> str:
        return self.entry["source"]

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(self.entry["inputs"])

    @property
    def results(self) -> tuple[str, ...]:
        return tuple(self.entry["results"])

    @property
    def intermediates(self) -> tuple[str, ...]:
        return tuple(self.entry["intermediates"])

    @property
    def dtype(self) -> str:
        return self.entry["dtype"]

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {t: tuple(s) for t, s in self.entry["shapes"].items()}

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.entry.get("metadata") or {})

    def holds(self, shapes: Mapping[str, tuple[int, ...]]) -> bool:
        """Whether this program runs on tensors of these ``shapes`` (by name)."""
        return _fits(self.shapes, shapes)

    def held(self) -> str:
        shapes = ", ".join(f"{t} {self.shapes[t]}" for t in self.inputs)
        return f"program {self.name}: {self.dtype}, {shapes}"

    def __call__(self, *, casting: str | None = None, **values: Any) -> dict[str, Any]:
        missing = [name for name in self.inputs if name not in values]
        if missing:
            raise MissingArray(f"no value for {', '.join(missing)}: program {self.name} reads "
                               f"{', '.join(self.inputs)}")
        unknown = sorted(set(values) - set(self.inputs))
        if unknown:
            raise ArgumentError(f"no input {unknown[0]!r}{did_you_mean(unknown[0], self.inputs)}"
                                f" in program {self.name}; its inputs are "
                                f"{', '.join(self.inputs)}")
        shapes = {t: np.shape(v) for t, v in values.items() if t in self.shapes}  # no scalars
        if not self.holds(shapes):
            given = ", ".join(f"{t} {s}" for t, s in shapes.items())
            raise ShapeMismatch(f"the bundle holds no program for {given}; it holds "
                                f"{self.held()} (export one at these sizes)")
        known = dict(values)
        for step, reads in zip(self.steps, self.entry["steps"], strict=True):
            arguments = {name: known[name] for name in reads["reads"]}
            known[reads["output"]] = step(casting=casting, **arguments)
        return {name: known[name] for name in self.results}


class Bundle:
    """A loaded bundle: its kernels and programs by name (``bundle[name]``, ``name in
    bundle``, ``list(bundle)``), and :meth:`contract`, which finds the one for an expression
    and the operands' shapes."""

    def __init__(self, manifest: Mapping[str, Any], kernels: Mapping[str, BundledKernel],
                 programs: Mapping[str, BundledProgram], backend: str):
        self.manifest = manifest
        self.kernels = dict(kernels)
        self.programs = dict(programs)
        self.backend = backend

    def __getitem__(self, name: str) -> BundledKernel | BundledProgram:
        if name in self.programs:
            return self.programs[name]
        if name in self.kernels:
            return self.kernels[name]
        raise ArgumentError(f"the bundle holds no kernel or program {name!r}"
                            f"{did_you_mean(name, self)}; it holds {', '.join(self)}")

    def __contains__(self, name: object) -> bool:
        return name in self.programs or name in self.kernels

    def __iter__(self) -> Iterator[str]:
        return iter([*self.kernels, *self.programs])

    def __len__(self) -> int:
        return len(self.kernels) + len(self.programs)

    def contract(self, expr: str, *operands: Any, casting: str | None = None) -> Any:
        """Run the kernel or program exported for ``expr`` (as written when exported, spaces
        aside, or its einsum ``"ik,kj->ij"``) whose shapes and dtype the ``operands`` have,
        given in the order the expression reads them; a program returns its one result (or
        a dict of several)."""
        wanted = normalised(expr)
        matches = [k for k in self.kernels.values()
                   if wanted in (normalised(k.expression), k.einsum)]
        matches += [p for p in self.programs.values() if normalised(p.source) == wanted]
        if not matches:
            held = sorted({k.expression for k in self.kernels.values()}
                          | {p.source for p in self.programs.values()})
            raise ArgumentError(f"the bundle holds no kernel for {expr!r}; it holds "
                                f"{'; '.join(held) or 'nothing'}")
        dtypes = {str(v.dtype) for v in operands if hasattr(v, "dtype")}
        shaped = False  # whether a kernel held has these shapes (but another dtype)
        for match in matches:
            values = _named(match, expr, operands)
            if match.holds({t: np.shape(v) for t, v in values.items()}):
                if dtypes <= {match.dtype}:
                    found = match(casting=casting, **values)
                    if isinstance(match, BundledProgram) and len(found) == 1:
                        return found[match.results[0]]
                    return found
                shaped = True
        given = ", ".join(f"{np.shape(v)} {getattr(v, 'dtype', type(v).__name__)}"
                          for v in operands)
        raise (DtypeError if shaped else ShapeMismatch)(
            f"the bundle holds no kernel for {expr!r} on {given}; it holds "
            + "; ".join(m.held() for m in matches) + " (export one for these)")

    def __repr__(self) -> str:
        return (f"Bundle({len(self.kernels)} kernel(s), {len(self.programs)} program(s), "
                f"backend={self.backend!r})")


def _named(entry: BundledKernel | BundledProgram, expr: str, operands: tuple) -> dict[str, Any]:
    """``operands`` by the names of the tensors ``entry`` reads, in the order
    :meth:`Bundle.contract` takes them."""
    names = entry.inputs if isinstance(entry, BundledProgram) else tuple(
        entry.contraction.inputs)
    if len(names) != len(operands):
        raise ArgumentError(f"{expr!r} reads {len(names)} tensors ({', '.join(names)}), got "
                            f"{len(operands)}")
    return dict(zip(names, operands, strict=True))


def load(path: str | Path, backend: str = "opencl", cubins: bool = True) -> Bundle:
    """The bundle in the zip file ``path``, to run on ``backend`` ("opencl": PoCL on the CPU,
    as treduda's default; "cuda": CuPy or pycuda on a GPU, loading the cubin for its
    architecture where the bundle holds one and ``cubins``, else compiling the source with
    NVRTC)."""
    if backend not in BACKENDS:
        raise ArgumentError(f"unknown backend {backend!r}; a bundle runs on "
                            f"{' or '.join(BACKENDS)}")
    try:
        with zipfile.ZipFile(path) as archive:
            manifest = json.loads(archive.read(MANIFEST))
            if manifest.get("format") != FORMAT:
                raise StoredDataError(f"{path}: a bundle of format {manifest.get('format')!r}; "
                                      f"this treduda reads format {FORMAT}: export it again")
            kernels = {name: _kernel(archive, name, entry, backend, cubins)
                       for name, entry in manifest["kernels"].items()}
    except (OSError, zipfile.BadZipFile) as error:
        raise StoredDataError(f"{path}: cannot read the bundle ({error})") from None
    except (KeyError, TypeError, ValueError) as error:
        raise StoredDataError(f"{path}: a damaged bundle ({type(error).__name__}: {error})"
                              ) from None
    programs = {name: BundledProgram(name, entry, tuple(kernels[s["kernel"]]
                                                        for s in entry["steps"]))
                for name, entry in manifest.get("programs", {}).items()}
    return Bundle(manifest, kernels, programs, backend)


def _kernel(archive: zipfile.ZipFile, name: str, entry: Mapping[str, Any], backend: str,
            cubins: bool) -> BundledKernel:
    binaries = {arch: archive.read(member) for arch, member in entry["cubins"].items()
                if cubins}
    return BundledKernel(name, entry, archive.read(entry["sources"]["cuda"]).decode(),
                         archive.read(entry["sources"]["opencl"]).decode(), binaries, backend)

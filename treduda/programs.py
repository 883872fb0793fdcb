"""Programs: statements run in order, each its own kernel, with intermediates treduda allocates.

A program is text with one statement per line (or separated by ``;``)::

    T[i,k] = A[i,j]*B[j,k]
    D[i,l] = T[i,k]*C[k,l]

A tensor read before any statement writes it is an input; a statement's output that no later
statement reads is a result (``+=`` reads the tensor it adds into). A statement that is one
product of three or more tensors is split along the path :func:`treduda.tuning.paths.choose`
picks, unless ``optimize=False``. The plan is made for the sizes of the first call (or of
``sizes=`` and shapes given up front); each kernel is compiled and tuned on its own, and the
intermediates are each call's own arrays, so one plan serves many threads at once.

The class is :class:`Plan`, not "Program", which is the polyhedral program of one statement
(:class:`treduda.polyhedral.lower.Program`).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .codegen.printer import CUDA, Printer
from .errors import ArgumentError, MissingArray, ParseError, ShapeMismatch
from .frontend.contraction import Contraction, Shaped, analyse, infer_sizes, resolve_sizes
from .frontend.dtypes import DEFAULT_CASTING, check_dtype
from .frontend.optimize import AUTO, check_optimize
from .kernel import Kernel
from .run.launch import checked_operand
from .tuning.paths import PathChoice, choose, estimate, many_factors, overlapped


class CompileStep(Protocol):
    """How a plan gets the kernel of one statement: the API's compile, with its options."""

    def __call__(self, expr: str, sizes: Mapping[str, int], dtype: str, layout: str) -> Kernel:
        ...


@dataclass(frozen=True)
class PlanStep:
    """One kernel of a plan: its statement, the model's estimate and its FLOPs."""

    contraction: Contraction
    kernel: Kernel
    seconds: float
    flops: float


def statements(text: str) -> list[Contraction]:
    """The statements of ``text``: one per line or per ``;``, blank ones skipped."""
    parts = [part.strip() for line in text.splitlines() for part in line.split(";")]
    found = [analyse(part) for part in parts if part]
    if not found:
        raise ParseError("a program needs at least one statement, e.g. 'C[i,k] = A[i,j]*B[j,k]'",
                         text, 0)
    return found


def reads(c: Contraction) -> list[str]:
    """The names ``c`` reads: its inputs, its scalars, its output where it uses the old values
    (``+=``, ``-=``, or read on the right)."""
    return [*c.inputs, *c.scalars, *([c.output] if c.reads_output or c.op != "=" else [])]


class Plan:
    """A program planned for fixed sizes (see the module's docstring): call it with its
    inputs and scalars by name; it returns a dict of its results (``keep=`` names
    intermediates to return too).

    Safe to call from many threads at once: a call keeps its intermediates in arrays of its
    own, and a plan made at its first call is made once (the others wait for it)."""

    def __init__(self, source: str, compile_step: CompileStep, *, dtype: str = "float32",
                 layout: str = "C", backend: str = "opencl", gpu: str = "H100",
                 optimize: Any = AUTO, sizes: Mapping[str, int] | None = None,
                 shapes: Mapping[str, tuple[int, ...]] | None = None):
        check_dtype(dtype)
        self.source = source
        self.statements = tuple(statements(source))
        self.dtype, self.layout, self.backend, self.gpu = dtype, layout, backend, gpu
        self.optimize = check_optimize(optimize)  # each split product's path: at planning
        self._compile = compile_step
        self._sizes = dict(sizes or {})
        written: set[str] = set()
        inputs: dict[str, None] = {}
        for c in self.statements:
            inputs.update((name, None) for name in reads(c) if name not in written)
            written.add(c.output)
        self.inputs = tuple(inputs)
        self._scalars = {name for c in self.statements for name in c.scalars}
        self.results = tuple(c.output for n, c in enumerate(self.statements)
                             if all(c.output not in reads(later) and c.output != later.output
                                    for later in self.statements[n + 1:]))
        self.steps: tuple[PlanStep, ...] = ()
        self.paths: tuple[PathChoice, ...] = ()  # one per statement split along a path
        self.shapes: dict[str, tuple[int, ...]] = {}  # every tensor's, once planned
        self._planning = threading.Lock()
        if shapes is not None or self._sizes:
            self._plan(dict(shapes or {}))

    @property
    def intermediates(self) -> tuple[str, ...]:
        """Tensors the plan writes and reads again, whose arrays it keeps."""
        return tuple(t for t in dict.fromkeys(s.contraction.output for s in self.steps)
                     if t not in self.results and t not in self.inputs)

    def _plan(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """Size every statement (from ``shapes`` and ``sizes``), split the products, compile."""
        steps, paths = [], []
        taken = {n for c in self.statements for n in (c.output, *c.inputs, *c.scalars)}
        for c in self.statements:
            sizes = self._statement_sizes(c, shapes)
            for tensor, indices in (*c.inputs.items(), (c.output, c.output_indices)):
                shapes.setdefault(tensor, tuple(sizes[i] for i in indices))
            if many_factors(c) and self.optimize is not False:
                choice = choose(c, sizes, dtype=self.dtype, layout=self.layout, gpu=self.gpu,
                                optimize=self.optimize, taken=sorted(taken))
                paths.append(choice)
                for step in choice.chosen.steps:
                    sub = analyse(step.text)
                    taken.add(sub.output)
                    shapes[sub.output] = tuple(sizes[i] for i in sub.output_indices)
                    steps.append(self._step(sub, sizes, step.seconds, step.flops))
            else:
                seconds, flops = estimate(c.source, {i: sizes[i] for i in c.indices},
                                          self.dtype, self.layout, self.gpu)
                steps.append(self._step(c, sizes, seconds, flops))
        self.steps, self.paths, self.shapes = tuple(steps), tuple(paths), shapes

    def _statement_sizes(self, c: Contraction, shapes: Mapping[str, tuple[int, ...]]
                         ) -> dict[str, int]:
        """``c``'s extents from the shapes of its tensors (checked against each other) where
        all its inputs have one, else from ``sizes`` and the shapes known."""
        explicit = {i: self._sizes[i] for i in c.indices if i in self._sizes}
        if all(t in shapes for t in c.inputs):
            stand_ins = {t: Shaped(shapes[t]) for t in (*c.inputs, c.output) if t in shapes}
            return infer_sizes(c, stand_ins, explicit, old_output=False)
        known = {i: n for t, idx in c.inputs.items() if t in shapes
                 for i, n in zip(idx, shapes[t], strict=True)}
        return resolve_sizes(c, {**known, **explicit})

    def _step(self, c: Contraction, sizes: Mapping[str, int], seconds: float,
              flops: float) -> PlanStep:
        kernel = self._compile(c.source, {i: sizes[i] for i in c.indices}, self.dtype,
                               self.layout)
        return PlanStep(c, kernel, seconds, flops)

    def __call__(self, *, keep: tuple[str, ...] | list[str] = (),
                 casting: str = DEFAULT_CASTING, **values: Any) -> dict[str, Any]:
        """Run every step in order on ``backend``; returns the results (and ``keep``'s
        intermediates) by name. ``casting`` is :meth:`Kernel.run`'s, for every step, and is
        checked (as lists and numbers are converted, as numpy.asarray does) before a first
        call plans."""
        unknown = sorted(set(values) - set(self.inputs))
        if unknown:
            raise ArgumentError(f"no input {unknown[0]!r} in this program; its inputs are "
                                f"{', '.join(self.inputs)}")
        missing = [name for name in self.inputs if name not in values]
        if missing:
            raise MissingArray(f"no value for {', '.join(missing)}: the program reads "
                               f"{'it' if len(missing) == 1 else 'them'} before writing")
        values = {k: checked_operand(k, v, self.dtype, casting, scalar=k in self._scalars)
                  for k, v in values.items()}  # before the first call plans
        shapes = {k: tuple(np.shape(v)) for k, v in values.items() if k not in self._scalars}
        with self._planning:
            if not self.steps:
                self._plan(dict(shapes))
        changed = [f"{k} {shape} (planned for {self.shapes[k]})" for k, shape in shapes.items()
                   if shape != self.shapes.get(k, shape)]
        if changed:
            raise ShapeMismatch(f"this plan was made for other shapes: {', '.join(changed)}; "
                                "make a new program (treduda.program) for these")
        wrong = [name for name in keep if name not in self.shapes or name in self.inputs]
        if wrong:
            raise ArgumentError(f"keep= names {wrong[0]!r}, which this program does not "
                                f"compute; its intermediates are "
                                f"{', '.join(self.intermediates) or 'none'}")
        known = dict(values)
        for step in self.steps:
            c = step.contraction
            arguments = {name: known[name] for name in reads(c)}
            known[c.output] = step.kernel.run(backend=self.backend, casting=casting,
                                              **arguments)
        return {name: known[name] for name in (*self.results, *keep)}

    def run(self, *, backend: str | None = None, casting: str = DEFAULT_CASTING,
            **values: Any) -> Any:
        """The single result, as :meth:`Kernel.run` returns a kernel's output."""
        if backend is not None and backend != self.backend:
            raise ArgumentError(f"this plan runs on {self.backend!r}; plan again for "
                                f"backend={backend!r}")
        if len(self.results) != 1:
            raise ArgumentError(f"this program has results {', '.join(self.results)}; "
                                "call it to get them all")
        return self(casting=casting, **values)[self.results[0]]

    def hazards(self) -> list[list]:
        """Each step's :meth:`Kernel.hazards` (empty lists where there are none)."""
        self._require_plan()
        return [step.kernel.hazards() for step in self.steps]

    @property
    def flops(self) -> float:
        self._require_plan()
        return sum(step.flops for step in self.steps)

    @property
    def seconds(self) -> float:
        """The steps' estimates summed, as the planner compares paths (one launch exposed)."""
        self._require_plan()
        return overlapped([s.seconds for s in self.steps])

    def _require_plan(self) -> None:
        if not self.steps:
            raise MissingArray("this program is planned at its first call; pass sizes= or "
                               "the inputs' shapes to plan it now")

    @property
    def cuda_source(self) -> str:
        """One ``.cu`` file: every kernel and a host function that launches them in order."""
        self._require_plan()
        kernels = list({s.kernel.name: s.kernel for s in self.steps}.values())
        declared: dict[str, str] = {}
        for step in self.steps:
            printer = Printer(step.kernel.built.kernel, CUDA, step.kernel.block)
            for param, text in zip(step.kernel.built.kernel.params, printer.arguments(),
                                   strict=True):
                writes = param.name == step.contraction.output
                if writes or param.name not in declared:
                    declared[param.name] = text
        name = self.name
        launches = "\n".join(f"  {s.kernel.name}_launch("
                             f"{', '.join(p.name for p in s.kernel.built.kernel.params)}, "
                             f"stream);  // {s.contraction.source}" for s in self.steps)
        sizes = "\n".join(f"//   {t}: {' x '.join(map(str, self.shapes[t])) or 'scalar'}"
                          for t in self.intermediates)
        host = (f"// The program, kernel by kernel on `stream`; intermediates are the "
                f"caller's\n// device arrays ({self.dtype}, {self.layout} layout):\n"
                f"{sizes or '//   none'}\n#ifndef __CUDACC_RTC__\n"
                f"void {name}({', '.join(declared.values())}, cudaStream_t stream) {{\n"
                f"{launches}\n}}\n#endif\n")
        return "\n".join([k.cuda_source for k in kernels] + [host])

    @property
    def name(self) -> str:
        key = repr((self.source, sorted(self.shapes.items()), self.dtype, self.layout))
        return f"td_program_{hashlib.sha1(key.encode()).hexdigest()[:10]}"

    def explain(self) -> str:
        """The paths, each step's kernel, estimate and FLOPs, and the intermediates' sizes."""
        self._require_plan()
        lines = [f"program {self.name}: {len(self.statements)} statement(s), "
                 f"{len(self.steps)} kernel(s); {self.dtype}, layout {self.layout}; inputs "
                 f"{', '.join(self.inputs)}; results {', '.join(self.results)}"]
        lines += [choice.report() for choice in self.paths]
        lines.append(f"  {'#':>2}  {'statement':<40} {'kernel':<20} {'strategy':<14} "
                     f"{'est ms':>8} {'MFLOP':>10}")
        for n, s in enumerate(self.steps, 1):
            lines.append(f"  {n:>2}  {s.contraction.source:<40} {s.kernel.name:<20} "
                         f"{s.kernel.strategy:<14} {s.seconds * 1e3:>8.4f} "
                         f"{s.flops / 1e6:>10.3f}")
        lines.append(f"  total {self.seconds * 1e3:.4f} ms predicted (one launch exposed), "
                     f"{self.flops / 1e6:.3f} MFLOP")
        itemsize = np.dtype(self.dtype).itemsize
        for t in self.intermediates:
            shape = self.shapes[t]
            lines.append(f"  intermediate {t}: {' x '.join(map(str, shape)) or 'scalar'}, "
                         f"{math.prod(shape) * itemsize / 1024:.1f} KiB")
        return "\n".join(lines)

    def __repr__(self) -> str:
        planned = f"{len(self.steps)} kernel(s)" if self.steps else "planned at the first call"
        return f"Plan({len(self.statements)} statement(s), {planned}, results {self.results})"

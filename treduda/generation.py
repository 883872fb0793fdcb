"""The kernels of one problem, each made once and kept in the kernel store: what compile(),
search() and incremental tuning ask for when they need a candidate's or a winner's kernel."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from . import strategies
from .codegen.printer import check_identifiers
from .errors import StoredDataError, StrategyError
from .frontend.contraction import Contraction
from .frontend.identity import Identity
from .kernel import Kernel, generator_version
from .model.gpus import Gpu
from .polyhedral.ast_build import build, check_grid, grid_at, launch_grid
from .polyhedral.lower import Program, plan
from .tuning import policy
from .tuning.cache import CacheWarning, TuningCache

BUILT_IN = strategies.__name__ + "."  # the modules of the built-in strategies


class Generator:
    """The kernels of one problem for one call of compile() or search(), each made once:
    ptxas's check of a winner, its walk, its measurement and compile()'s kernel ask for the
    same one (a full-size kernel takes seconds to build). With a ``store`` (the tuning cache's
    kernel store), a kernel made before, in any process, is loaded from it: no isl work, and
    the program is planned only when something asks for it."""

    def __init__(self, contraction: Contraction, problem: Identity, sizes: dict | None,
                 gpu: Gpu, store: TuningCache | None = None, program: Program | None = None):
        self.contraction, self.problem, self.sizes, self.gpu = contraction, problem, sizes, gpu
        self.store = store
        self._made: dict[str, Kernel] = {}
        self._asked: dict[str, tuple[str, dict[str, Any]]] = {}  # how each was asked for
        self._program = program

    @classmethod
    def of(cls, program: Program, gpu: Gpu, store: TuningCache | None = None) -> Generator:
        """The kernels of a planned ``program``, kept in ``store`` where given."""
        return cls(program.original, program.identity, program.expression_sizes, gpu, store,
                   program=program)

    @property
    def program(self) -> Program:
        """The problem's program, planned (with isl) and checked when first asked for, once:
        under the generation lock alone (a ``cached_property`` holds a lock of its own, for
        every instance, which a thread waiting for the generation lock would hold)."""
        p = self.problem
        with policy.GENERATING:
            if self._program is None:
                program = plan(self.contraction, self.sizes, p.layout, p.dtype,
                               symbolic=self.sizes is None, deterministic=p.deterministic,
                               precision=p.precision)
                check_grid(program, self.gpu.max_threads_per_block,
                           self.gpu.max_registers_per_thread)
                self._program = program
            return self._program

    def __call__(self, strategy: str, params: Mapping[str, Any] | None) -> Kernel:
        asked = self.problem.generated(strategy, params or {})
        key = asked.shaping()
        with policy.GENERATING:  # compile()'s thread or a background check's
            if key not in self._made:
                self._made[key] = (self._stored(asked)
                                   or generated(self.program, strategy, params))
                self._asked[key] = (strategy, dict(params or {}))
            return self._made[key]

    def known(self, strategy: str, params: Mapping[str, Any]) -> bool:
        """Whether the kernel store holds this kernel, made by this code generator."""
        return (self.store is not None and storable(strategy)
                and self.store.has_kernel(self.problem.generated(strategy, params),
                                          generator_version()))

    def keep(self, kernel: Kernel, strategy: str, params: Mapping[str, Any] | None) -> Kernel:
        """``kernel`` (asked for as ``strategy`` with ``params``), kept in the kernel store if
        it is not there yet and its strategy is built in (the generator's version hashes the
        built-in strategies' sources, not those of one registered elsewhere). The store is
        written on the background thread: it serves later processes, and its record (the
        kernel IR, encoded) took 0.06 s of GEMM 4096^3's first call."""
        if self.store is None or kernel.stored is not None or not storable(kernel.strategy):
            return kernel
        store, asked = self.store, self.problem.generated(strategy, params or {})

        def write() -> None:
            record = kernel.record()
            version = generator_version()
            store.put_kernel(kernel.identity, version, record)
            if asked != kernel.identity:  # asked by fewer parameters than the search gives
                store.put_kernel(asked, version, record)

        policy.later(write)
        return kernel

    def keep_made(self) -> None:
        """Keep every kernel made here in the kernel store (:meth:`keep`), and return once they
        are written: search()'s check generates its winner, which compile() then loads instead
        of generating it again (a second or more at full size)."""
        if self.store is None:
            return
        for key, kernel in self._made.items():
            self.keep(kernel, *self._asked[key])
        policy.finish_background()

    def _stored(self, asked: Identity) -> Kernel | None:
        """The kernel store's kernel ``asked`` names, or None (a damaged one is reported)."""
        if self.store is None or not storable(asked.strategy):
            return None
        record = self.store.get_kernel(asked, generator_version())
        if record is None:
            return None
        try:
            return Kernel.from_record(record, self.contraction, self.problem)
        except StoredDataError as e:
            warnings.warn(f"ignoring the stored kernel {asked.to_json()}: {e}; generating it "
                          "again", CacheWarning, stacklevel=3)
            return None


def generated(program: Program, strategy: str, params: Mapping[str, Any] | None) -> Kernel:
    """``program`` scheduled by ``strategy`` with ``params``, built and checked: the one place
    a kernel is made, for compile() and for the candidates the search re-ranks."""
    scheduled = strategies.get(strategy).apply(program, params)
    identity = program.identity.generated(scheduled.strategy, scheduled.params)
    built = build(scheduled, identity.kernel_name(program.original.output))
    check_identifiers(built.kernel)
    return Kernel.generated(program, built, scheduled.strategy, scheduled.params)


def launch(program: Program, strategy: str, params: Mapping[str, Any] | None
           ) -> tuple[tuple[int, int, int], tuple[int, int, int], dict[str, Any]]:
    """The grid, block and completed parameters of the kernel :func:`generated` would make,
    without building it (isl's scan takes most of a build): enough to tell that a measured
    kernel is no longer the one the code generator makes."""
    scheduled = strategies.get(strategy).apply(program, params)
    grid = grid_at(launch_grid(scheduled), program.merging, program.expression_sizes)
    return grid, scheduled.block, dict(scheduled.params)


def storable(strategy: str) -> bool:
    """Whether kernels of ``strategy`` may be stored: those of the built-in strategies only,
    whose sources the generator's version hashes."""
    try:
        chosen = strategies.get(strategy)
    except StrategyError:
        return False
    return all(type(part).__module__.startswith(BUILT_IN)
               for part in getattr(chosen, "parts", (chosen,)))

"""The search policy, in one place: which strategy and parameters :func:`treduda.compile` gets.

:func:`tuned` is what ``compile`` asks. It looks the problem up in the tuning cache, trusts an
entry whose kernel the kernel store holds (made by this code generator, so it passed the
strategy's checks), re-checks any other against the parameter space, and otherwise takes a
small problem's first good candidate (:func:`~treduda.tuning.search.at_once`) or searches
within a budget of work (:func:`tuning_search`), re-ranks the winner by ptxas's registers
(:func:`reranked`), measures the best few where asked, and remembers the result.

ptxas's check of a winner whose registers are near the cap (or decide its occupancy) takes a
second or more (nvcc, and rivals' kernels where the report upsets the winner), as long as the
rest of a first call: for ``compile()`` it runs on a background thread (:func:`check_later`).
The call returns the model's pick at once; when the check picks another, later calls in the
process get that one (``corrected``) and the tuning cache holds it for new processes. The
interpreter waits for a pending check at exit (:func:`finish_background` waits earlier).

The policy decides; it makes no kernels. It asks a :class:`Generator` (``treduda.api``'s) for
the program and for the kernels of candidates, which it may take from the kernel store.
"""

from __future__ import annotations

import functools
import math
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

from ..errors import StrategyError, TredudaError
from ..frontend.identity import Identity, params_text
from ..model.gpus import Gpu
from ..model.interface import CostModel, capable
from ..model.model import model_of
from ..model.prediction import Compiled, MmaEconomy
from ..options import DEFAULT_BUDGET
from ..polyhedral.lower import Program
from ..polyhedral.strategy import Parameter, Priority, Role
from ..run.cuda import gpu_present
from ..run.nvcc import code_of, nvcc_supports
from ..run.sass import Compilation, compile_with_sass
from ..strategies import get as get_strategy
from ..versions import sources_digest
from . import budgets
from .cache import CacheKey, CacheWarning, TuningCache
from .search import at_once, search_program
from .search_result import Candidate, SearchResult
from .walk import estimate_kernel

# The node budget of the search compile() runs for small problems (whose candidates differ by
# microseconds) where their first good candidate is not taken at once (search.at_once): they
# stop early with the best found so far, within at most SMALL_PROBLEM_SECONDS of budget (as
# work: tuning/budgets.py), where others search within DEFAULT_BUDGET.
SEARCH_NODE_BUDGET = 5000  # compile()'s node budget before its budget (tests replay it)
SMALL_PROBLEM_BUDGET = 200
SMALL_PROBLEM_SECONDS = 0.2  # AO->MO n=16's strided steps took 5 s each in 0.9 s's work
# The packages whose code decides a search's pick (the model, the search, the strategies'
# spaces and models): an unmeasured pick stored by other code is searched again
# (:func:`search_version`).
SEARCH_PACKAGES = ("treduda.model", "treduda.tuning", "treduda.strategies")
MEASURED = 5  # candidates search(measure=True) generates, checks and times
CHECKED = 4  # candidates ptxas reports on at a time when the winner's report upsets it
CHECKED_MOST = 16  # ... and at most in all
# A batch after the first is compiled only for a candidate predicted this much faster than the
# best checked one: each report costs seconds of generation and nvcc for a full-size kernel.
CHECK_GAIN = 0.05
# The check compiles too the best of each family (mapping, staging, register tile) not checked
# predicted within this share of the best checked estimate (one batch: other_families).
FAMILY_SPREAD = 0.01
# Where a model breaks its near-ties by the SASS (its ``ties_by_sass``), candidates whose
# checked estimates lie within this share of the best are a tie, and the one whose main loop
# issues the fewest instructions (then shared bytes) per multiply-add of its MMAs wins: the
# hardware executes the SASS, and the model does not tell such candidates apart (rivals within
# it are not distinct either: search_result.DISTINCT). tccg_01 fp16's mma.sync pick, 2x1 warps
# of 4x2 fragments, 0.23% faster by the model (DRAM binds) than 4x1 warps, whose loop issues
# 1.95 non-MMA instructions and 336 shared bytes per MMA where the pick's issues 2.00 and 352.
SASS_TIE = 0.01
# ptxas's registers among kin (:func:`kin`) differ by up to this factor, the step alone moving
# them (nvcc 13, sm_90): tccg_10's 8 x 2 x 4 threads of 4 x 2 x 8 registers take 155 at step
# 16 and 128 at step 32, tccg_12's 16 x 8 threads of 8 x 8 take 130 at step 16 and 128 at
# step 64, tccg_18's 16 x 1 x 16 threads 151-165. A kin's report just past an occupancy step
# (130 registers: three blocks of 128 threads where 128 fit four) does not settle the others.
KIN_SPREAD = 1.25
KIN_REPORTS = 2  # reports on one kin at most: its first, and one that may land below a step
# ptxas re-estimates a winner (treduda.api._checked) whose predicted registers reach this share
# of what the launch bounds allow: below it, ptxas's allocation changes neither spills nor,
# in the cases measured, the estimate (nvcc costs a second per batch, generation more).
CHECK_REGISTERS = 0.75
# ptxas's registers over the model's prediction where it spills nothing (nvcc 13, sm_90, 189
# SIMT kernels of benchmarks/simt_registers.py: the H200 file's picks and rivals, the SIMT economy
# picks, random candidates of ten spaces): median 1.03, 95th percentile 1.49 (1.30 from 64
# predicted registers up, 1.26 from 96); the few above are small kernels whose loads ptxas
# hoists into the room it has. 1.5 covers 95% of them.
REGISTER_ERROR = 1.5
# A search of a new problem starts from the cached winners of this many of its nearest sizes
# (the same expression, dtype, layout and GPU): at a budget of 0.5 s they brought GEMM 4096^3's
# pick from 6% to 2% and tccg_01's from 13% to 1-3% above the complete search's best, seeded
# from 0.85x and 0.5x the extents (benchmarks/search_seeds.py).
SEEDS = 2

# isl's context is not made for threads: kernels are generated (isl's AST, our IR) by one
# thread at a time, compile()'s or the background check's.
GENERATING = threading.RLock()
# The work a first call leaves for later (ptxas's checks, each running nvcc on every core, and
# writes to the kernel store), one at a time; the pool's thread is joined at exit, so pending
# work still reaches the tuning cache and the kernel store.
_BACKGROUND = ThreadPoolExecutor(max_workers=1, thread_name_prefix="treduda-background")
_pending: list[Future] = []
_pending_lock = threading.Lock()  # calls on many threads leave work and wait for it


class Generator(Protocol):
    """The kernels of one problem, as the policy asks for them (``treduda.api`` makes them)."""

    @property
    def program(self) -> Program:
        """The problem's polyhedral program (planned, with isl, when first asked for)."""

    def __call__(self, strategy: str, params: Mapping[str, Any] | None) -> Any:
        """The kernel of ``strategy`` with ``params`` (a ``treduda.Kernel``), made once."""

    def known(self, strategy: str, params: Mapping[str, Any]) -> bool:
        """Whether the kernel store holds that kernel, made by this code generator."""


def tuned(problem: Identity, gpu: Gpu, store: TuningCache | None, measure: bool,
          generate: Generator, budget: float | None = DEFAULT_BUDGET,
          corrected: Callable[[str, dict[str, Any]], None] | None = None
          ) -> tuple[str, dict[str, Any]]:
    """The searched strategy and parameters of ``problem`` on ``gpu``, from the tuning cache
    ``store`` when it has them, else searched and kept there.

    An entry whose kernel the kernel store holds is used as it is: this code generator made
    that kernel from it, checking it against the parameter space then, and nothing is planned.
    Any other is re-checked against the program's parameter space before it is used; one that
    no longer fits is reported and searched for again. An entry holds the model's prediction
    (``seconds``, ``binding``) and, apart from it, a measurement (``measured``: seconds and
    the device) when the search timed its candidates; ``measure=True`` searches again where
    the entry has none. Where ptxas's check is due (and nothing is measured) it runs in the
    background (:func:`check_later`), and ``corrected(strategy, params)`` hears of a
    different winner."""
    key = CacheKey.of_identity(problem.on(gpu.name))
    hit = store.get(key) if store is not None else None
    if hit is not None and (hit.get("measured") or not measure and _same_search(hit)):
        if _known(hit, generate) or fits(generate.program, hit, key):
            return hit["strategy"], dict(hit["params"])
    seeds = [] if store is None else [value["params"] for value in store.similar(key, SEEDS)
                                      if isinstance(value.get("params"), dict)]
    program = generate.program
    result = searched(program, gpu, budget=budget, seeds=seeds, rivals=measure)
    check = needs_check(program, result)
    in_background = check and not measure
    if not in_background:
        result = reranked(result, 0, measure, generate, check=check)
    remember(store, program, result, "compile()", checking=in_background)
    if in_background:
        check_later(result, generate, store, corrected)
    return result.best.strategy, dict(result.best.params)


@functools.cache
def search_version() -> str:
    """treduda's version and a hash of the code that searched (:data:`SEARCH_PACKAGES`)."""
    return sources_digest(SEARCH_PACKAGES)


def _same_search(hit: dict) -> bool:
    """Whether the model and search of this code made the entry ``hit``: a pick the model
    of another version made is searched again, or a machine's tuning cache would answer with
    the old model's picks forever (a measured pick is kept: a GPU's time outlives a model)."""
    return hit.get("search") == search_version()


def _known(hit: dict, generate: Generator) -> bool:
    """Whether the kernel store holds the kernel of the entry ``hit`` (False for an entry
    whose fields are not a strategy and parameters: :func:`fits` reports it)."""
    try:
        return generate.known(hit["strategy"], dict(hit["params"]))
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def tuning_search(program: Program, gpu: str | Gpu, measure: bool, generate: Generator,
                  max_nodes: int | None = None, budget: float | None = DEFAULT_BUDGET,
                  seeds: Sequence[Mapping[str, Any]] = (), rivals: bool = False
                  ) -> SearchResult:
    """The search compile() runs for ``program`` when neither strategy nor params are given
    (``treduda tune`` runs the same one on a cluster): within ``budget`` seconds (None: the
    complete search) and ``max_nodes`` nodes, :data:`SMALL_PROBLEM_BUDGET` for a small
    problem, starting from ``seeds`` too (the winners of similar sizes); ptxas checks the
    winner of a problem that is not small where its registers are near the cap
    (:func:`worth_checking`). ``rivals`` (incremental tuning's) searches a small problem too,
    for candidates to time."""
    result = searched(program, gpu, max_nodes, budget, seeds, rivals or measure)
    return reranked(result, 0, measure, generate, check=needs_check(program, result))


def searched(program: Program, gpu: str | Gpu, max_nodes: int | None = None,
             budget: float | None = DEFAULT_BUDGET, seeds: Sequence[Mapping[str, Any]] = (),
             rivals: bool = False) -> SearchResult:
    """:func:`tuning_search`'s search, before any check: a small problem's first good
    candidate where no other beats it by a launch's overhead
    (:func:`~treduda.tuning.search.at_once`), unless ``rivals`` are wanted (to time them),
    nodes are counted or the complete search (``budget=None``) is asked for."""
    small = _small(program)
    if small and not rivals and max_nodes is None and budget is not None and (
            found := at_once(program, gpu)) is not None:
        return found
    nodes = max_nodes or (SMALL_PROBLEM_BUDGET if small else None)
    if small and budget is not None:
        budget = min(budget, SMALL_PROBLEM_SECONDS)
    return search_program(program, gpu, max_nodes=nodes, budget=budget, seeds=seeds)


def _small(program: Program) -> bool:
    return budgets.small(program.sizes)


def worth_checking(program: Program, result: SearchResult) -> bool:
    """Whether ptxas's report on ``result``'s winner can change its estimate: where the
    registers the model predicts reach :data:`CHECK_REGISTERS` of the launch bounds' cap
    (tccg_28's winner: 126 of 128 predicted, ptxas spilled; tccg_15's: 113 of 128, 16 bytes
    spilled), or spill already; or where its occupancy depends on them: the estimate is slower
    with :data:`REGISTER_ERROR` times the predicted registers (GEMM 4096^3's 256-thread
    8 x 8 winner: 109 predicted, two blocks per SM; ptxas gives it 155, one)."""
    best = result.best
    model = model_of(program, result.gpu, best.strategy)
    if model.register_pressure(best.params) >= CHECK_REGISTERS or tied(model, result):
        return True
    predicted, _ = model.registers(best.params)
    more = min(result.gpu.max_registers_per_thread, math.ceil(predicted * REGISTER_ERROR))
    return (model.estimate(best.params, Compiled(more)).seconds
            > model.estimate(best.params).seconds)


def tied(model: CostModel, result: SearchResult) -> bool:
    """Whether ``model``, the winner's, breaks near-ties by the SASS and another of
    ``result``'s candidates is predicted within :data:`SASS_TIE` of the winner."""
    bar = result.best.prediction.seconds * (1 + SASS_TIE)
    return capable(model, "ties_by_sass") and any(
        c.text != result.best.text and c.prediction.seconds <= bar for c in result.candidates)


def needs_check(program: Program, result: SearchResult) -> bool:
    """Whether ptxas should check ``result``'s winner: a problem that is not small, whose
    winner's registers are near the cap or decide its occupancy (:func:`worth_checking`),
    for a GPU nvcc here compiles for."""
    return (not _small(program) and worth_checking(program, result)
            and nvcc_supports(result.gpu.arch))


def check_later(result: SearchResult, generate: Generator, store: TuningCache | None,
                corrected: Callable[[str, dict[str, Any]], None] | None = None) -> None:
    """Check ``result``'s winner with ptxas (:func:`checked`) on the background thread, then
    keep the checked result in ``store`` and tell ``corrected`` of a different winner. A
    failing check is reported as a warning: the model's pick stands."""
    def check() -> None:
        try:
            found = checked(result, generate)
        except TredudaError as error:
            warnings.warn(f"ptxas's check of {result.best.strategy} "
                          f"{params_text(result.best.params)} failed, so the model's pick "
                          f"stands: {error}", CacheWarning, stacklevel=1)
            return
        remember(store, generate.program, found, "compile()")
        if corrected is not None and params_text(found.best.params) != params_text(
                result.best.params):
            corrected(found.best.strategy, dict(found.best.params))

    later(check)


def later(work: Callable[[], None]) -> None:
    """Run ``work`` on the background thread, after the work given before it. Work done
    without an error is forgotten; an error is raised by :func:`finish_background`."""
    with _pending_lock:
        _pending[:] = [f for f in _pending if not f.done() or f.exception() is not None]
        _pending.append(_BACKGROUND.submit(work))


def finish_background() -> None:
    """Wait for the pending background work (:func:`check_later`, :func:`later`)."""
    while True:
        with _pending_lock:
            if not _pending:
                return
            pending = _pending.pop()
        pending.result()


def reranked(result: SearchResult, refine: int, measure: bool, generate: Generator,
             check: bool = False) -> SearchResult:
    """``result`` with a new winner: with ``check``, as ptxas's reports re-estimate it
    (:func:`checked`); among its ``refine`` best by the walk over their kernels; then with
    ``measure`` among its :data:`MEASURED` best by their checked, timed runs."""
    if check and nvcc_supports(result.gpu.arch):
        result = checked(result, generate)
    if refine:
        walked = [_walked(result, c, generate) for c in result.top(refine)]
        result = replace(result, best=min(walked, key=lambda c: (c.walked.seconds, c.key())))
    if measure:
        backend = "cuda" if gpu_present() else "opencl"
        measured = [_measured(c, backend, generate) for c in result.top(MEASURED)]
        result = replace(result, best=min(measured, key=lambda c: c.measured))
    return result


def checked(result: SearchResult, generate: Generator) -> SearchResult:
    """``result`` whose winner ptxas has reported on: re-estimated with the registers and
    spills of its compiled kernel; while the best so re-estimated is slower than the prediction
    of the best candidate not yet compiled (after the first batch, by :data:`CHECK_GAIN`), the
    next :data:`CHECKED` are compiled and re-estimated too (up to :data:`CHECKED_MOST`), then
    the best of each other family predicted near the best checked (:func:`other_families`)
    and, for a model that breaks near-ties by the SASS, the near-tied candidates of other kin
    (:func:`near_ties`), and the fastest wins, or of a near-tie the one whose SASS main loop
    issues least beside its MMAs (:func:`tie_broken`). A candidate whose kin (:func:`kin`)
    ptxas has reported on is not compiled: its allocation is known, and the check looks past
    it to other mappings and tiles; unless the kin's report with :data:`KIN_SPREAD` times
    fewer registers would make it beat the best checked, as where the report lands just past
    an occupancy step (then one more kin is compiled: :data:`KIN_REPORTS`). It is
    re-estimated with its nearest kin's report (:func:`alike`), so that the result's ranking
    (:meth:`SearchResult.top`, the rivals a GPU times) holds no upset kernel's optimistic
    twins; the winner is one ptxas reported on.

    The model predicts registers and spills from the main loop alone; ptxas's allocation of a
    large unrolled loop can differ, e.g. tccg_28's 3000-node winner (512 threads, a 4 x 8 x 2
    register tile, B read from global memory over an 8 x 8 step) was predicted to fit 128
    registers, and ptxas spilled 2.3 KB per thread while both summed indices of a step were
    unrolled; tccg_15's winners fit 113 by the model and ptxas spills 16 bytes. tccg_28's
    winner now preloads an 8 x 8 step: 126 registers by the model, 168 by ptxas (59.5 ms
    instead of 44.9); the four best are all such, alike but for symmetry, and the fifth, the
    same without preloading, takes 122 (44.9 ms). tccg_18's 16 best of a 3000-node search
    were all one mapping and tiles (16 x 1 x 16 threads, 4 x 2 x 8 registers, 109 registers
    by the model, 151-165 by ptxas, one block per SM instead of two: 1.70-1.77 ms instead of
    0.84); checked one by one, they filled the check, and the pick was twice as slow as a
    285-node search's. tccg_12's step-64 kernel of 16 x 8 threads, 8 x 8 registers (128 by
    ptxas, 15.10 ms) was carried at 20.1 ms from its step-16 kin (130 registers: three blocks
    per SM where 128 fit four) and never compiled; the pick was a 17.65 ms kernel."""
    with GENERATING:  # a strategy's space may ask isl
        models = {s: model_of(generate.program, result.gpu, s)  # a search may rank several
                  for s in {c.strategy for c in result.candidates}}
        parameters = {s: {p.name: p for p in get_strategy(s).space(generate.program).parameters}
                      for s in models}

    # ptxas's report on each kernel compiled, by its strategy and code (code_of): a kernel
    # whose code another's equals but for its name is not compiled again (tccg_28's default
    # check compiled 7 kernels, 3 of them one code).
    compilations: dict[tuple[str, str], Compilation] = {}

    def with_reports(candidates: list[Candidate]) -> list[Candidate]:
        kernels = [generate(c.strategy, c.params) for c in candidates]
        codes = [(c.strategy, code_of(k.cuda_source))
                 for c, k in zip(candidates, kernels, strict=True)]
        fresh = {code: kernel for code, kernel in zip(codes, kernels, strict=True)
                 if code not in compilations}  # one kernel of each code not compiled yet
        read = [k.cuda_source for (strategy, _), k in fresh.items()
                if capable(models[strategy], "reads_sass")
                or capable(models[strategy], "ties_by_sass")]
        reports = compile_with_sass([k.cuda_source for k in fresh.values()], result.gpu.arch,
                                    read)
        for (code, kernel), report in zip(fresh.items(), reports, strict=True):
            compilations[code] = next(r for r in report if r.name == kernel.name)
        checked = []
        for candidate, code in zip(candidates, codes, strict=True):
            found = compilations[code]
            compiled = Compiled.of(found.ptxas, found.sass)
            estimate = models[candidate.strategy].estimate(candidate.params, compiled)
            checked.append(replace(candidate, compiled=compiled, prediction=estimate))
        return checked

    kins: dict[str, tuple] = {}  # by the candidate's parameters: a search scores some twice

    def kin_of(candidate: Candidate) -> tuple:
        if candidate.text not in kins:
            kins[candidate.text] = kin(candidate, models[candidate.strategy],
                                       parameters[candidate.strategy])
        return kins[candidate.text]

    hopes: dict[str, float] = {}  # by the candidate's parameters: its kin's one report's

    def hopeful(candidate: Candidate, checked: list[Candidate], batch: list[Candidate],
                bar: float) -> bool:
        """Whether ``candidate``, whose kin ptxas reported on once (and none is in ``batch``),
        may still be faster than ``bar``: with its kin's report (:func:`as_kin`) but
        :data:`KIN_SPREAD` times fewer registers (not below the model's)."""
        family = [c for c in checked + batch if kin_of(c) == kin_of(candidate)]
        if len(family) != KIN_REPORTS - 1 or family[0].compiled is None:
            return False  # no report yet (its kin is in this batch), or enough of them
        if candidate.text not in hopes:
            model = models[candidate.strategy]
            report = as_kin(family[0], candidate, model)
            least = max(model.registers(candidate.params)[0],
                        math.ceil(report.registers / KIN_SPREAD))
            hopes[candidate.text] = model.estimate(
                candidate.params, replace(report, registers=least)).seconds
        return hopes[candidate.text] < bar

    ranked = result.top(len(result.candidates))
    checked = with_reports(ranked[:1])
    gain = 0.0  # the first rivals are checked on any upset, later ones for a real gain only
    while len(checked) < CHECKED_MOST:
        bar = min(c.prediction.seconds for c in checked) / (1 + gain)
        reported = {kin_of(c) for c in checked}
        done = {c.text for c in checked}
        batch: list[Candidate] = []
        for candidate in ranked:
            if candidate.text in done:
                continue
            family = kin_of(candidate)
            if family in reported:
                if not hopeful(candidate, checked, batch, bar):
                    continue
            elif not batch and candidate.prediction.seconds >= bar:
                break
            batch.append(candidate)
            reported.add(family)
            done.add(candidate.text)
            if len(batch) == min(CHECKED, CHECKED_MOST - len(checked)):
                break
        if not batch:
            break
        checked += with_reports(batch)
        gain = CHECK_GAIN
    others = other_families(ranked, checked, parameters)
    if others:
        checked += with_reports(others)
    ties = near_ties(ranked, checked, kin_of, models)
    if ties:
        checked += with_reports(ties)
    best = tie_broken(checked, models)
    known = {c.text: c for c in checked}

    def carried(candidate: Candidate) -> Candidate:
        """``candidate`` as ptxas reported on it or on its kin."""
        if candidate.text not in known:
            family = [c for c in checked if kin_of(c) == kin_of(candidate)]
            model = models[candidate.strategy]
            known[candidate.text] = replace(candidate, prediction=model.estimate(
                candidate.params, as_kin(alike(candidate, family), candidate, model))
            ) if family else candidate
        return known[candidate.text]

    return replace(result, best=best, candidates=tuple(map(carried, result.candidates)))


def other_families(ranked: Sequence[Candidate], checked: Sequence[Candidate],
                   parameters: Mapping[str, Mapping[str, Parameter]]) -> list[Candidate]:
    """Of ``ranked`` (best first), the best of each family (:func:`family`) that none of
    ``checked`` belongs to, predicted within :data:`FAMILY_SPREAD` of the best checked
    estimate, :data:`CHECKED` at most: a family whose best is a little slower by the model
    may still win after ptxas's reports, where the check's batches after the first seek a
    gain of :data:`CHECK_GAIN`. tccg_02's 3000-node winner, predicted 0.0925 ms, checks at
    0.0964; a 16 x 4 and 1 x 2 register tile of its mapping, predicted 0.0932, at 0.0928.
    tccg_28's winner, 35.55 predicted, checks at 35.58; another family's best, 35.69, at 35.47."""
    bar = min(c.prediction.seconds for c in checked) * (1 + FAMILY_SPREAD)
    seen = {family(c, parameters[c.strategy]) for c in checked}
    found: list[Candidate] = []
    for candidate in ranked:
        if candidate.prediction.seconds > bar or len(found) == CHECKED:
            break
        decided = family(candidate, parameters[candidate.strategy])
        if decided not in seen:
            seen.add(decided)
            found.append(candidate)
    return found


def near_ties(ranked: Sequence[Candidate], checked: Sequence[Candidate],
              kin_of: Callable[[Candidate], tuple], models: Mapping[str, CostModel]
              ) -> list[Candidate]:
    """Of ``ranked`` (best first), those of models that break near-ties by the SASS
    (``ties_by_sass``) predicted within :data:`SASS_TIE` of the best checked estimate, each
    of a kin (``kin_of``: mapping and tiles) none of ``checked`` nor of the others is of,
    :data:`CHECKED` at most: their SASS may differ where the model prices them alike; kin
    differ in the step or buffers alone. tccg_01 fp16's 4x1 warps, 0.23% slower by the model
    than the pick's 2x1, came tenth of its search, after eight kin of the pick. Those whose
    reads take more sectors than the best checked one's (:func:`reads_no_more`), which
    :func:`tie_broken` would not take, are left uncompiled where its model breaks ties too."""
    best = min(checked, key=Candidate.key)
    bar = best.prediction.seconds * (1 + SASS_TIE)
    seen = {kin_of(c) for c in checked}
    found: list[Candidate] = []
    for candidate in ranked:
        if candidate.prediction.seconds > bar or len(found) == CHECKED:
            break
        if capable(models[candidate.strategy], "ties_by_sass") and (
                kin := kin_of(candidate)) not in seen:
            seen.add(kin)
            found.append(candidate)
    if not capable(models[best.strategy], "ties_by_sass"):
        return found
    reads = models[best.strategy].read_sectors(best.params)
    return [c for c in found if reads_no_more(c, reads, models)]


def tie_broken(checked: Sequence[Candidate], models: Mapping[str, CostModel]) -> Candidate:
    """The fastest of ``checked`` by their re-estimates (:meth:`Candidate.key`); where its
    model breaks near-ties by the SASS and its SASS main loop was read, the one of least
    :class:`~treduda.model.prediction.MmaEconomy` (instructions, then shared bytes, per
    multiply-add of the MMAs) among those predicted within :data:`SASS_TIE` of it whose
    models do too and whose every operand's reads take no more global sectors per ideal
    sector than its own, as their models count them (``read_sectors``): fewer instructions
    do not buy back sectors the hardware moves (tccg_32 fp16's group layout issued 3.38
    non-MMA instructions per MMA where the full one issued 3.39, and its B copies took 16
    sectors a request where 12 would do, the full one's 12)."""
    fastest = min(checked, key=Candidate.key)

    def economy(candidate: Candidate) -> MmaEconomy | None:
        if candidate.compiled is None or not capable(models[candidate.strategy],
                                                     "ties_by_sass"):
            return None
        return candidate.compiled.mma_economy

    if economy(fastest) is None:
        return fastest
    reads = models[fastest.strategy].read_sectors(fastest.params)
    bar = fastest.prediction.seconds * (1 + SASS_TIE)
    return min((c for c in checked if c.prediction.seconds <= bar and economy(c) is not None
                and reads_no_more(c, reads, models)),
               key=lambda c: (economy(c), c.key()))


def reads_no_more(candidate: Candidate, reads: Mapping[str, float],
                  models: Mapping[str, CostModel]) -> bool:
    """Whether each operand's reads of ``candidate`` take no more global sectors per ideal
    sector than ``reads`` gives for it (another's ``read_sectors``), as its model counts them:
    a near-tie that reads more is none, whatever its SASS (see :func:`tie_broken`)."""
    own = models[candidate.strategy].read_sectors(candidate.params)
    return all(own[tensor] <= read for tensor, read in reads.items())


def family(candidate: Candidate, parameters: Mapping[str, Parameter]) -> tuple:
    """``candidate``'s strategy, mapping, staged operands and register tile (its
    ``parameters`` of :attr:`Priority.MAPPING` and :attr:`Priority.STAGING`, and those of
    :attr:`Role.REGISTER`: a thread's registers along each axis): kernels that differ in
    mechanism, where its threads, step and buffers do not (ptxas's registers follow the
    register tile: on tccg_02, 129 for 16 x 8 threads x registers along y, 128 for 16 x 4
    along y and 1 x 2 along z)."""
    return candidate.strategy, tuple(
        (name, value) for name, value in candidate.params.items()
        if parameters[name].priority in (Priority.MAPPING, Priority.STAGING)
        or parameters[name].role is Role.REGISTER)


def alike(candidate: Candidate, kin: Sequence[Candidate]) -> Candidate:
    """Of ``kin`` (compiled candidates), the first with the fewest parameters unlike
    ``candidate``'s: the report whose step and buffers are nearest its own."""
    return min(kin, key=lambda c: sum(c.params.get(name) != value
                                      for name, value in candidate.params.items()))


def as_kin(compiled: Candidate, candidate: Candidate, model: CostModel) -> Compiled:
    """``compiled``'s report (:class:`Compiled`) as what ``candidate``, its kin, is taken to
    cost: the registers and spills alike, and the SASS main loop's instructions per FMA, where
    read, in the ratio of the two's counts by ``model`` (a kin's step or buffers change its
    instructions: like with like, as the candidates compiled are estimated)."""
    report = compiled.compiled
    if report is None or report.instructions_per_fma is None or not capable(model, "reads_sass"):
        return report  # a model that does not read the SASS count takes none of it
    ratio = (sum(model.issue_instructions(candidate.params).values())
             / sum(model.issue_instructions(compiled.params).values()))
    return replace(report, instructions_per_fma=report.instructions_per_fma * ratio)


def kin(candidate: Candidate, model: CostModel, parameters: Mapping[str, Parameter]) -> tuple:
    """What ptxas's allocation of ``candidate`` is taken to follow: its mapping and tiles (its
    parameters of :attr:`Priority.MAPPING` and :attr:`Priority.TILES`: the block's threads and
    a thread's registers) and the registers and spills ``model`` predicts. Candidates that
    differ only in the step, buffers or code with the same predicted registers are kin:
    tccg_18's sixteen best 1.70-1.77 ms by ptxas's 151-165 registers (step 16 or 32, padded
    or not); a kernel that preloads is not kin of the same without (tccg_28: 168 against 122
    registers by ptxas, 126 and fewer by the model)."""
    decided = tuple((name, value) for name, value in candidate.params.items()
                    if parameters[name].priority in (Priority.MAPPING, Priority.TILES))
    return candidate.strategy, decided, model.registers(candidate.params)


def _walked(result: SearchResult, candidate: Candidate, generate: Generator) -> Candidate:
    """``candidate`` with the estimate of a walk over its generated kernel, and its bound
    where the local search, which scores estimates alone, found it (as the winner gets it):
    a walked winner is compared with its bound."""
    kernel = generate(candidate.strategy, candidate.params)
    bound = candidate.bound
    if bound is None:
        model = model_of(generate.program, result.gpu, candidate.strategy)
        bound = model.bound(candidate.params).seconds
    return replace(candidate, walked=estimate_kernel(kernel, result.gpu), bound=bound)


def _measured(candidate: Candidate, backend: str, generate: Generator) -> Candidate:
    """``candidate`` with its median time per launch on ``backend``, after checking its
    result against numpy.einsum there."""
    kernel = generate(candidate.strategy, candidate.params)
    kernel.verify(backend=backend)
    timing = kernel.time(backend)
    return replace(candidate, measured=timing.seconds, measured_on=timing.device)


def store_of(cache: TuningCache | bool) -> TuningCache | None:
    """The tuning cache ``cache`` names: itself, the default file (True), or none (False)."""
    return cache if isinstance(cache, TuningCache) else (TuningCache() if cache else None)


def cached(program: Program, store: TuningCache, key: CacheKey, measure: bool) -> dict | None:
    """``store``'s entry under ``key`` if it still fits ``program``'s parameter space (one that
    no longer fits is reported and ignored) and, with ``measure``, holds a measured time."""
    hit = store.get(key)
    if hit is None or (measure and not hit.get("measured")):
        return None
    return hit if fits(program, hit, key) else None


def fits(program: Program, hit: dict, key: CacheKey) -> bool:
    """Whether the entry ``hit`` names a strategy whose space holds its parameters for
    ``program``; one that does not is reported."""
    try:
        chosen = get_strategy(hit["strategy"])
        chosen.space(program).check({**chosen.defaults(program), **hit["params"]})
        return True
    except (StrategyError, KeyError, TypeError) as error:
        warnings.warn(f"ignoring the cached tuning for {key}: {error}", CacheWarning,
                      stacklevel=4)
        return False


def cache_value(result: SearchResult, by: str, checking: bool = False) -> dict[str, Any]:
    """What the tuning cache keeps of a search: its winner's strategy and parameters, the
    model's prediction (``seconds``, ``binding``), apart from it a measurement (``measured``:
    seconds and the device) where the search timed its candidates, and how it was ``found``
    (``by`` whom: compile(), treduda.search(), treduda tune; ``checking``: while ptxas's
    check of the winner runs in the background, see :func:`check_later`)."""
    best, stats = result.best, result.stats
    measured = None if best.measured is None else {"seconds": best.measured,
                                                   "device": best.measured_on}
    found = (f"by {by}, a {'complete search' if stats.complete else 'search within a budget'} "
             f"of {stats.nodes_visited} nodes"
             + (f", started from {stats.seeded} winner(s) of similar sizes" if stats.seeded
                else "")
             + (", re-ranked by walking the kernels" if best.walked is not None else "")
             + _reestimated(best.compiled)
             + (", ptxas's check running" if checking else ""))
    return {"strategy": best.strategy, "params": dict(best.params),
            "seconds": best.prediction.seconds, "binding": best.prediction.binding,
            "measured": measured, "found": found, "search": search_version()}


def _reestimated(compiled: Compiled | None) -> str:
    """What ptxas's check re-estimated a winner with, for ``found``: its registers and spills,
    and the instructions its SASS main loop issues per FMA where that loop was read
    (:meth:`Compiled.of`: the full tiles' loop of an FMA kernel)."""
    if compiled is None:
        return ""
    sass = (" and its SASS main loop's instructions per FMA"
            if compiled.instructions_per_fma is not None else "")
    return f", re-estimated with ptxas's registers and spills{sass}"


def remember(store: TuningCache | None, program: Program, result: SearchResult,
             by: str, checking: bool = False) -> None:
    """Keep ``result``, the search of ``program``, in the tuning cache ``store`` (if any), as
    found ``by`` whom (:func:`cache_value`), ``checking`` where ptxas's check is running. A
    measured entry is never replaced by an unmeasured result: a prediction does not overrule
    a timing (``treduda bench`` searches every row it runs with the cache)."""
    if store is None:
        return
    key = CacheKey.of(program, result.gpu.name)
    if result.best.measured is None:
        kept = store.get(key)
        if kept is not None and kept.get("measured"):
            return
    store.put(key, cache_value(result, by, checking))

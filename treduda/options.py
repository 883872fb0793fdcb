"""The options of a call, as one value: :class:`Options`.

Every entry point (:func:`treduda.contract`, :func:`~treduda.compile`,
:func:`~treduda.contract_expression`, :func:`~treduda.program`, :func:`~treduda.search`, the
command line) turns its keyword options into an :class:`Options` and hands that value down to
the stages that need it (the path planner too), so an option is named once, checked once
(here, when the value is made) and cannot be lost on the way. The value is frozen and
hashable: the process's kept kernels and plans key on it.

Tensors never share a namespace with options: an entry point's keywords that name an option are
options, and a tensor named like one (``dtype``, ``gpu``, ``out``...) is passed by position or
in the entry point's mapping (``arrays=``, ``shapes=``); :func:`check_tensor_names` refuses it
otherwise, before any work.

This module imports nothing heavy, so ``treduda.Options`` is cheap to reach; the checks that
need numpy or opt_einsum import them when a value is made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ArgumentError, did_you_mean
from .frontend.dtype_names import DEFAULT_CASTING, HIGHEST

# The seconds of search compile(), contract() and search() spend by default (budget=None: the
# complete search), as work (treduda.tuning.budgets.WORK_PER_SECOND). Since the local search
# moves the fastest candidate into the mappings the tree left unscored instead of diving into
# each (issue 44), 0.45-0.6 s pick the same on GEMM 4096^3 and tccg_01/03/15/28/33: GEMM's
# complete search's best (2.6547 ms), the TCCG rows 0-1.6% above the best a 10 s search finds
# (benchmarks/search_budget.py); at 0.4 s tccg_28 ends 24% above it. At 0.8 s with a dive per
# mapping, tccg_03/28 ended 43-31% above it. 0.5 s: GEMM 4096^3's search does 2000 work, not
# 3200, a cold compile() 20% fewer instructions (callgrind).
DEFAULT_BUDGET = 0.5
BACKENDS = ("opencl", "cuda", "emulator")  # where a kernel runs
INCREMENTAL = "incremental"  # tune=: measure the best candidates on the first calls
MODEL = "model"  # tune=: run the model's pick only (the search's winner)
TUNES = (INCREMENTAL, MODEL)


@dataclass(frozen=True)
class Options:
    """How a contraction is computed, apart from its tensors and sizes.

    Each field is checked when the value is made (:class:`~treduda.errors.ArgumentError`,
    or :class:`~treduda.errors.DtypeError` for dtypes, precisions and castings); derive
    another with :meth:`replace`. An entry point reads the fields it uses and ignores the
    others, so one value can serve many calls.
    """

    dtype: str | None = None  # the result's; None: numpy's result type (float32 with no arrays)
    layout: str = "C"  # "C": row-major, last index fastest; "F": column-major
    precision: str = HIGHEST  # float32 sums' inputs: "highest", "tf32" or "3xtf32"
    casting: str = DEFAULT_CASTING  # numpy's rule for converting the arrays to dtype
    deterministic: bool | None = None  # no atomic additions; None: treduda.is_deterministic()
    optimize: Any = "auto"  # a product of 3+ tensors' path (frontend.optimize.AUTO: the model's)
    tune: str | None = None  # "incremental" or "model"; None: incremental on backend="cuda"
    gpu: Any = "H100"  # the GPU tuned for: a name or a Gpu (checked by treduda.model.gpus.gpu)
    backend: str = "opencl"  # where kernels run: "opencl" (PoCL), "cuda" or "emulator"
    budget: float | None = DEFAULT_BUDGET  # the search's seconds, counted as work; None: all
    strategy: str | None = None  # a strategy's name; None with params None: searched
    params: tuple[tuple[str, Any], ...] | None = None  # the strategy's parameters (a mapping)
    measure: bool = False  # time the search's best candidates and keep the fastest

    def __post_init__(self) -> None:
        from .frontend.arguments import check_choice, check_types
        from .frontend.dtypes import check_casting, check_precision, kernel_dtype
        from .frontend.optimize import check_optimize

        params = dict(self.params) if isinstance(self.params, tuple) else self.params
        check_types(layout=self.layout, strategy=self.strategy, params=params,
                    measure=self.measure, deterministic=self.deterministic, budget=self.budget)
        if self.dtype is not None:
            kernel_dtype(self.dtype)  # DtypeError for a dtype no kernel computes
            self._set("dtype", _dtype_name(self.dtype))
        check_precision(self.precision, self.dtype or "float32")
        check_casting(self.casting)
        check_choice("backend", self.backend, BACKENDS)
        if self.tune is not None and self.tune not in TUNES:
            raise ArgumentError(f"tune must be one of {', '.join(TUNES)} or None (incremental "
                                f"on backend='cuda', else model), got {self.tune!r}")
        if self.deterministic is not None:
            self._set("deterministic", bool(self.deterministic))  # numpy's bool too
        if params is not None:
            self._set("params", tuple(sorted(params.items())))
        self._set("optimize", check_optimize(self.optimize))

    def _set(self, name: str, value: Any) -> None:
        """Normalise a field while the value is being made (it is frozen afterwards)."""
        object.__setattr__(self, name, value)

    def replace(self, **changes: Any) -> Options:
        """A copy with ``changes`` (field names to values), checked as a new value is."""
        check_option_names(changes, FIELDS, "Options")
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, options: Options | None, keywords: Mapping[str, Any], takes: Collection[str],
           where: str) -> Options:
        """``options`` (or the defaults) with an entry point's keyword options on top: a
        keyword overrides the field it names. ``takes`` are the options the entry point
        ``where`` reads; a keyword it does not take is refused, with the closest name."""
        if options is not None and not isinstance(options, Options):
            raise ArgumentError(f"options must be a treduda.Options, got "
                                f"{type(options).__name__} {options!r}")
        check_option_names(keywords, takes, where)
        base = options or cls()
        return base.replace(**keywords) if keywords else base

    @property
    def params_mapping(self) -> dict[str, Any] | None:
        """The strategy's parameters as a dict (None where none were given)."""
        return None if self.params is None else dict(self.params)


FIELDS = tuple(field.name for field in dataclasses.fields(Options))


def check_option_names(names: Iterable[str], takes: Collection[str], where: str) -> None:
    """Raise :class:`ArgumentError` for a name that is not one of the options ``takes``."""
    for name in names:
        if name not in takes:
            what = (f"{where} does not take the option {name}=" if name in FIELDS
                    else f"no option {name!r}{did_you_mean(name, takes)}")
            raise ArgumentError(f"{what}; {where} takes {', '.join(takes)}")


def split_keywords(keywords: Mapping[str, Any], takes: Collection[str]
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """An entry point's ``**keywords`` as (its options, the rest: tensors by name)."""
    options = {name: value for name, value in keywords.items() if name in takes}
    return options, {name: value for name, value in keywords.items() if name not in takes}


def check_tensor_names(tensors: Iterable[str], given: Collection[str], reserved: Iterable[str],
                       where: str, mapping: str, positional: bool) -> None:
    """Refuse a tensor of the expression named like one of the keywords ``reserved`` (an
    entry point's options and arguments) unless it is among those ``given`` by position or
    in the ``mapping`` argument: passed by keyword, it would be taken as that option."""
    reserved = set(reserved)
    for name in tensors:
        if name in reserved and name not in given:
            how = "by position or " if positional else ""
            raise ArgumentError(
                f"the tensor {name} has the name of {where}'s keyword {name}=, so it cannot be "
                f"passed as {name}=...; pass it {how}in {mapping}={{{name!r}: ...}} (the "
                f"keyword {name}= stays the option)")


def merged_mapping(mapping: Mapping[str, Any] | None, keywords: Mapping[str, Any],
                   name: str) -> dict[str, Any]:
    """Tensors given in the ``mapping`` argument called ``name`` and by keyword, as one dict;
    ArgumentError for a tensor given both ways, or a ``mapping`` that is not one."""
    if mapping is None:
        return dict(keywords)
    if not isinstance(mapping, Mapping) or not all(isinstance(k, str) for k in mapping):
        raise ArgumentError(f"{name} must be a mapping from tensor names to values, such as "
                            f"{name}={{'A': a}}, got {type(mapping).__name__}")
    doubled = sorted(set(mapping) & set(keywords))
    if doubled:
        raise ArgumentError(f"{', '.join(doubled)} given both in {name}= and by keyword")
    return {**mapping, **keywords}


def _dtype_name(dtype: Any) -> str:
    """numpy's name of ``dtype`` (``np.float32`` and ``"f4"`` are ``"float32"``)."""
    import numpy

    return numpy.dtype(dtype).name

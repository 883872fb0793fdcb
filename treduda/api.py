"""The public entry points: plan a kernel (:func:`compile`) or plan and run (:func:`contract`)."""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import strategies
from .ast_build import build
from .cache import CacheKey, CacheWarning, TuningCache
from .contraction import Contraction, analyse, infer_sizes, resolve_sizes
from .dtypes import DTYPES, infer
from .errors import StrategyError
from .gpus import gpu as find_gpu
from .kernel import Kernel
from .lower import LAYOUTS, lower
from .printer import check_identifiers
from .search import search

DEFAULT_STRATEGY = "tiled+staged"
# Node budgets of the search compile() runs: enough for full-size problems to finish; small
# ones (whose candidates differ by microseconds) stop early with the best found so far.
SEARCH_NODE_BUDGET = 1000
SMALL_PROBLEM = 10_000_000  # points in the iteration space
SMALL_PROBLEM_BUDGET = 200


def compile(expr: str, sizes: Mapping[str, int] | None = None, *, dtype: str = "float32",
            layout: str = "C", strategy: str | None = None,
            params: Mapping[str, Any] | None = None, symbolic: bool = False,
            gpu: str = "H100", cache: TuningCache | bool = True,
            measure: bool = False) -> Kernel:
    """Generate a kernel for ``expr`` (Einstein notation or ``"ik,kj->ij"``).

    ``sizes`` maps each index to its extent. With ``symbolic=True`` the extents become kernel
    arguments, so one kernel serves every size (``sizes`` may then be omitted). ``layout`` is
    ``"C"`` (row-major) or ``"F"`` (column-major); ``strategy`` and ``params`` choose how the
    work is mapped onto the GPU (``treduda.strategies.available()`` lists them). Without either,
    fixed sizes are tuned for ``gpu`` by :func:`treduda.search` and the result kept in the
    tuning cache (``cache=False`` skips it); symbolic kernels take the default strategy.
    ``measure=True`` has the search time its best candidates (on the GPU when one is here,
    else on PoCL) and keep the fastest; the cache keeps that time apart from the prediction.
    """
    if dtype not in DTYPES:
        raise StrategyError(f"dtype {dtype!r} is not supported; choose one of {DTYPES}")
    if layout not in LAYOUTS:
        raise StrategyError(f"layout {layout!r} is not supported; choose 'C' (row-major) or "
                            "'F' (column-major)")
    contraction = analyse(expr)
    fixed = None if symbolic else resolve_sizes(contraction, sizes or {})
    if symbolic and sizes:
        resolve_sizes(contraction, sizes)  # still report typos and bad extents
    program = lower(contraction, fixed, layout, dtype)
    if strategy is None and params is None and fixed is not None:
        strategy, params = _tuned(expr, fixed, dtype, layout, gpu, cache, program, measure)
    chosen = strategies.get(strategy or DEFAULT_STRATEGY)
    scheduled = chosen.apply(program, params)
    built = build(scheduled, _kernel_name(contraction, fixed, dtype, layout, scheduled.strategy,
                                          scheduled.params))
    check_identifiers(built.kernel)
    return Kernel(contraction, program, built, scheduled.strategy, scheduled.params)


def contract(expr: str, *operands: Any, dtype: str | None = None, layout: str = "C",
             backend: str = "opencl", strategy: str | None = None,
             params: Mapping[str, Any] | None = None, **values: Any) -> np.ndarray:
    """Compute ``expr`` on numpy arrays passed by tensor name (or positionally, in order of
    appearance, for ``"ik,kj->ij"``) and scalars by name; returns the output array.

    Sizes come from the arrays; the dtype is double precision if any array is, complex if
    any array or scalar is (``alpha=0.5j``), else float32.
    """
    contraction = analyse(expr)
    values = {**_positional(contraction, operands), **values}
    arrays = {k: np.asarray(v) for k, v in values.items() if k not in contraction.scalars}
    sizes = infer_sizes(contraction, arrays)
    if dtype is None:
        dtype = infer((a.dtype for a in arrays.values()),
                      (v for k, v in values.items() if k in contraction.scalars))
    kernel = compile(expr, sizes, dtype=dtype, layout=layout, strategy=strategy, params=params)
    return kernel.run(backend=backend, **values)


def _tuned(expr: str, sizes: dict[str, int], dtype: str, layout: str, gpu: str,
           cache: TuningCache | bool, program, measure: bool) -> tuple[str, dict[str, Any]]:
    """The searched strategy and parameters, from the tuning cache when it has them.

    A cached entry is re-checked against this program's parameter space before it is used;
    one that no longer fits is reported and searched for again. An entry holds the model's
    prediction (``seconds``, ``binding``) and, apart from it, a measurement (``measured``:
    seconds and the device) when the search timed its candidates; ``measure=True`` searches
    again where the entry has none."""
    store = cache if isinstance(cache, TuningCache) else (TuningCache() if cache else None)
    key = CacheKey.make(expr, sizes, dtype, layout, find_gpu(gpu).name)
    hit = store.get(key) if store is not None else None
    if hit is not None and (hit.get("measured") or not measure):
        try:
            chosen = strategies.get(hit["strategy"])
            chosen.space(program).check({**chosen.defaults(program), **hit["params"]})
            return hit["strategy"], dict(hit["params"])
        except (StrategyError, KeyError, TypeError) as error:
            warnings.warn(f"ignoring the cached tuning for {key}: {error}", CacheWarning,
                          stacklevel=3)
    budget = SMALL_PROBLEM_BUDGET if math.prod(sizes.values()) < SMALL_PROBLEM else (
        SEARCH_NODE_BUDGET)
    result = search(expr, sizes, gpu, dtype=dtype, layout=layout, max_nodes=budget,
                    measure=measure)
    best = result.best
    if store is not None:
        measured = None if best.measured is None else {"seconds": best.measured,
                                                       "device": best.measured_on}
        store.put(key, {"strategy": best.strategy, "params": best.params,
                        "seconds": best.prediction.seconds, "binding": best.prediction.binding,
                        "measured": measured})
    return best.strategy, dict(best.params)


def _positional(contraction: Contraction, operands: tuple) -> dict[str, Any]:
    names = list(contraction.inputs)
    if len(operands) > len(names):
        raise StrategyError(f"{len(operands)} arrays given but the expression has "
                            f"{len(names)} input tensor(s): {', '.join(names)}")
    return dict(zip(names[: len(operands)], operands, strict=True))


def _kernel_name(c: Contraction, sizes, dtype, layout, strategy, params) -> str:
    """A C name unique to everything that shapes the kernel text (so sources can be batched)."""
    key = repr((repr(c.tree), sorted((sizes or {}).items()), dtype, layout, strategy,
                sorted(params.items())))
    return f"td_{c.output}_{hashlib.sha1(key.encode()).hexdigest()[:10]}"

"""What makes two kernels the same: one :class:`Identity`, from which every cache derives its key.

The process's kept kernels (``treduda.api``), the tuning cache's keys
(:class:`~treduda.tuning.cache.CacheKey`), the kernel store and the kernels' C names all say
"the same kernel" through it. A problem's identity is the expression's statement tree (so
spellings that parse alike are one), its sizes, dtype, layout, precision and whether it must be
deterministic; a search result adds the GPU it was tuned for; a generated kernel adds its
strategy and parameters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .contraction import Contraction, analyse, resolve_sizes
from .dtypes import HIGHEST

SYMBOLIC = "symbolic"
"""The size class of kernels whose extents are runtime arguments."""


# Parameters a strategy (one part of a chain) gained after kernels were first named, at the
# value that makes the kernel its strategy made before: left out of the C name there.
LATER_PARAMETERS: dict[str, dict[str, Any]] = {"staged": {"async_copy": False}}


# json.dumps(..., sort_keys=True) builds an encoder per call; a search asks thousands of times.
_PARAMS_TEXT = json.JSONEncoder(sort_keys=True)


def params_text(params: Mapping[str, Any]) -> str:
    """Parameters as text: equal for equal parameters, in any order (how a search tells its
    candidates apart: within one problem, a candidate's identity is its parameters)."""
    return _PARAMS_TEXT.encode(dict(params))


@dataclass(frozen=True)
class Identity:
    """Everything that shapes a kernel; build it with :meth:`make` to normalise it."""

    expression: str  # repr of the statement tree: one for every spelling that parses alike
    sizes: tuple[tuple[str, int], ...] | str  # (index, extent) sorted by index, or a size class
    dtype: str
    layout: str
    precision: str = HIGHEST  # dtypes.PRECISIONS: how the sums' products round their inputs
    deterministic: bool = False  # no atomic additions
    gpu: str | None = None  # the GPU a search result was tuned for (None: not a search's)
    strategy: str | None = None  # a generated kernel's strategy and parameters (None: a problem)
    params: tuple[tuple[str, Any], ...] | None = None

    @classmethod
    def make(cls, expression: str | Contraction, sizes: Mapping[str, int] | str | None,
             dtype: str, layout: str, *, precision: str = HIGHEST,
             deterministic: bool = False) -> Identity:
        """A problem's identity: ``sizes`` None for symbolic kernels, another size class as a
        string, or a mapping checked to give every index a positive extent."""
        contraction = analyse(expression) if isinstance(expression, str) else expression
        if sizes is None:
            size_field: tuple[tuple[str, int], ...] | str = SYMBOLIC
        elif isinstance(sizes, str):
            size_field = sizes
        else:
            size_field = tuple(sorted(resolve_sizes(contraction, sizes).items()))
        return cls(repr(contraction.tree), size_field, dtype, layout, precision, deterministic)

    @property
    def problem(self) -> Identity:
        """The contraction alone: no GPU, strategy or parameters."""
        return dataclasses.replace(self, gpu=None, strategy=None, params=None)

    def on(self, gpu: str) -> Identity:
        """The identity of the search for this problem on ``gpu``."""
        return dataclasses.replace(self.problem, gpu=gpu)

    def generated(self, strategy: str, params: Mapping[str, Any]) -> Identity:
        """The identity of this problem's kernel by ``strategy`` with ``params``."""
        return dataclasses.replace(self.problem, strategy=strategy,
                                   params=tuple(sorted(params.items())))

    def fields(self) -> dict[str, Any]:
        """The fields as JSON data, the ones left unset (None) out."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(self.sizes, tuple):
            data["sizes"] = [list(pair) for pair in self.sizes]
        if self.params is not None:
            data["params"] = [list(pair) for pair in self.params]
        return {name: value for name, value in data.items() if value is not None}

    def to_json(self) -> str:
        return json.dumps(self.fields(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)

    def digest(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def shaping(self) -> str:
        """A generated kernel's identity as the text its C name hashes (``deterministic`` and
        ``precision`` only where not the default, and a strategy's :data:`LATER_PARAMETERS`
        only where not what it did before them, as kernels were named before them)."""
        sizes = [] if isinstance(self.sizes, str) else list(self.sizes)
        later = {name: value for part in (self.strategy or "").split("+")
                 for name, value in LATER_PARAMETERS.get(part, {}).items()}
        params = [(name, value) for name, value in self.params or ()
                  if name not in later or later[name] != value]
        return repr((self.expression, sizes, self.dtype, self.layout, self.strategy, params,
                     *(("deterministic",) if self.deterministic else ()),
                     *((self.precision,) if self.precision != HIGHEST else ())))

    def kernel_name(self, output: str) -> str:
        """A C name unique to everything that shapes the kernel text (so sources can be
        batched): ``td_`` and the output tensor, then a hash of :meth:`shaping`."""
        return f"td_{output}_{hashlib.sha1(self.shaping().encode()).hexdigest()[:10]}"

"""The tuning cache's keys: everything a search result depends on, as canonical JSON that
hashes equally on every platform and run, and the entries stored under them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from treduda.errors import TredudaError
from treduda.frontend.contraction import Contraction
from treduda.frontend.dtypes import HIGHEST
from treduda.frontend.identity import Identity
from treduda.versions import installed_version

if TYPE_CHECKING:
    from treduda.polyhedral.lower import Program


def canonical(data: Any) -> str:
    """One JSON text per value, so equal keys hash equally on every platform and run."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# Fields added after keys were first stored, with the value every earlier key meant: a key
# holding that value stores and hashes without the field, as it did before the field existed.
OPTIONAL_FIELDS = {"precision": HIGHEST, "deterministic": False}


@dataclass(frozen=True)
class CacheKey:
    """Everything a search result depends on; build it with :meth:`make` to normalise it."""

    expression: str
    sizes: tuple[tuple[str, int], ...] | str
    dtype: str
    layout: str
    gpu: str
    version: str
    precision: str = HIGHEST  # dtypes.PRECISIONS: how the sums' products round their inputs
    # No atomic additions (deterministic splits only), so other kernels are allowed.
    deterministic: bool = False

    @classmethod
    def make(cls, expression: str | Contraction, sizes: Mapping[str, int] | str | None,
             dtype: str, layout: str, gpu: str, version: str | None = None,
             precision: str = HIGHEST, deterministic: bool = False) -> CacheKey:
        """A key for ``expression`` (any spelling, or its analysed contraction) with checked
        ``sizes``.

        ``sizes`` is ``None`` for symbolic kernels (size class ``"symbolic"``), another size
        class string, or a mapping that must give every index a positive extent.
        """
        return cls.of_identity(Identity.make(expression, sizes, dtype, layout,
                                             precision=precision,
                                             deterministic=deterministic).on(gpu), version)

    @classmethod
    def of(cls, program: Program, gpu: str) -> CacheKey:
        """The key of a planned program on ``gpu``: no text parsed again."""
        return cls.of_identity(program.identity.on(gpu))

    @classmethod
    def of_identity(cls, identity: Identity, version: str | None = None) -> CacheKey:
        """The key of a search result: its :class:`Identity` (a problem on a GPU) and the
        version of treduda that searched."""
        if identity.gpu is None or identity.strategy is not None:
            raise TredudaError(f"a tuning-cache key is a problem on a GPU, not {identity}")
        return cls(identity.expression, identity.sizes, identity.dtype, identity.layout,
                   identity.gpu, installed_version() if version is None else version,
                   identity.precision, identity.deterministic)

    @property
    def identity(self) -> Identity:
        """The search's identity this key stores it under, without the version."""
        return Identity(self.expression, self.sizes, self.dtype, self.layout, self.precision,
                        self.deterministic, self.gpu)

    def to_json(self) -> str:
        """The fields as canonical JSON: what is stored and what :meth:`digest` hashes
        (:data:`OPTIONAL_FIELDS` only where set, so the entries stored before them still
        match)."""
        fields = dataclasses.asdict(self)
        for name, default in OPTIONAL_FIELDS.items():
            if fields[name] == default:
                del fields[name]
        return canonical(fields)

    @classmethod
    def from_json(cls, text: str) -> CacheKey:
        """Parse :meth:`to_json` output; ValueError if it is not a well-formed key."""
        data = json.loads(text)
        names = [f.name for f in dataclasses.fields(cls)]
        if isinstance(data, dict):
            data = {**OPTIONAL_FIELDS, **data}  # to_json leaves out a default one
        if not isinstance(data, dict) or sorted(data) != sorted(names):
            raise ValueError(f"expected an object with exactly the fields {', '.join(names)}")
        sizes = data["sizes"]
        if isinstance(sizes, list) and all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
            and isinstance(pair[1], int) and not isinstance(pair[1], bool) for pair in sizes
        ):
            data["sizes"] = tuple((index, extent) for index, extent in sizes)
        elif not isinstance(sizes, str):
            raise ValueError("sizes is neither a size class nor a list of [index, extent] pairs")
        if not all(isinstance(data[name], str) for name in names
                   if name not in ("sizes", "deterministic")):
            raise ValueError("a field other than sizes and deterministic is not a string")
        if data["deterministic"] is not True and data["deterministic"] is not False:
            raise ValueError("deterministic is not true or false")
        return cls(**data)

    def digest(self) -> str:
        """sha256 hex of :meth:`to_json`: the primary key of the stored entry."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def __str__(self) -> str:
        sizes = (self.sizes if isinstance(self.sizes, str)
                 else ",".join(f"{index}={extent}" for index, extent in self.sizes))
        precision = "" if self.precision == HIGHEST else f" precision {self.precision}"
        return (f"{self.expression} [{sizes}] {self.dtype}{precision} layout {self.layout} on "
                f"{self.gpu!r} {'deterministic ' if self.deterministic else ''}"
                f"(treduda {self.version})")


@dataclass(frozen=True)
class Entry:
    """One valid stored search result."""

    key: CacheKey
    value: dict
    created: float

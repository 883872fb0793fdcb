"""Public benchmark lists of tensor contractions (README.md here tells where each row is from).

Each row keeps its source's sizes and layout; :func:`scaled` shrinks the sizes for checks on the
CPU while keeping extents that are, and are not, multiples of 8 (a typical tile).
"""

from __future__ import annotations

import csv
import importlib.resources
import math
from dataclasses import dataclass

from ..errors import TredudaError
from ..frontend.dtype_names import HIGHEST, TF32


@dataclass(frozen=True)
class Suite:
    file: str
    dtype: str  # the element type its sizes were chosen for, which its source computes in
    precision: str = HIGHEST  # how the sums' products round their inputs (compile's precision=)


SUITES = {
    "tccg_fp32": Suite("tccg_fp32.tsv", "float32"),
    "tccg_fp64": Suite("tccg_fp64.tsv", "float64"),
    "tc": Suite("tensor_comprehensions.tsv", "float32"),
    "tapp": Suite("tapp_ccsd_bottlenecks.tsv", "complex128"),  # CCSD amplitudes: complex double
    "gemm": Suite("gemm.tsv", "float32"),
    # The same rows for tensor cores (issue 26): half-precision storage, and float32 with TF32
    # products, as torch.einsum runs them with allow_tf32. The TCCG sizes stay the fp32 ones.
    "gemm_fp16": Suite("gemm.tsv", "float16"),
    "gemm_bf16": Suite("gemm.tsv", "bfloat16"),
    "gemm_tf32": Suite("gemm.tsv", "float32", TF32),
    "tccg_fp16": Suite("tccg_fp32.tsv", "float16"),
    "tccg_bf16": Suite("tccg_fp32.tsv", "bfloat16"),
    "tccg_tf32": Suite("tccg_fp32.tsv", "float32", TF32),
}
SUITE_CHOICES = (*SUITES, "all")  # what `treduda bench --suite` and `tune --suite` take


@dataclass(frozen=True)
class Row:
    id: str
    expression: str
    sizes: dict[str, int]
    layout: str  # "C" (row-major) or "F" (column-major), from the row's source
    source: str


def load(suite: str) -> list[Row]:
    """The rows of one suite (see :data:`SUITES`)."""
    if suite not in SUITES:
        raise TredudaError(f"unknown suite '{suite}'; choose one of {', '.join(SUITES)}")
    return rows(importlib.resources.files(__package__).joinpath(SUITES[suite].file).read_text())


HEADER = ("id", "expression", "sizes")
"""The columns the first line of a suite's text names (source may follow)."""


def rows(text: str) -> list[Row]:
    """The rows of a suite's tab-separated text: a header line naming the columns, then id,
    expression, sizes (``i=64,j=32``) and source, whose "col-major" makes the row
    column-major (``treduda tune --file`` reads files of this form; there the source may be
    left out). A text without the header is refused: its first row would be taken for it."""
    reader = csv.DictReader(text.splitlines(), delimiter="\t")
    if not set(HEADER) <= set(reader.fieldnames or ()):
        raise TredudaError(f"line 1: expected the header line {'<TAB>'.join(HEADER)}[<TAB>"
                           f"source], got {text.splitlines()[0] if text.strip() else 'nothing'!r}"
                           "; add it as the first line")
    found = []
    for record in reader:
        try:
            sizes = {k: int(v) for k, v in (p.split("=") for p in record["sizes"].split(","))}
            source = record.get("source") or ""
            found.append(Row(record["id"], record["expression"], sizes,
                             "F" if "col-major" in source else "C", source))
        except (KeyError, ValueError, AttributeError) as error:
            raise TredudaError(f"line {len(found) + 2}: expected the tab-separated columns id, "
                               f"expression, sizes (i=64,j=32) and source; got {record}") from error
    return found


def scaled(sizes: dict[str, int], low: int = 5, high: int = 40,
           budget: int = 1_000_000) -> dict[str, int]:
    """Extents between ``low`` and ``high`` for a CPU check: proportional to the originals,
    never all multiples of 8 nor all not, and with at most ``budget`` points in the iteration
    space (so a kernel runs in well under a second on PoCL)."""
    largest = max(sizes.values())
    result = {k: min(high, max(low, round(high * v / largest))) for k, v in sizes.items()}
    while math.prod(result.values()) > budget:
        biggest = max(result, key=result.get)
        if result[biggest] <= low:
            break
        result[biggest] = max(low, result[biggest] * 3 // 4)
    names = sorted(result, key=lambda k: (-result[k], k))
    if all(v % 8 == 0 for v in result.values()):
        result[names[0]] -= 1  # an extent that is not a multiple of any tile
    if len(names) > 1 and not any(v % 8 == 0 for v in result.values()):
        result[names[-1]] = 8
    return result

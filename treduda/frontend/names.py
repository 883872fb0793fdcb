"""Which names a user may give tensors, indices and scalars.

Every name ends up verbatim in generated CUDA / OpenCL C and in isl set descriptions, so a
name that is a keyword, a built-in or a reserved word in any of them would make the kernel
fail to compile (or silently mean something else). Rejecting such names up front, with a
caret at the name, is far kinder than a compiler log.
"""

from __future__ import annotations

import re

from treduda.errors import InvalidName

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_C_WORDS = frozenset(
    """
    int float double long short char void if else for while do return switch case default
    break continue goto struct union enum typedef sizeof static const volatile register extern
    auto signed unsigned inline restrict bool true false class template typename namespace new
    delete this operator private public protected virtual friend using asm NULL nullptr main
    size_t ptrdiff_t
    """.split()
)

_GPU_WORDS = frozenset(
    """
    __global__ __device__ __host__ __shared__ __constant__ __restrict__ __global __local
    __kernel kernel global local constant private half uint ulong ushort uchar dim3
    threadIdx blockIdx blockDim gridDim warpSize get_global_id get_local_id get_group_id
    barrier
    """.split()
)

_FUNCTION_WORDS = frozenset("min max floord fabs sqrt exp printf".split())

_ISL_WORDS = frozenset(
    """
    and or not mod floor ceil min max exists true false infty NaN rat implies xor param domain
    """.split()
)

RESERVED: frozenset[str] = _C_WORDS | _GPU_WORDS | _FUNCTION_WORDS | _ISL_WORDS
"""Exact names that may not be used. Vector and fixed-width types (``float4``, ``int32_t``),
names starting with ``__`` and names starting with ``td_`` are rejected by pattern as well."""

_TYPE_PATTERN = re.compile(
    r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double|half|bool)(?:1|2|3|4|8|16)"
    r"|u?int(?:8|16|32|64)_t"
)

_GENERATED_PREFIX = "td_"


def is_identifier(name: str) -> bool:
    """Whether ``name`` is a C identifier (syntax only; :func:`check_identifier` also checks
    that it is not reserved)."""
    return _IDENTIFIER.fullmatch(name) is not None


def _problem(name: str) -> str | None:
    """Why ``name`` cannot be used, as a predicate ("is a C keyword"), or None if it is fine."""
    if not is_identifier(name):
        return "is not a C identifier (letters, digits and '_', not starting with a digit)"
    if name.startswith("__"):
        return "starts with '__', which C reserves for the compiler"
    if name.startswith(_GENERATED_PREFIX):
        return f"starts with '{_GENERATED_PREFIX}', which treduda reserves for generated code"
    if name in _C_WORDS:
        return "is a C keyword"
    if name in _GPU_WORDS:
        return "is a CUDA/OpenCL keyword or built-in"
    if name in _FUNCTION_WORDS:
        return "is a function the generated code calls"
    if name in _ISL_WORDS:
        return "is an isl reserved word"
    if _TYPE_PATTERN.fullmatch(name):
        return "is a CUDA/OpenCL vector or fixed-width type"
    return None


def check_identifier(name: str, source: str, position: int, role: str) -> None:
    """Raise :class:`InvalidName` pointing at ``source[position:]`` unless ``name`` is usable.

    ``role`` ("tensor", "index", "scalar") only words the message.
    """
    problem = _problem(name)
    if problem is None:
        return
    raise InvalidName(f"{role} name '{name}' {problem}; rename it", source, position, len(name))

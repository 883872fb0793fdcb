"""treduda: CUDA kernels for tensor contractions written in Einstein notation.

    import treduda
    k = treduda.compile("C[i,j] = A[i,k] * B[k,j]", sizes={"i": 512, "j": 512, "k": 512})
    print(k.cuda_source)
    C = treduda.contract("C[i,j] = A[i,k] * B[k,j]", A=a, B=b)
    C = treduda.contract("ik,kj->ij", a, b, options=treduda.Options(precision="tf32"))
    gemm = treduda.contract_expression("ik,kj->ij", (64, 48), (48, 80)); C = gemm(a, b)
    plan = treduda.program("T[i,k] = A[i,j]*B[j,k]; D[i,l] = T[i,k]*C[k,l]"); plan(A=a, B=b, C=c)
    treduda.export([k], "kernels.zip"); treduda.bundle.load("kernels.zip")["td_..."](A=a, B=b)
    result = treduda.search("C[i,j] = A[i,k] * B[k,j]", sizes, gpu="H100")

Names load on first use (isl, the model and the strategies take most of a second to import),
so ``import treduda`` and the command line start at once.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module it comes from.
_WHERE = {
    "ContractExpression": "api", "compile": "api", "contract": "api",
    "contract_expression": "api", "program": "api", "search": "api",
    "export": "exporting", "is_deterministic": "determinism", "use_deterministic": "determinism",
    "analyse": "frontend.contraction", "parse": "frontend.parse", "Kernel": "kernel",
    "ParamSpace": "polyhedral.strategy", "Strategy": "polyhedral.strategy",
    "register": "polyhedral.strategy", "Plan": "programs",
    "SearchResult": "tuning.search_result", "Options": "options",
}

__all__ = ["ContractExpression", "Kernel", "Options", "ParamSpace", "Plan", "SearchResult",
           "Strategy", "analyse", "bundle", "compile", "contract",
           "contract_expression", "errors", "export", "is_deterministic", "parse", "program",
           "register", "search", "strategies", "use_deterministic"]


def __getattr__(name: str) -> Any:
    """A public name (or a subpackage, such as ``treduda.strategies``), imported on first use."""
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    elif not name.startswith("__"):
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""treduda: CUDA kernels for tensor contractions written in Einstein notation.

    import treduda
    k = treduda.compile("C[i,j] = A[i,k] * B[k,j]", sizes={"i": 512, "j": 512, "k": 512})
    print(k.cuda_source)
    C = treduda.contract("C[i,j] = A[i,k] * B[k,j]", A=a, B=b)
    gemm = treduda.contract_expression("ik,kj->ij", (64, 48), (48, 80)); C = gemm(a, b)
    plan = treduda.program("T[i,k] = A[i,j]*B[j,k]; D[i,l] = T[i,k]*C[k,l]"); plan(A=a, B=b, C=c)
    result = treduda.search("C[i,j] = A[i,k] * B[k,j]", sizes, gpu="H100")
"""

from . import errors, strategies
from .api import ContractExpression, compile, contract, contract_expression, program, search
from .determinism import is_deterministic, use_deterministic
from .frontend.contraction import analyse
from .frontend.parse import parse
from .kernel import Kernel
from .polyhedral.strategy import ParamSpace, Strategy, register
from .programs import Plan
from .tuning.search_result import SearchResult

__all__ = ["ContractExpression", "Kernel", "ParamSpace", "Plan", "SearchResult", "Strategy",
           "analyse", "compile", "contract", "contract_expression", "errors", "is_deterministic",
           "parse", "program", "register", "search", "strategies", "use_deterministic"]

"""treduda: CUDA kernels for tensor contractions written in Einstein notation.

    import treduda
    k = treduda.compile("C[i,j] = A[i,k] * B[k,j]", sizes={"i": 512, "j": 512, "k": 512})
    print(k.cuda_source)
    C = treduda.contract("C[i,j] = A[i,k] * B[k,j]", A=a, B=b)
    result = treduda.search("C[i,j] = A[i,k] * B[k,j]", sizes, gpu="H100")
"""

from . import errors, strategies
from .api import compile, contract
from .contraction import analyse
from .kernel import Kernel
from .parse import parse
from .search import SearchResult, search
from .strategy import ParamSpace, Strategy, register

__all__ = ["Kernel", "ParamSpace", "SearchResult", "Strategy", "analyse", "compile", "contract",
           "errors", "parse", "register", "search", "strategies"]

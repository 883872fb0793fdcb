"""``treduda demo``: generate a GEMM and a 4-index contraction, verify both on PoCL, check them
for hazards on the emulator, explain, and write their CUDA files."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from ..api import compile
from ..errors import BackendUnavailable, CompileError

EXAMPLES = (  # file name, title, expression, sizes
    ("gemm", "GEMM", "C[i,j] = alpha*A[i,k]*B[k,j] + beta*C[i,j]",
     {"i": 200, "j": 150, "k": 77}),
    ("tccg3", "4-index (TCCG #3)", "C[a,b,c,d] = A[d,b,e,a]*B[e,c]",
     {"a": 24, "b": 21, "c": 13, "d": 24, "e": 19}),
)


def demo(out: str | Path | None = None, source: bool = False) -> int:
    """Print what was generated and checked, and where each kernel's CUDA file was written
    (``out``, else a new temporary folder); ``source`` prints the CUDA kernel too. Returns 0
    when every kernel verified."""
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="treduda-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    failures = 0
    for stem, title, expression, sizes in EXAMPLES:
        print(f"== {title}: {expression}")
        print(f"   sizes      {', '.join(f'{k}={v}' for k, v in sizes.items())}")
        started = time.perf_counter()
        kernel = compile(expression, sizes)
        generated = time.perf_counter() - started
        print(f"   strategy   {kernel.strategy} "
              f"({', '.join(f'{k}={v}' for k, v in kernel.params.items())})")
        print(f"   launch     grid {kernel.grid} x block {kernel.block}, "
              f"generated in {generated * 1000:.0f} ms")
        try:
            print(f"   PoCL check {kernel.verify()}")
        except Exception as error:  # report, go on with the next example, fail at the end
            failures += 1
            print(f"   PoCL check FAILED: {error}")
        hazards = kernel.hazards()
        failures += bool(hazards)
        print(f"   hazards    {'; '.join(map(str, hazards)) if hazards else 'none'} (emulated "
              "corner blocks: races, out-of-bounds, uninitialised reads, divergent barriers)")
        print(f"   nvcc       {_nvcc(kernel)}")
        written = folder / f"{stem}.cu"
        written.write_text(kernel.cuda_source)
        print(f"   CUDA file  {written}")
        if source:
            body = kernel.cuda_source.split("\n\n")[-2]
            print("   CUDA kernel:\n" + "\n".join("     " + line for line in body.splitlines()))
        print()
    print("all kernels verified" if not failures else f"{failures} kernel(s) FAILED")
    return 1 if failures else 0


def _nvcc(kernel) -> str:
    try:
        return str(kernel.compile_cuda())
    except BackendUnavailable as missing:
        return f"skipped: {missing}"
    except CompileError as error:
        return f"FAILED: {error}"

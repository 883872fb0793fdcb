"""Which architecture a CUDA source is built for: the GPU's own, or the variant of it with
architecture-specific features where the source uses them.

``wgmma`` exists in ``sm_90a`` alone (PTX ISA, "wgmma.mma_async": "requires sm_90a"), whose
code runs on compute capability 9.0 and on no later GPU; every other kernel keeps the plain
architecture (``sm_90``), which later GPUs run too. A source says that it needs the variant by
testing the variant's feature macro (CUDA C++ Programming Guide, "Feature Availability":
nvcc and NVRTC define ``__CUDA_ARCH_FEAT_SM90_ALL`` when they compile for ``sm_90a``), as the
warpgroup template does with an ``#error`` that names the option to use. nvcc, NVRTC, the
ptxas check, the GPU runtimes and the bundle's cubins all ask :func:`cuda_target`, so the
choice is made in one place.
"""

from __future__ import annotations

# Architecture number -> the feature macro of its architecture-specific variant ("a").
FEATURE_MACROS = {"90": "__CUDA_ARCH_FEAT_SM90_ALL"}


def cuda_target(source: str, arch: str) -> str:
    """``arch`` (``sm_90``, ``compute_90``), or its ``a`` variant where ``source`` tests that
    variant's feature macro; an architecture already specific stays as it is."""
    number = arch.partition("_")[2]
    macro = FEATURE_MACROS.get(number)
    return f"{arch}a" if macro is not None and macro in source else arch


def specific_guard(arch: str) -> str:
    """The preprocessor lines by which a source says it needs ``arch``'s ``a`` variant: an
    error, naming the options, where a compiler builds it for anything else."""
    number = arch.partition("_")[2]
    return (f"#if defined(__CUDA_ARCH__) && !defined({FEATURE_MACROS[number]})\n"
            f'#error "this kernel needs sm_{number}a (nvcc -gencode=arch=compute_{number}a,'
            f'code=sm_{number}a; NVRTC --gpu-architecture=sm_{number}a)"\n'
            "#endif")

"""Writing bundles: :func:`export` puts generated kernels and programs into one zip file that
:mod:`treduda.bundle` runs without the compiler (see that module for the format).

    gemm = treduda.compile("C[i,j] = A[i,k] * B[k,j]", sizes={"i": 1000, "j": 900, "k": 700})
    treduda.export([gemm], "kernels.zip")      # or a dict {name: kernel or plan}
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from .bundle import FORMAT, MANIFEST, cubin_path, source_path
from .codegen import ir, serial
from .codegen.targets import cuda_target
from .errors import ArgumentError, MissingSize
from .kernel import Kernel, generator_version
from .programs import Plan
from .run import reference
from .run.nvcc import cubin, nvcc_available
from .run.tensor_maps import encoding
from .versions import installed_version

Exportable = Kernel | Plan
DEFAULT_TARGETS = ("sm_90",)  # the H100 and H200 of the project's GPU sessions


def export(items: Exportable | Sequence[Exportable] | Mapping[str, Exportable],
           path: str | Path, *, targets: Sequence[str] = DEFAULT_TARGETS,
           gpu: str | None = "H100",
           metadata: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Write ``items`` (kernels compiled with sizes, and planned programs; named by a mapping,
    else by their own names) into the bundle ``path``; returns its manifest.

    Cubins are added for each of ``targets`` where nvcc is installed (NVRTC compiles the
    source on the GPU's machine otherwise); each kernel keeps the model's estimate on ``gpu``
    (None: none; a program's steps keep the estimates they were planned with).
    ``metadata`` adds JSON data to the entries it names (a benchmark row's suite and id)."""
    named = _named(items)
    kernels: dict[str, dict[str, Any]] = {}
    programs: dict[str, dict[str, Any]] = {}
    files: dict[str, bytes] = {}
    pending: dict[str, tuple[str, str]] = {}  # cubins to compile: member -> (source, arch)
    targets = tuple(targets) if nvcc_available() else ()
    for name, item in named.items():
        if isinstance(item, Plan):
            programs[name] = _program(item, kernels, files, pending, targets)
        else:
            seconds = None if gpu is None else item.estimate(gpu).seconds
            kernels[name] = _kernel(name, item, files, pending, targets, gpu, seconds)
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:  # nvcc each
        compiled = list(pool.map(lambda job: _cubin(*job), pending.values()))
    files.update(zip(pending, compiled, strict=True))
    for name, extra in (metadata or {}).items():
        entry = programs.get(name) or kernels.get(name)
        if entry is None:
            raise ArgumentError(f"metadata names {name!r}, which is not exported; the bundle "
                                f"holds {', '.join([*kernels, *programs])}")
        entry["metadata"] = dict(extra)
    manifest = {"format": FORMAT, "treduda": installed_version(),
                "generator": generator_version(),  # the code generator's sources, hashed
                "targets": list(targets), "kernels": kernels,
                "programs": programs}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MANIFEST, json.dumps(manifest, indent=1))
        for member, data in files.items():
            archive.writestr(member, data)
    return manifest


def _named(items: Exportable | Sequence[Exportable] | Mapping[str, Exportable]
           ) -> dict[str, Exportable]:
    """Every item by the name the bundle gives it."""
    if isinstance(items, Mapping):
        named = dict(items)
    else:
        listed = [items] if isinstance(items, Exportable) else list(items)
        named = {item.name: item for item in listed}
    for name, item in named.items():
        if not isinstance(item, Exportable):
            raise ArgumentError(f"{name}: a bundle holds kernels (treduda.compile) and programs "
                                f"(treduda.program), not a {type(item).__name__}")
        if isinstance(item, Kernel) and item.symbolic:
            raise MissingSize(f"{name} has symbolic sizes; a bundle holds kernels for fixed "
                              "sizes: compile with sizes={...}")
        if isinstance(item, Plan) and not item.steps:
            raise MissingSize(f"{name} is planned at its first call; pass sizes= or the inputs' "
                              "shapes to treduda.program before exporting it")
    return named


def _kernel(name: str, kernel: Kernel, files: dict[str, bytes],
            pending: dict[str, tuple[str, str]], targets: Sequence[str], gpu: str | None,
            seconds: float | None) -> dict[str, Any]:
    """``kernel``'s manifest entry; its sources added to ``files``, its cubins for
    ``targets`` to ``pending``."""
    built = kernel.built
    c = kernel.contraction
    sizes = dict(kernel.sizes)
    first = replace(built.kernel, body=ir.Block(()))  # a launch needs the signature alone
    parts_sum = built.parts_sum
    if parts_sum is not None:
        parts_sum = replace(parts_sum, kernel=replace(parts_sum.kernel, body=ir.Block(())))
    sources = {"cuda": source_path(name, "cuda"), "opencl": source_path(name, "opencl")}
    files[sources["cuda"]] = kernel.cuda_source.encode()
    files[sources["opencl"]] = kernel.opencl_source.encode()
    # keyed by the GPU's architecture, which the runtime looks up; named for what nvcc built
    # (sm_90a for a warpgroup kernel: codegen.targets)
    cubins = {arch: cubin_path(name, cuda_target(kernel.cuda_source, arch)) for arch in targets}
    pending.update({member: (kernel.cuda_source, arch) for arch, member in cubins.items()})
    return {
        "expression": kernel.expression, "function": kernel.name,
        "einsum": reference.product_spec(c),
        "dtype": kernel.dtype, "precision": kernel.precision, "layout": kernel.layout,
        "sizes": sizes, "kernel_sizes": kernel.merging.sizes(sizes),
        "shapes": {t: [sizes[i] for i in idx]
                   for t, idx in (*c.inputs.items(), (c.output, c.output_indices))},
        "grid": list(kernel.grid), "block": list(kernel.block),
        "dynamic_shared": ir.dynamic_shared_bytes(built.kernel),
        # every parameter in order: the tensor maps last, each described as the runtime
        # encodes it from the tensor's address (cuTensorMapEncodeTiled's arguments)
        "arguments": [p.name for p in built.kernel.params]
                     + [m.name for m in built.kernel.tensor_maps],
        "tensor_maps": [{"parameter": m.name, "tensor": m.tensor,
                         **asdict(encoding(m, kernel.dtype))}
                        for m in built.kernel.tensor_maps],
        "signature": serial.encode(first), "parts_sum": serial.encode(parts_sum),
        "identity": kernel.identity.fields(), "strategy": kernel.strategy,
        "params": dict(kernel.params), "estimate": {"gpu": gpu, "seconds": seconds},
        "sources": sources, "cubins": cubins,
    }


def _program(plan: Plan, kernels: dict[str, dict[str, Any]], files: dict[str, bytes],
             pending: dict[str, tuple[str, str]], targets: Sequence[str]) -> dict[str, Any]:
    """``plan``'s manifest entry; its steps' kernels join ``kernels`` under their names."""
    gpu = plan.options.gpu  # a name, or a Gpu of the user's own
    gpu = gpu if isinstance(gpu, str) else gpu.name
    steps = []
    for step in plan.steps:
        name = step.kernel.name
        if name not in kernels:
            kernels[name] = _kernel(name, step.kernel, files, pending, targets, gpu,
                                    step.seconds)
        c = step.contraction
        steps.append({"kernel": name, "statement": c.source, "reads": list(c.read_names),
                      "output": c.output})
    return {"source": plan.source, "dtype": plan.dtype, "layout": plan.layout,
            "inputs": list(plan.inputs), "results": list(plan.results),
            "intermediates": list(plan.intermediates),
            "shapes": {t: list(s) for t, s in plan.shapes.items()}, "steps": steps,
            "flops": plan.flops, "estimate": {"gpu": gpu, "seconds": plan.seconds}}


def _cubin(source: str, arch: str) -> bytes:
    """``source`` compiled by nvcc for ``arch``."""
    with cubin(source, arch) as (binary, _):
        return binary.read_bytes()

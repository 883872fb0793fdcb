"""Bundles (issue 41): kernels and programs exported by treduda.export run through
treduda.bundle in a process that cannot import the compiler's packages, on PoCL, and agree
with numpy.einsum; shapes and dtypes a bundle does not hold are refused with what it holds."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from conftest import needs_nvcc

import treduda
from treduda.app.cli import main
from treduda.bundle import MANIFEST, load
from treduda.errors import DtypeError, MissingSize, ShapeMismatch
from treduda.run import reference
from treduda.suites import load as load_suite
from treduda.suites import scaled

GEMM = "C[i,j] = A[i,k] * B[k,j]"
AO_MO = "pqrs,pi,qj,rk,sl->ijkl"  # the AO->MO integral transformation: a program
BLOCKED = ("islpy", "jinja2", "opt_einsum")

# Run in a fresh interpreter: a finder ahead of all others makes the compiler's packages
# unimportable, then each call of argv[3] runs on the bundle argv[1] with the arrays of
# argv[2], and the results go to argv[4]. It prints the modules the loaded bundle had imported
# of those and sqlite3 (which the runtime does not need, though pyopencl imports it later).
RUNNER = f"""
import importlib.abc, json, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ImportError(name + " is blocked: the bundle runtime must not need it")

sys.meta_path.insert(0, Blocked())
import numpy as np
from treduda.bundle import load

bundle = load(sys.argv[1])
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in {BLOCKED!r} + ("sqlite3",))
arrays = np.load(sys.argv[2])
results = {{}}
for call in json.loads(sys.argv[3]):
    operands = [arrays[name] for name in call["operands"]]
    if "expression" in call:
        results[call["label"]] = bundle.contract(call["expression"], *operands)
    else:
        named = dict(zip(call["names"], operands))
        found = bundle[call["entry"]](**named)
        results[call["label"]] = found[call["result"]] if "result" in call else found
np.savez(sys.argv[4], **results)
print(json.dumps(loaded))
"""


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


def _check(kernel: treduda.Kernel, arrays: dict[str, np.ndarray], result: np.ndarray) -> None:
    """``result`` within the rounding bound of ``kernel``'s dtype of numpy.einsum's value."""
    c = kernel.contraction
    expected = reference.evaluate(c, arrays, {}, kernel.sizes)
    allowed = reference.tolerance(c, arrays, {}, kernel.sizes, kernel.dtype,
                                  precision=kernel.precision)
    assert result.dtype == np.dtype(kernel.dtype)
    assert np.all(np.abs(result.astype(np.float64) - expected) <= allowed)


def test_a_bundle_runs_where_the_compiler_cannot_be_imported(tmp_path):
    """GEMM (float32), a TCCG row in float16 and the AO->MO program, exported, then run in a
    process where importing islpy, jinja2 or opt_einsum raises; each agrees with
    numpy.einsum. Sizes are not multiples of the tiles."""
    rng = np.random.default_rng(41)
    gemm = treduda.compile(GEMM, {"i": 70, "j": 53, "k": 29})
    row = load_suite("tccg_fp32")[0]
    tccg = treduda.compile(row.expression, scaled(row.sizes), dtype="float16",
                           layout=row.layout)
    sizes = {**dict.fromkeys("pqrs", 10), **dict.fromkeys("ijkl", 7)}
    program = treduda.program(AO_MO, sizes)
    assert len(program.steps) >= 2 and program.intermediates  # steps and intermediates
    path = tmp_path / "bundle.zip"
    treduda.export({"gemm": gemm, "tccg_fp16": tccg, "ao_mo": program}, path)

    arrays = {}
    operands = {}
    for label, kernel in (("gemm", gemm), ("tccg_fp16", tccg)):
        c = kernel.contraction
        operands[label] = {t: _random(rng, tuple(kernel.sizes[i] for i in idx), kernel.dtype)
                           for t, idx in c.inputs.items()}
        if kernel.layout == "F":
            operands[label] = {t: np.asfortranarray(a) for t, a in operands[label].items()}
        arrays.update({f"{label}:{t}": a for t, a in operands[label].items()})
    shapes = [(sizes[p], sizes[i]) for p, i in ("pi", "qj", "rk", "sl")]
    ao_mo = [_random(rng, (10, 10, 10, 10), "float32"), *(_random(rng, s, "float32")
                                                          for s in shapes)]
    arrays.update({f"ao_mo:{n}": a for n, a in enumerate(ao_mo)})
    np.savez(tmp_path / "in.npz", **arrays)
    calls = [{"label": "gemm", "entry": "gemm", "names": list(operands["gemm"]),
              "operands": [f"gemm:{t}" for t in operands["gemm"]]},
             {"label": "tccg_fp16", "expression": row.expression,
              "operands": [f"tccg_fp16:{t}" for t in tccg.contraction.inputs]},
             {"label": "ao_mo", "entry": "ao_mo", "names": list(program.inputs),
              "result": program.results[0], "operands": [f"ao_mo:{n}" for n in range(5)]}]
    done = subprocess.run([sys.executable, "-c", RUNNER, str(path), str(tmp_path / "in.npz"),
                           json.dumps(calls), str(tmp_path / "out.npz")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []  # nor sqlite3 before running
    results = np.load(tmp_path / "out.npz")
    _check(gemm, operands["gemm"], results["gemm"])
    _check(tccg, operands["tccg_fp16"], results["tccg_fp16"])
    expected = np.einsum(AO_MO, *(a.astype(np.float64) for a in ao_mo))
    assert results["ao_mo"].shape == expected.shape
    assert np.allclose(results["ao_mo"], expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.fixture(scope="module")
def gemm_bundle(tmp_path_factory):
    kernel = treduda.compile(GEMM, {"i": 37, "j": 45, "k": 13})
    path = tmp_path_factory.mktemp("bundle") / "gemm.zip"
    treduda.export([kernel], path, metadata={kernel.name: {"suite": "example"}})
    return kernel, path


def test_a_bundle_refuses_shapes_and_dtypes_it_does_not_hold(gemm_bundle):
    kernel, path = gemm_bundle
    bundle = load(path)
    a = np.ones((37, 13), np.float32)
    b = np.ones((13, 45), np.float32)
    assert np.array_equal(bundle.contract("ik,kj->ij", a, b), np.full((37, 45), 13.0))
    assert bundle[kernel.name].metadata == {"suite": "example"}
    with pytest.raises(ShapeMismatch, match=r"it holds .*A \(37, 13\), B \(13, 45\)"):
        bundle.contract(GEMM, a[:20], b)
    with pytest.raises(ShapeMismatch, match=r"A \(37, 13\)"):
        bundle[kernel.name](A=a[:, :5], B=b[:5])
    with pytest.raises(DtypeError, match="float32"):
        bundle.contract(GEMM, a.astype(np.float64), b.astype(np.float64))
    with pytest.raises(treduda.errors.ArgumentError, match=kernel.name):
        bundle["td_nothing"]
    with pytest.raises(treduda.errors.ArgumentError, match="holds no kernel for"):
        bundle.contract("ij,jk->ki", a, b)


@needs_nvcc
def test_a_bundle_holds_a_cubin_for_each_target_unless_told_to_compile(gemm_bundle):
    """nvcc here writes an sm_90 cubin, which a GPU of that architecture loads instead of
    compiling the source with NVRTC (``cubins=False``: always NVRTC)."""
    kernel, path = gemm_bundle
    (arch, cubin), = load(path)[kernel.name].cubins.items()
    assert arch == "sm_90" and cubin[:4] == b"\x7fELF"
    assert load(path, cubins=False)[kernel.name].cubins == {}


def test_a_symbolic_kernel_is_refused_with_what_to_do(tmp_path):
    kernel = treduda.compile(GEMM, symbolic=True)
    with pytest.raises(MissingSize, match="compile with sizes"):
        treduda.export([kernel], tmp_path / "b.zip")


def test_the_export_command_writes_a_bundle_that_runs(tmp_path, capsys):
    path = tmp_path / "b.zip"
    assert main(["export", GEMM, "-s", "i=21", "-s", "j=34", "-s", "k=9", "-o",
                 str(path)]) == 0
    assert "1 kernel(s), 0 program(s)" in capsys.readouterr().out
    with zipfile.ZipFile(path) as archive:
        manifest = json.loads(archive.read(MANIFEST))
        (entry,) = manifest["kernels"].values()
        assert {entry["sources"]["cuda"], entry["sources"]["opencl"]} <= set(archive.namelist())
    assert entry["shapes"] == {"A": [21, 9], "B": [9, 34], "C": [21, 34]}
    assert entry["grid"] and entry["block"] and entry["estimate"]["seconds"] > 0
    rng = np.random.default_rng(0)
    a, b = _random(rng, (21, 9), "float32"), _random(rng, (9, 34), "float32")
    result = load(path).contract(GEMM, a, b)
    assert np.allclose(result, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)

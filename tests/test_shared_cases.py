"""The shared-memory rule's cases as kernels for the GPU session's ncu step (issue 40,
treduda.app.shared_cases): each is counted here at the wavefronts its bundle records, runs on
PoCL to the sum it should, launches in the session's dry run, and ncu_compare sets ncu's
figures beside the rule's and says which cases disagree."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from treduda.app import ncu_compare, ncu_profile, shared_cases
from treduda.bundle import load

CASES = {case.name: case for case in shared_cases.CASES}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A session's folder holding the cases' bundle, written as `prepare shared` does."""
    folder = tmp_path_factory.mktemp("bundles")
    assert ncu_profile.main(["cases", "-o", str(folder / "ncu" / "shared.zip")]) == 0
    return folder


def _recorded(folder: Path) -> dict[str, dict]:
    with zipfile.ZipFile(folder / "ncu" / "shared.zip") as archive:
        kernels = json.loads(archive.read("manifest.json"))["kernels"]
    return {entry["metadata"]["case"]: entry["metadata"]["wavefronts"]
            for entry in kernels.values()}


def test_each_case_is_counted_at_its_recorded_wavefronts_and_sums_what_it_read(folder):
    """The emulator's counters of each case's 1000 reads (two of them emulated) equal the
    rule's figures the bundle records; the GEMM pick's broadcast along k is 2 by the rule, 4
    without the pair merge and 1 by the model; the bundle's kernels, run on PoCL on small
    integers, write 1000 times the sum each lane reads."""
    recorded = _recorded(folder)
    assert list(recorded) == list(CASES)
    assert recorded["gemm_k_broadcast"] == {"rule": 2, "ideal": 2, "ways": 1, "unmerged": 4,
                                            "model": 1}
    assert recorded["lds32_32_ways"]["rule"] == recorded["lds32_32_ways"]["model"] == 32
    bundle = load(folder / "ncu" / "shared.zip")
    a = np.random.default_rng(7).integers(0, 8, (shared_cases.ROWS, shared_cases.COLUMNS))
    a = a.astype(np.float32)
    for name, case in CASES.items():
        read = shared_cases.kernel(case).counters(steps=2).of("S")
        figures = recorded[name]
        assert (read.requests, read.per_request, read.ideal_per_request, read.ways) == \
            (2, figures["rule"], figures["ideal"], figures["ways"]), name
        assert np.array_equal(bundle[f"shared/{name}"](A=a), case.output(a)), name


def test_the_dry_run_launches_every_case(folder, tmp_path):
    log = io.StringIO()
    path = tmp_path / "ncu.json"
    assert ncu_profile.profile(folder, path, wanted=shared_cases.ENTRIES, pocl=True,
                               log=log) == 0
    step = json.loads(path.read_text())
    assert step["status"] == "dry run" and step["missing"] == [], log.getvalue()
    for case in shared_cases.CASES:
        assert f"launched shared/{case.name} (td_shared_{case.name})" in log.getvalue()
    assert ncu_profile.SELECTION[:len(CASES)] == shared_cases.ENTRIES  # profiled first


def _csv(measured: dict[str, tuple[float, float | None, float | None]]) -> str:
    """ncu's CSV (``--csv --print-units base``) of each function's shared load instructions,
    wavefronts and bank conflicts ("n/a" where None)."""
    lines = ['"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    for n, (function, (requests, wavefronts, conflicts)) in enumerate(measured.items()):
        for metric, value in ((ncu_profile.SHARED_REQUESTS["ld"], requests),
                              (ncu_profile.shared_metric("wavefronts", "ld"), wavefronts),
                              (ncu_profile.shared_metric("bank_conflicts", "ld"), conflicts)):
            shown = "n/a" if value is None else f"{value:,.0f}"
            lines.append(f'"{n}","{function}(float *, const float *)","{metric}","",'
                         f'"{shown}"')
    return "\n".join(lines)


def test_ncu_compare_sets_each_case_beside_the_rule_and_names_those_that_disagree(folder):
    """A hand-made ncu file: every case at the rule's wavefronts and conflicts (beyond its
    ideal) but the GEMM broadcast, at 4 (the pair merge not made), and one case ncu has no
    wavefronts of."""
    chosen = ncu_profile.select(folder, shared_cases.ENTRIES)[0]
    recorded = _recorded(folder)
    measured: dict[str, tuple[float, float | None, float | None]] = {}
    for c in chosen:
        figures = recorded[c.name.partition("/")[2]]
        measured[c.entry["function"]] = (1000.0, 1000.0 * figures["rule"],
                                         1000.0 * (figures["rule"] - figures["ideal"]))
    measured["td_shared_gemm_k_broadcast"] = (1000.0, 4000.0, 2000.0)
    measured["td_shared_lds64_pairs"] = (1000.0, None, None)
    record = {"format": 1, "status": "ok", "ncu": "Version 2025.3.1.0", "missing": [],
              "entries": [c.record() for c in chosen], "metrics": list(ncu_profile.METRICS),
              "csv": _csv(measured)}
    out = io.StringIO()
    assert ncu_compare.report(record, out=out) == 0
    text = out.getvalue()
    rows = {line.split()[0]: line.split() for line in text.splitlines()
            if line.split() and line.split()[0] in CASES}
    # case, bytes, requests, wavefronts/req, conflicts/req, rule, unmerged, model, equals
    assert rows["gemm_k_broadcast"][:8] == ["gemm_k_broadcast", "16", "1000", "4.00", "2.00",
                                            "2", "4", "1"]
    assert " ".join(rows["gemm_k_broadcast"][8:]) == "rule without merge"
    assert " ".join(rows["forum_quarters"][8:]) == "rule, rule without merge"
    assert " ".join(rows["lds32_32_ways"][8:]) == \
        "rule, rule without merge, model (one phase)"
    assert rows["lds64_pairs"][3] == "-" and rows["lds64_pairs"][-1] == "-"
    assert ("1 of 8 cases measured disagree with the rule: gemm_k_broadcast (see what ncu "
            "equals instead). No wavefronts for lds64_pairs.") in text
    memory = {line.split()[0]: line.split()[-1] for line in text.splitlines()
              if line.startswith("shared/") and " shared ld " in line}
    assert {name: equal for name, equal in memory.items() if equal != "yes"} == \
        {"shared/gemm_k_broadcast": "no", "shared/lds64_pairs": "-"}  # beside the counters

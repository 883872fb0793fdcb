"""The GPU descriptions: published peaks, internal consistency, lookup, validation, citations."""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from pathlib import Path

import pytest

from treduda.errors import TredudaError
from treduda.model import gpus
from treduda.model.gpus import GPUS, Gpu, custom, gpu, table

TFLOP = 1e12


def close(actual: float, expected: float, rel: float = 0.05) -> bool:
    return abs(actual - expected) <= rel * expected


# Vendor datasheet figures (non-tensor), which the lane counts and clocks must reproduce.
@pytest.mark.parametrize(("name", "dtype", "tflops"), [
    ("H100", "float32", 67.0),
    ("H100", "float64", 34.0),
    ("A100", "float32", 19.5),
    ("A100", "float64", 9.7),
    ("V100", "float32", 15.7),
    ("V100", "float64", 7.8),
    ("RTX3070", "float32", 20.3),
])
def test_peak_flops_match_datasheets(name, dtype, tflops):
    assert close(GPUS[name].peak_flops(dtype), tflops * TFLOP)


def test_fermi_peak_matches_thesis_table_1():
    assert close(GPUS["GTX560Ti"].peak_flops(), 1263e9, rel=0.001)


def test_peak_flops_default_and_dtype_spellings():
    h100 = GPUS["H100"]
    assert h100.peak_flops() == h100.peak_flops("float32") == h100.peak_flops("fp32")
    assert h100.peak_flops("double") == h100.peak_flops("float64") < h100.peak_flops()
    np = pytest.importorskip("numpy")
    assert h100.peak_flops(np.float64) == h100.peak_flops("float64")
    with pytest.raises(TredudaError, match="float32"):
        h100.peak_flops("int8")


@pytest.mark.parametrize(("name", "bandwidth"), [
    ("H100", 3.35e12), ("A100", 2.039e12), ("V100", 900e9), ("RTX3070", 448e9),
    ("GTX560Ti", 128e9),
])
def test_dram_bandwidth(name, bandwidth):
    assert close(GPUS[name].dram_bandwidth, bandwidth, rel=0.01)


@pytest.mark.parametrize("g", GPUS.values(), ids=list(GPUS))
def test_limits_are_consistent(g: Gpu):
    assert g.warps_per_sm() * g.warp_size == g.max_threads_per_sm
    assert g.shared_per_block <= g.shared_per_block_optin <= g.shared_per_sm
    assert g.max_threads_per_block <= g.max_threads_per_sm
    assert g.registers_per_sm == (32768 if g.compute_capability.startswith("2.") else 65536)
    assert g.register_allocation_unit in (64, 256)
    assert g.shared_banks * g.shared_bank_bytes == 128
    assert g.l2_bandwidth > g.dram_bandwidth
    assert g.fma_latency_cycles < g.shared_latency_cycles < g.l2_latency_cycles
    assert g.l2_latency_cycles < g.dram_latency_cycles
    # Every built-in passes the same checks a user's description does.
    assert custom(**dataclasses.asdict(g)) == g


def test_warps_per_sm_values():
    assert GPUS["H100"].warps_per_sm() == 64
    assert GPUS["RTX3070"].warps_per_sm() == 48
    assert GPUS["GTX560Ti"].warps_per_sm() == 48


@pytest.mark.parametrize(("alias", "short"), [
    ("H100", "H100"), ("h100", "H100"), ("H100-SXM", "H100"), ("h100 sxm5", "H100"),
    ("a100", "A100"), ("A100-SXM4-80GB", "A100"), ("V100-SXM2", "V100"), ("tesla v100", "V100"),
    ("rtx 3070", "RTX3070"), ("GeForce RTX 3070", "RTX3070"), ("RTX-3070", "RTX3070"),
    ("GTX 560 Ti", "GTX560Ti"), ("gtx560ti", "GTX560Ti"), ("GeForce GTX 560 Ti", "GTX560Ti"),
])
def test_lookup_aliases(alias, short):
    assert gpu(alias) is GPUS[short]


def test_lookup_passes_a_gpu_through():
    mine = dataclasses.replace(GPUS["A100"], name="my-A100", sm_count=54)
    assert gpu(mine) is mine


def test_unknown_gpu_lists_the_known_names():
    with pytest.raises(TredudaError) as info:
        gpu("B200")
    message = str(info.value)
    assert "B200" in message
    for short in GPUS:
        assert short in message


def test_gpus_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GPUS["H100"].sm_count = 1  # type: ignore[misc]


def fields_of(base: str, **changes: object) -> dict[str, object]:
    return {**dataclasses.asdict(GPUS[base]), **changes}


def test_custom_builds_a_gpu():
    g = custom(**fields_of("V100", name="half-V100", sm_count=40))
    assert g.sm_count == 40
    assert close(g.peak_flops(), GPUS["V100"].peak_flops() / 2, rel=1e-9)
    assert gpu(g) is g


def test_custom_rejects_a_negative_field():
    with pytest.raises(TredudaError, match=r"sm_count must be positive, got -4"):
        custom(**fields_of("A100", sm_count=-4))


def test_custom_rejects_a_zero_float():
    with pytest.raises(TredudaError, match="dram_bandwidth must be positive"):
        custom(**fields_of("A100", dram_bandwidth=0.0))


def test_custom_rejects_a_missing_field():
    fields = fields_of("A100")
    del fields["l2_bytes"]
    with pytest.raises(TredudaError, match="missing field.*l2_bytes"):
        custom(**fields)


def test_custom_rejects_an_unknown_field():
    with pytest.raises(TredudaError, match="unknown field.*tensor_cores"):
        custom(**fields_of("A100", tensor_cores=432))


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("sm_count", 108.0, "sm_count must be an int"),
    ("sm_count", True, "sm_count must be an int"),
    ("clock_ghz", "1.41", "clock_ghz must be a number"),
    ("clock_ghz", float("inf"), "clock_ghz must be positive and finite"),
    ("name", "", "name must be a non-empty string"),
])
def test_custom_rejects_wrong_types(field, value, expected):
    with pytest.raises(TredudaError, match=re.escape(expected)):
        custom(**fields_of("A100", **{field: value}))


def test_custom_rejects_inconsistent_limits():
    with pytest.raises(TredudaError, match="shared_per_block_optin <= shared_per_sm"):
        custom(**fields_of("A100", shared_per_sm=64 * 1024))
    with pytest.raises(TredudaError, match="multiple of warp_size"):
        custom(**fields_of("A100", max_threads_per_sm=2000))


def test_table_lists_every_gpu():
    text = table()
    for g in GPUS.values():
        assert g.name in text
        assert str(g.sm_count) in text
    assert "TF/s" in text and "GB/s" in text
    assert len(text.splitlines()) == len(GPUS) + 2


def test_describe_is_a_few_readable_lines():
    text = GPUS["H100"].describe()
    assert text.startswith("H100-SXM")
    assert 2 <= len(text.splitlines()) <= 6
    assert "66.9 TFLOP/s" in text


# --- every number has a source ------------------------------------------------------------

SOURCE_FILE = Path(gpus.__file__)
CITATION = re.compile(r"\[([A-Z0-9-]+)\]")


def gpu_keyword_lines() -> list[tuple[str, str, int, int]]:
    """(GPU variable, field, first line, last line) of each keyword of the module's Gpu(...)
    and dataclasses.replace(GPU, ...) (a variant of a GPU, which gives what differs)."""
    found = []
    for variable, call in gpu_calls():
        for keyword in call.keywords:
            found.append((variable, keyword.arg, keyword.value.lineno,
                          keyword.value.end_lineno))
    return found


def gpu_calls() -> list[tuple[str, ast.Call]]:
    """Each GPU variable of the module with its Gpu(...) or dataclasses.replace(...) call."""
    calls = []
    for node in ast.parse(SOURCE_FILE.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in ("Gpu", "replace"):
                calls.append((node.targets[0].id, node.value))  # type: ignore[attr-defined]
    return calls


def comments_by_line() -> tuple[dict[int, str], set[int]]:
    """The comment on each line, and which lines hold nothing but a comment."""
    tokens = tokenize.generate_tokens(io.StringIO(SOURCE_FILE.read_text()).readline)
    comments = [tok for tok in tokens if tok.type == tokenize.COMMENT]
    alone = {tok.start[0] for tok in comments if tok.line.lstrip().startswith("#")}
    return {tok.start[0]: tok.string for tok in comments}, alone


def test_every_builtin_gpu_is_parsed_from_the_source():
    variables = {variable for variable, *_ in gpu_keyword_lines()}
    assert {getattr(gpus, v) for v in variables} == set(GPUS.values())
    per_gpu = len(dataclasses.fields(Gpu))
    for variable, call in gpu_calls():
        given = len(call.keywords)
        if isinstance(call.func, ast.Name):  # Gpu(...): every field, each cited
            assert given == per_gpu, variable
        else:  # a variant of a built-in GPU, whose fields are cited where it is written
            assert 0 < given < per_gpu and call.args[0].id in variables, variable


def test_every_number_cites_a_source():
    comments, alone = comments_by_line()
    uncited = []
    for variable, field, first, last in gpu_keyword_lines():
        if field == "name":
            continue
        # The comment is on the value's own line(s) or in the comment block just above it.
        start = first
        while start - 1 in alone:
            start -= 1
        text = " ".join(comments.get(line, "") for line in range(start, last + 1))
        keys = CITATION.findall(text)
        if not keys or any(key not in gpus.SOURCES for key in keys):
            uncited.append(f"{variable}.{field} (line {first}): {text or 'no comment'}")
    assert not uncited, "fields without a known [SOURCE] comment:\n" + "\n".join(uncited)


def test_every_source_is_cited():
    cited = set(CITATION.findall(" ".join(comments_by_line()[0].values())))
    assert set(gpus.SOURCES) <= cited, set(gpus.SOURCES) - cited

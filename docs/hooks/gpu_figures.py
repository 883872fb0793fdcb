"""mkdocs hook: the GPU results' figures, drawn from ``benchmarks/data/`` when the site is
built, so a page never shows a plot its data file does not hold."""

from __future__ import annotations

import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402

RUN = "benchmarks/data/h200_measured_2026-11-26.json"  # the latest GPU run


def png(figure: plt.Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def ratio_per_row(run: dict) -> plt.Figure:
    """torch.einsum's time over treduda's for every TCCG row measured: above 1, treduda wins."""
    rows = [(r["id"], r["ratio_torch"]) for r in run["rows"]]
    rows += [(r["id"], r["ratio_torch"]) for r in run["rows_from_log"]]
    figure, axes = plt.subplots(figsize=(10, 3.6))
    axes.bar([i.removeprefix("tccg_") for i, _ in rows], [r for _, r in rows],
             color=["C2" if r >= 1 else "C0" for _, r in rows])
    axes.axhline(1.0, color="k", lw=1)
    axes.set(yscale="log", xlabel="TCCG row (float32)", ylabel="torch.einsum / treduda",
             title=f"{run['device'].split(' (')[0]}, {run['date']}: time of torch.einsum "
                   "(cuBLAS, TF32 off) over treduda's")
    axes.tick_params(axis="x", labelsize=7, rotation=90)
    figure.tight_layout()
    return figure


def model_against_measured(run: dict) -> plt.Figure:
    """The model's estimate beside the measured time of every kernel timed with its time."""
    kernels = [k for r in run["rows"] for k in (r, *(r.get("rivals") or []))]
    kernels += run["gemm4096"]
    kernels = [k for k in kernels if k.get("treduda_ms") and k.get("predicted_ms")]
    figure, axes = plt.subplots(figsize=(6, 5))
    axes.scatter([k["predicted_ms"] for k in kernels], [k["treduda_ms"] for k in kernels], s=12)
    ends = [min(k["predicted_ms"] for k in kernels) / 2, max(k["treduda_ms"] for k in kernels) * 2]
    axes.plot(ends, ends, "k-", lw=1, label="measured = estimate")
    axes.set(xscale="log", yscale="log", xlabel="estimate (ms, H100 model)",
             ylabel="measured (ms)", title=f"{len(kernels)} kernels: the model against the GPU")
    axes.legend()
    figure.tight_layout()
    return figure


def on_files(files: Files, config: MkDocsConfig) -> Files:
    run = json.loads((Path(config.config_file_path).resolve().parent / RUN).read_text())
    figures = {"tccg_ratio": ratio_per_row, "model_vs_measured": model_against_measured}
    for name, draw in figures.items():
        files.append(File.generated(config, f"figures/{name}.png", content=png(draw(run))))
    return files

"""The code digests of a calibration file measured before the GPU benchmark recorded them:
each row's kernel generated again by the treduda of the file's ``treduda_commit`` (from
``git archive`` of that commit, in a child Python that sees no other treduda), hashed with
today's :func:`treduda.run.nvcc.code_digest`, and written beside the file as
``NAME.codes.json``, where ``benchmarks/model_fidelity.py`` reads them: a row whose kernel
today has another digest is left out, since its time is another kernel's.

    python benchmarks/code_digests.py [--data benchmarks/data/h200_measured_2026-11-26.json]
                                      [--commit ecf75a5]

Run it from a git checkout that holds the commit (a few minutes: every kernel is generated
once, without nvcc). ``--commit`` defaults to the first word of the file's ``treduda_commit``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import asdict
from pathlib import Path

from treduda.app.fidelity import load
from treduda.run.nvcc import code_digest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "h200_measured_2026-11-26.json"
# Run by a Python started with -S (no site: today's editable treduda stays out) from the
# archive's root, the installed packages after it: each row (JSON, on stdin) -> its kernel's
# source, or the error that commit's code gave.
GENERATE = """
import json, sys
sys.path[:0] = [sys.argv[1]]
sys.path.append(sys.argv[2])
import treduda
sources = {}
for row in json.load(sys.stdin):
    extra = {} if row["precision"] == "highest" else {"precision": row["precision"]}
    try:
        sources[row["id"]] = treduda.compile(row["expression"], row["sizes"], dtype=row["dtype"],
                                             layout=row["layout"], strategy=row["strategy"],
                                             params=row["params"], cache=False,
                                             **extra).cuda_source
    except Exception as error:
        sources[row["id"]] = {"error": f"{type(error).__name__}: {error}"}
json.dump(sources, sys.stdout)
"""


def sources_at(commit: str, rows: list[dict]) -> dict[str, str | dict]:
    """Each row's kernel source as ``commit``'s treduda generates it."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        for package in ("strategies", "templates"):  # installed inside treduda where mapped
            if (Path(tree) / package).is_dir() and not (Path(tree) / "treduda" / package).exists():
                (Path(tree) / "treduda" / package).symlink_to(Path("..") / package)
        child = subprocess.run([sys.executable, "-S", "-c", GENERATE, tree,
                                sysconfig.get_paths()["purelib"]], input=json.dumps(rows),
                               capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(child.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA), help="the calibration file")
    parser.add_argument("--commit", help="the commit that generated its kernels")
    args = parser.parse_args()
    with open(args.data) as f:
        commit = args.commit or json.load(f)["treduda_commit"].split()[0]
    rows = [asdict(r) for r in load(args.data)]
    sources = sources_at(commit, rows)
    codes = {id_: code_digest(source) for id_, source in sources.items()
             if isinstance(source, str)}
    for id_, source in sources.items():
        if not isinstance(source, str):
            print(f"{id_}: not generated at {commit}: {source['error']}", file=sys.stderr)
    beside = Path(args.data).with_suffix(".codes.json")
    beside.write_text(json.dumps({"treduda_commit": commit, "written_by":
                                  "benchmarks/code_digests.py", "codes": codes}, indent=1) + "\n")
    print(f"{len(codes)} of {len(rows)} rows' digests at {commit} written to {beside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

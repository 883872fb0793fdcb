"""The `treduda tune` command: its options, and which contractions they name."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import TredudaError
from ..frontend.dtype_names import DTYPES
from ..suites import SUITE_CHOICES, rows
from .bench_cli import _ids, count, parallel_arguments


def tune_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `treduda tune`."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--suite", choices=SUITE_CHOICES, default="tccg_fp32",
                        help="the suite to tune (as `treduda bench` runs it)")
    source.add_argument("--file", metavar="FILE",
                        help="tune the rows of this tab-separated file instead: its first "
                             "line is the header 'id expression sizes' (and, optionally, "
                             "'source'), each line after it a row: id, expression, sizes "
                             "(i=64,j=32) and source (a 'col-major' there makes the row "
                             "column-major)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="the element type of --file's rows (a suite has its own)")
    parser.add_argument("--ids", type=_ids, metavar="ID,ID", help="tune only these rows")
    parser.add_argument("--limit", type=count, metavar="N", help="tune only the first N rows")
    parser.add_argument("--gpu", default="H100", help="the GPU to tune for")
    parallel_arguments(parser, "searches", 2)
    parser.add_argument("--max-nodes", type=count, metavar="N",
                        help="the search's node budget per row (default: compile()'s)")
    parser.add_argument("--cache", metavar="FILE",
                        help="the tuning cache to fill (default: $TREDUDA_CACHE or the user's)")


def tune_command(args: argparse.Namespace) -> int:
    """Run `treduda tune` from parsed arguments."""
    from ..tuning.cache import TuningCache
    from . import tune  # the library's compiling parts: on use (cli.py)
    from .bench import Case, chosen, select

    if args.file:
        try:
            found = rows(Path(args.file).read_text())
        except OSError as error:
            raise TredudaError(f"cannot read {args.file}: {error.strerror or error}; give the "
                               "path of a tab-separated file of rows") from None
        except TredudaError as error:
            raise TredudaError(f"--file {args.file}, {error}") from None
        cases = chosen([Case(row, args.dtype, "file") for row in found], args.file, args.ids,
                       args.limit)
    else:
        cases = select(args.suite, args.ids, args.limit)
    if args.workers < 1:
        raise TredudaError("--workers needs at least 1 worker")
    return tune.run(cases, gpu=args.gpu, workers=args.workers, scheduler=args.scheduler,
                    max_nodes=args.max_nodes, cache=TuningCache(args.cache))

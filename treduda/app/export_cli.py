"""The `treduda export` command: search, generate and write kernels and programs into one
bundle (:func:`treduda.export`) that :mod:`treduda.bundle` runs without the compiler.

    treduda export "C[i,j] = A[i,k] * B[k,j]" "pqrs,pi,qj,rk,sl->ijkl" -s i=4096 ... -o b.zip
"""

from __future__ import annotations

import argparse

from ..errors import ArgumentError, MissingSize
from ..frontend.dtype_names import DTYPES, HIGHEST, PRECISIONS
from .files import writable


def export_arguments(command: argparse.ArgumentParser, size: type) -> None:
    """The options of `treduda export`; ``size`` parses one I=N."""
    command.add_argument("expressions", nargs="+", metavar="EXPR",
                         help="a statement (one kernel), or a program: several statements "
                              "separated by ';', or a product of three or more tensors")
    command.add_argument("--size", "-s", action="append", type=size, default=[],
                         metavar="I=N", help="extent of an index (repeat for each index of "
                                             "every expression)")
    command.add_argument("--out", "-o", required=True, metavar="FILE",
                         help="the bundle to write (a zip file)")
    command.add_argument("--dtype", choices=DTYPES, default="float32")
    command.add_argument("--layout", choices=("C", "F"), default="C")
    command.add_argument("--precision", choices=PRECISIONS, default=HIGHEST)
    command.add_argument("--gpu", default="H100", help="the GPU the search tunes for")
    command.add_argument("--target", action="append", metavar="sm_XX",
                         help="add a cubin for this architecture where nvcc is installed "
                              "(repeat for each; default sm_90; NVRTC compiles the source on "
                              "the GPU's machine for any other)")


def export_command(args: argparse.Namespace) -> int:
    """Compile each expression (searched within the usual budget, or taken from the tuning
    cache) and write them all into one bundle."""
    from ..api import compile, program
    from ..exporting import export
    from ..programs import Plan, statements
    from ..tuning.paths import many_factors

    writable(args.out)
    sizes = dict(args.size)
    items = {}
    used: set[str] = set()
    for expression in args.expressions:
        parts = statements(expression)
        indices = list(dict.fromkeys(i for part in parts for i in part.indices))
        missing = [i for i in indices if i not in sizes]
        if missing:
            raise MissingSize(f"no size for {', '.join(missing)} of {expression!r}; give each "
                              f"one, e.g. -s {missing[0]}=64")
        used.update(indices)
        mine = {i: sizes[i] for i in indices}
        options = {"dtype": args.dtype, "layout": args.layout, "gpu": args.gpu,
                   "precision": args.precision}
        made = (program(expression, mine, **options) if len(parts) > 1 or
                many_factors(parts[0]) else compile(expression, mine, **options))
        items[made.name] = made
    if unknown := sorted(set(sizes) - used):
        raise ArgumentError(f"-s {unknown[0]}={sizes[unknown[0]]}: {unknown[0]} is no index of "
                            f"the expressions")
    manifest = export(items, args.out, targets=args.target or ("sm_90",), gpu=args.gpu)
    print(f"wrote {args.out}: {len(manifest['kernels'])} kernel(s), "
          f"{len(manifest['programs'])} program(s); cubins for "
          f"{', '.join(manifest['targets']) or 'none (no nvcc here: NVRTC compiles there)'}")
    for name, item in items.items():
        print(f"  {name}: {item.source if isinstance(item, Plan) else item.expression}")
    return 0

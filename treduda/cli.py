"""The ``treduda`` command: compile an expression to CUDA, list strategies, run the demo."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import strategies
from .api import compile
from .demo import demo
from .errors import TredudaError


def _size(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected INDEX=EXTENT such as i=1024, got {text!r}")
    return name.strip(), int(value)


def _param(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE such as block_x=32, got {text!r}")
    return name.strip(), int(value) if value.strip().lstrip("-").isdigit() else value.strip()


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="treduda", description="CUDA kernels for tensor "
                                   "contractions written in Einstein notation.")
    commands = main.add_subparsers(dest="command", required=True)

    c = commands.add_parser("compile", help="print or write the CUDA kernel of an expression")
    c.add_argument("expression", help='e.g. "C[i,j] = A[i,k] * B[k,j]"')
    c.add_argument("--size", "-s", action="append", type=_size, default=[], metavar="I=N",
                   help="extent of an index (repeat for each index)")
    c.add_argument("--symbolic", action="store_true",
                   help="make the sizes kernel arguments: one kernel for every size")
    c.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    c.add_argument("--layout", choices=("C", "F"), default="C",
                   help="C: row-major (last index fastest); F: column-major (first fastest)")
    c.add_argument("--strategy", choices=sorted(strategies.available()), default=None)
    c.add_argument("--param", "-p", action="append", type=_param, default=[], metavar="K=V",
                   help="a strategy parameter (repeat for each)")
    c.add_argument("--opencl", action="store_true", help="print the OpenCL text instead")
    c.add_argument("--out", "-o", help="write to this file instead of printing")

    commands.add_parser("strategies", help="list the registered strategies")
    commands.add_parser("demo", help="generate, verify on PoCL and explain two kernels")
    return main


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "compile":
            return _compile(args)
        if args.command == "strategies":
            for name, description in strategies.available().items():
                print(f"{name:24} {description}")
            return 0
        return demo()
    except TredudaError as error:
        print(f"treduda: error: {error}", file=sys.stderr)
        return 2


def _compile(args: argparse.Namespace) -> int:
    kernel = compile(args.expression, dict(args.size) or None, dtype=args.dtype,
                     layout=args.layout, strategy=args.strategy, params=dict(args.param) or None,
                     symbolic=args.symbolic)
    text = kernel.opencl_source if args.opencl else kernel.cuda_source
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)
        print(f"wrote {args.out}: {kernel!r}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

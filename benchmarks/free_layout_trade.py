"""Issue 37's sector line, read through the model: on the rows whose output's fastest group
can be boxed (tccg_31-48), each ``free_layout`` the row offers, the search held to it (the
mma.sync strategy, as tensorcore_economy.py searches), beside the pick. Per layout: its best
candidate's tiles, the blocks the grid takes (a padded box's slots included), the first
block's global sectors per warp request of A, B and the output's write beside the ideal (the
tensor-core model's count, from the addresses the kernel builder deals), whether both
operands meet the line (at most 1.25x the ideal), the model's milliseconds per resource and
its estimate, and that estimate over the pick's. A layout not picked shows here which
resource its trade costs: on tccg_31 the full box (picked: 16 of ``d_e`` by all 24 of ``a``)
reads both operands at the ideal and writes 2.9 sectors a request where 2 do; the whole box
writes at the ideal but reads A at twice it and spends a third more blocks on 24 -> 32
(+11%); the exact box writes the output in 16-byte runs (+23%), the padded box spends the
blocks and writes 32-byte runs (+28%).

    python benchmarks/free_layout_trade.py [--rows tccg_31,tccg_32] [--gpu H100]
                                           [--steps 4] [--json FILE]

About 5-15 s a layout on two shared cores (a search each; no nvcc).
"""

from __future__ import annotations

import sys

from economy_tables import arguments, measure_rows, table, wanted_rows
from treduda.strategies.tensorcore_tiles import free_layouts, mma_shape, tile_extents

import treduda
from treduda.model.gpus import gpu as find_gpu
from treduda.model.model import model_of
from treduda.suites import load
from treduda.tuning.budgets import BENCH_MAX_NODES

LINE_RATIO = 1.25  # issue 37: sectors a request at most this multiple of the ideal
STRATEGY = "tensorcore"
RESOURCES = ("mma", "issue", "memory", "l2", "dram", "latency")
ROWS = tuple(f"tccg_{i}" for i in range(31, 49))


def per_request(counted: tuple[int, int, int, int]) -> tuple[float, float]:
    """Sectors and ideal sectors per request of a ``(requests, sectors, ideal, lines)``
    count."""
    requests, sectors, ideal, _ = counted
    return sectors / requests, ideal / requests


def held(row, layout: str, gpu: str, steps: int) -> dict:
    """The best candidate of ``row`` in fp16 with ``free_layout`` held to ``layout``, and the
    model's figures of it."""
    result = treduda.search(row.expression, row.sizes, gpu, dtype="float16", layout=row.layout,
                            max_nodes=BENCH_MAX_NODES, strategy=STRATEGY,
                            values={"free_layout": (layout,)})
    best = result.best
    p = dict(best.params)
    kernel = treduda.compile(row.expression, row.sizes, dtype="float16", layout=row.layout,
                             strategy=STRATEGY, params=p)
    model = model_of(kernel.program, find_gpu(gpu), STRATEGY)
    copies = model.copy_sectors(p, steps)
    operands = {name: per_request(copies[tensor])
                for name, tensor in zip("AB", kernel.contraction.inputs, strict=False)}
    return {"params": p,
            "tiles": f"{p['warps_m']}x{p['warps_n']}w {p['frags_m']}x{p['frags_n']}f "
                     f"k{p['frags_k']} s{p['stages']}",
            "blocks": model.tiles(tile_extents(p, mma_shape(kernel.program)), p),
            "sectors": operands,
            "write": per_request(model.write_sectors(p)),
            "line": all(s <= LINE_RATIO * ideal for s, ideal in operands.values()),
            "ms": {r: best.prediction.resources[r] * 1e3 for r in RESOURCES},
            "estimate_ms": best.prediction.seconds * 1e3}


def trade(name: str, gpu: str, steps: int) -> dict:
    """Every layout ``name``'s row offers, held, and which the unheld search picks."""
    row = next(r for r in load("tccg_fp16") if r.id == name)
    program = treduda.compile(row.expression, row.sizes, dtype="float16", layout=row.layout,
                              strategy=STRATEGY).program
    layouts = {layout: held(row, layout, gpu, steps) for layout in free_layouts(program)}
    pick = min(layouts, key=lambda layout: layouts[layout]["estimate_ms"])
    return {"pick": pick, "layouts": layouts}


COLUMNS = ("row", "layout", "tiles", "blocks", "A sect/req", "B sect/req", "write", "line",
           *(f"{r} ms" for r in RESOURCES), "estimate ms", "vs pick")


def lines(name: str, found: dict) -> list[list[str]]:
    pick = found["layouts"][found["pick"]]["estimate_ms"]

    def sectors(counted: tuple[float, float]) -> str:
        return f"{counted[0]:.1f} ({counted[1]:.0f})"

    return [[name, layout + (" *" if layout == found["pick"] else ""), f["tiles"],
             str(f["blocks"]), sectors(f["sectors"]["A"]), sectors(f["sectors"]["B"]),
             sectors(f["write"]), "yes" if f["line"] else "no",
             *(f"{f['ms'][r]:.4f}" for r in RESOURCES), f"{f['estimate_ms']:.4f}",
             f"{f['estimate_ms'] / pick:.3f}"]
            for layout, f in found["layouts"].items()]


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, "tccg_31, ..., tccg_48")
    parser.add_argument("--steps", type=int, default=4,
                        help="reduction steps whose copies are counted (default 4)")
    args = parser.parse_args(argv)
    wanted = wanted_rows(parser, args.rows, ROWS)
    found: dict[str, dict] = {}

    def measured(name: str) -> dict:
        found[name] = trade(name, args.gpu, args.steps)
        return found[name]

    measure_rows(wanted, measured, lambda name, f: lines(name, f)[0], COLUMNS, args.json)
    print(table(COLUMNS, [line for name in wanted if name in found
                          for line in lines(name, found[name])]))
    print("*: the layout the unheld search picks (the least estimate); sect/req: global "
          "sectors per warp request of the first block (ideal in brackets), the tensor-core "
          "model's count; line: both operands at most 1.25x the ideal; the resources as the "
          "model times them, its estimate the binding one plus a tenth of the others")
    return 0


if __name__ == "__main__":
    sys.exit(main())

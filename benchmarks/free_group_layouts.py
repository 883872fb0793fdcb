"""Issue 37's sector line on the TCCG rows whose free group is not in one operand's memory
order (tccg_31-48): what each way of laying that group out in the block's tile costs, in
global sectors of the operand's copies and of the output's writes, per warp request and per
kernel.

A free group (say M = {a, d, e} of tccg_31's ``A[d,e,g,a]``, output ``C[a,...]``) is one
linear dimension of the GEMM, its values split into mixed-radix *digits* (fastest first); the
block's tile is ``BM`` consecutive values of it. Linearised in the output's order (a, d, e:
what :func:`~treduda.strategies.tensorcore_tiles.gemm_groups` keeps today), A's copies read a
value of ``a`` per element, 24 sectors a request; in A's order (d, e, a) the output's writes
scatter. The layouts measured:

* ``today``: the group as the builder orders it;
* ``operand``: the group in the operand's memory order;
* ``box PxQ``: a box of ``P`` values of the operand's contiguous indices (fused where adjacent,
  as ``(d, e)`` are in A and C) by ``Q`` of the output's fastest index, then the rest of each
  (``Q`` above that index's size pads it: slots outside the tensor, zeros, MMA work spent);

each with the output written in one of three orders through the shared C tile: ``tile``
(along the tile's M or N axis, today's write), ``runs`` (a box's values of the output's
fastest index, then the tile's other axis, then the box's other side: quotients and remainders
by constants, as today's write takes) or ``output`` (the tile's elements in address order).
The copies are dealt as the builder deals them (``e = T c + t`` over the tile's rows and
runs, its interleaved row order; cp.async runs of the widest width the row's contiguous values
allow, else 2-byte copies through registers), sectors and 128-byte lines counted by
:mod:`treduda.run.counters`' rule (a request: a warp's 32 accesses; a sector per distinct 32
bytes its active threads touch; the ideal ``ceil(active x width / 32)``). Operand sectors are
counted over every tile of the operand and every step, times the blocks reading each; the
output's over an even sample of blocks, scaled to the grid. ``line``: both operands within
issue 37's 1.25x the ideal. With ``--check`` the ``today`` layout's first-block figures are
printed beside the emulator's (``Kernel.counters()``).

    python benchmarks/free_group_layouts.py [--rows tccg_31,tccg_32] [--check] [--json FILE]

Takes the mma.sync picks' tiles from benchmarks/data/tensorcore_economy_after.json. About 10 s
a row here (two shared cores); tensorcore_economy.py shows the picks themselves.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import pathlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from economy_tables import table
from treduda.strategies.tensorcore_tiles import (
    NUMPY,
    copy_shape,
    fastest_first,
    gemm_groups,
    interleaved_row,
    mma_shape,
    tile_extents,
)

import treduda
from treduda.suites import load

LINE_RATIO = 1.25  # issue 37: sectors a request at most this multiple of the ideal
PICKS = pathlib.Path(__file__).parent / "data" / "tensorcore_economy_after.json"
SECTOR, LINE, ITEM, WARP = 32, 128, 2, 32  # bytes of a sector, a line, a float16; a warp
CP_ASYNC = (8, 4, 2)  # float16 values cp.async moves: 16, 8 or 4 bytes
BOX_SIDES = (4, 8, 16, 32)  # values of a box along each of its two sides
SAMPLED_BLOCKS = 96  # blocks whose output writes are counted, evenly spread over the grid
WRITES = ("tile", "runs", "output")

Digit = tuple[tuple[str, ...], int]  # indices fused (adjacent in memory, fastest first), slots


@dataclass(frozen=True)
class Layout:
    """A free group's linearisation: its ``digits``, fastest first."""

    name: str
    digits: tuple[Digit, ...]

    @property
    def slots(self) -> int:
        return math.prod(s for _, s in self.digits)


def values(digits: Sequence[Digit], sizes: dict[str, int], v: np.ndarray
           ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Each index's value at linear values ``v`` of ``digits``, and whether all lie inside
    their sizes (a padded digit's extra slots do not)."""
    fused: dict[tuple[str, ...], np.ndarray] = {}
    radix: dict[tuple[str, ...], int] = {}
    for indices, slots in digits:
        digit = v % slots
        v = v // slots
        fused[indices] = fused.get(indices, 0) + digit * radix.get(indices, 1)
        radix[indices] = radix.get(indices, 1) * slots
    found: dict[str, np.ndarray] = {}
    inside = np.ones(np.shape(v), dtype=bool)
    for indices, u in fused.items():
        inside &= u < math.prod(sizes[i] for i in indices)
        for index in indices:
            found[index] = u % sizes[index]
            u = u // sizes[index]
    return found, inside


def strides(indices: Sequence[str], sizes: dict[str, int], layout: str) -> dict[str, int]:
    stride, found = 1, {}
    for index in fastest_first(indices, layout):
        found[index], stride = stride, stride * sizes[index]
    return found


def sectors(offsets: np.ndarray, active: np.ndarray, width: int) -> dict[str, int]:
    """Requests, sectors, ideal sectors and 128-byte lines of requests of :data:`WARP`
    consecutive accesses (rows of ``offsets``, element offsets, each of ``width`` elements)
    where some thread is active."""
    offsets = offsets.reshape(-1, WARP)
    active = active.reshape(-1, WARP)
    issued = active.any(axis=1)
    found = {"requests": int(issued.sum()),
             "ideal": int((-(-active[issued].sum(axis=1) * width * ITEM // SECTOR)).sum())}
    for name, unit in (("sectors", SECTOR), ("lines", LINE)):
        touched = np.where(active, offsets * ITEM // unit, -1)[issued]
        touched.sort(axis=1)
        distinct = (touched[:, 1:] != touched[:, :-1]) & (touched[:, 1:] >= 0)
        found[name] = int(distinct.sum() + (touched[:, 0] >= 0).sum())
    return found


@dataclass(frozen=True)
class Row:
    """One TCCG row's GEMM view: its groups, the pick's tile, the operand whose free group
    is not in its memory order (``tensor``, on axis ``free``)."""

    row: object
    kernel: object
    groups: dict[str, tuple[str, ...]]
    tile: dict[str, int]
    tensor: str
    free: str

    @classmethod
    def of(cls, name: str, params: dict) -> Row:
        row = next(r for r in load("tccg_fp16") if r.id == name)
        kernel = treduda.compile(row.expression, row.sizes, dtype="float16",
                                 layout=row.layout, strategy="tensorcore", params=params)
        program = kernel.program
        (a,), (b,), m, n, k, _ = gemm_groups(program)
        output = fastest_first(program.output_indices, program.layout)
        # the operand whose free group holds the output's fastest index
        tensor, free = (a, "m") if output[0] in m else (b, "n")
        return cls(row, kernel, {"m": m, "n": n, "k": k},
                   tile_extents(params, mma_shape(program)), tensor, free)

    @property
    def sizes(self) -> dict[str, int]:
        return self.kernel.program.sizes  # the merged indices' (tccg_31's d_e: 480)

    def layouts(self) -> list[Layout]:
        """``today``, ``operand`` and the boxes of the pick's tile (P x Q its values, P and Q
        powers of two, P dividing the operand's contiguous values, Q padding the output's
        fastest index by at most a third)."""
        group = self.groups[self.free]
        program = self.kernel.program
        order = fastest_first(program.contraction.inputs[self.tensor], program.layout)
        mine = tuple(i for i in order if i in group)
        o = fastest_first(program.output_indices, program.layout)[0]
        contiguous = tuple(mine[:mine.index(o)])  # the operand's indices before the output's
        found = [Layout("today", tuple(((i,), self.sizes[i]) for i in group)),
                 Layout("operand", tuple(((i,), self.sizes[i]) for i in mine))]
        span = math.prod(self.sizes[i] for i in contiguous)
        rest = tuple(((i,), self.sizes[i]) for i in group if i not in (*contiguous, o))
        tile = self.tile[self.free]
        for p, q in itertools.product(BOX_SIDES, BOX_SIDES):
            slots_o = -(-self.sizes[o] // q) * q  # padded up to whole boxes
            if span % p or p * q != tile or slots_o > 4 * self.sizes[o] / 3:
                continue
            found.append(Layout(f"box {p}x{q}" + ("" if slots_o == self.sizes[o] else
                                                    f" ({o} {self.sizes[o]}->{slots_o})"),
                                ((contiguous, p), ((o,), q), (contiguous, span // p),
                                 ((o,), slots_o // q), *rest)))
        return found

    def digits(self, layout: Layout) -> dict[str, tuple[Digit, ...]]:
        other = "n" if self.free == "m" else "m"
        found = {self.free: layout.digits,
                 other: tuple(((i,), self.sizes[i]) for i in self.groups[other])}
        # K as its sizes: one index on every row here (a grouped K's steps would round its
        # fastest index up, as stepped_k does)
        found["k"] = tuple(((i,), self.sizes[i]) for i in self.groups["k"])
        return found

    def operand(self, layout: Layout, tensor: str) -> dict[str, int]:
        """Sectors of ``tensor``'s copies, over the whole kernel, and of its first block."""
        kernel, sizes = self.kernel, self.sizes
        digits = self.digits(layout)
        free = "m" if tensor == next(iter(kernel.program.contraction.inputs)) else "n"
        shape = copy_shape(kernel.program, kernel.params, tensor)
        rows, runs = shape["rows"], shape["runs"]
        order = fastest_first(kernel.program.contraction.inputs[tensor], kernel.program.layout)
        row_axis = "k" if shape["row_is_free"] else free  # what a row runs along
        first = digits[row_axis][0]
        run = first[1] if first[0] == tuple(order[:len(first[0])]) else 1
        if first[1] > math.prod(sizes[i] for i in first[0]):
            run = math.prod(sizes[i] for i in first[0])  # padded: runs end at the size
        columns = shape["columns"]
        width = next((w for w in CP_ASYNC if run % w == 0 and columns % w == 0), 1)
        runs = columns // width
        e = np.arange(rows * runs)
        q = interleaved_row(e // runs, shape["order"], NUMPY)
        column = width * (e % runs)
        local_free, local_k = (q, column) if shape["row_is_free"] else (column, q)
        slots = {axis: math.prod(s for _, s in digits[axis]) for axis in (free, "k")}
        tiles = -(-slots[free] // self.tile[free])
        steps = -(-slots["k"] // self.tile["k"])
        t, s = np.meshgrid(np.arange(tiles), np.arange(steps), indexing="ij")
        v_free = (t[..., None] * self.tile[free] + local_free).reshape(-1)
        v_k = (s[..., None] * self.tile["k"] + local_k).reshape(-1)
        inside = (v_free < slots[free]) & (v_k < slots["k"])
        index_free, in_free = values(digits[free], sizes, np.minimum(v_free, slots[free] - 1))
        index_k, in_k = values(digits["k"], sizes, np.minimum(v_k, slots["k"] - 1))
        where = strides(kernel.program.contraction.inputs[tensor], sizes, kernel.program.layout)
        offset = sum(index_free[i] * where[i] for i in index_free) + sum(
            index_k[i] * where[i] for i in index_k)
        active = inside & in_free & in_k
        per = -(-rows * runs // WARP) * WARP  # a step's copies, whole warps
        pad = per - rows * runs
        shaped = [np.pad(x.reshape(tiles * steps, -1), ((0, 0), (0, pad)))
                  for x in (offset, active)]
        counted = sectors(shaped[0], shaped[1], width)
        first = sectors(shaped[0][:steps], shaped[1][:steps], width)
        other = "n" if free == "m" else "m"
        readers = -(-math.prod(s for _, s in digits[other]) // self.tile[other])
        return {"width": width, **{name: n * readers for name, n in counted.items()},
                "first_per_request": first["sectors"] / first["requests"],
                "first_ideal": first["ideal"] / first["requests"]}

    def output(self, layout: Layout, write: str) -> dict[str, float]:
        """Sectors of the output's writes over a sample of blocks, scaled to the grid, in the
        ``write`` order (see the module's doc)."""
        kernel, sizes = self.kernel, self.sizes
        digits = self.digits(layout)
        slots = {axis: math.prod(s for _, s in digits[axis]) for axis in "mn"}
        tiles = {axis: -(-slots[axis] // self.tile[axis]) for axis in "mn"}
        grid = tiles["m"] * tiles["n"]
        chosen = np.unique(np.linspace(0, grid - 1, min(SAMPLED_BLOCKS, grid)).astype(int))
        chosen = np.union1d(chosen, [0])
        bm, bn = chosen % tiles["m"], chosen // tiles["m"]
        along_m = not any(i in self.groups["n"] for i in fastest_first(
            kernel.program.output_indices, self.kernel.program.layout)[:1])
        e = np.arange(self.tile["m"] * self.tile["n"])
        local_m, local_n = ((e % self.tile["m"], e // self.tile["m"]) if along_m
                            else (e // self.tile["n"], e % self.tile["n"]))
        if write == "runs":  # the box's output digit, the other axis, the box's other digit
            other = "n" if self.free == "m" else "m"
            (_, p), (_, q) = layout.digits[:2]
            inner, across = e % q, e // q % self.tile[other]
            rest = e // (q * self.tile[other])
            local = rest % p + p * inner + p * q * (rest // p)
            local_m, local_n = (local, across) if self.free == "m" else (across, local)
        v_m = bm[:, None] * self.tile["m"] + local_m
        v_n = bn[:, None] * self.tile["n"] + local_n
        inside = (v_m < slots["m"]) & (v_n < slots["n"])
        index_m, in_m = values(digits["m"], sizes, np.minimum(v_m, slots["m"] - 1))
        index_n, in_n = values(digits["n"], sizes, np.minimum(v_n, slots["n"] - 1))
        where = strides(kernel.program.output_indices, sizes, self.kernel.program.layout)
        offset = sum(index_m[i] * where[i] for i in index_m) + sum(
            index_n[i] * where[i] for i in index_n)
        active = inside & in_m & in_n
        if write == "output":  # in address order, those outside the output last
            key = np.where(active, offset, np.iinfo(np.int64).max)
            rank = np.argsort(key, axis=1, kind="stable")
            offset = np.take_along_axis(offset, rank, axis=1)
            active = np.take_along_axis(active, rank, axis=1)
        counted = sectors(offset, active, 1)
        first = sectors(offset[:1], active[:1], 1)
        scale = grid / len(chosen)
        return {**{name: n * scale for name, n in counted.items()},
                "first_per_request": first["sectors"] / first["requests"], "mma_useful":
                math.prod(sizes[i] for i in self.groups[self.free]) / slots[self.free]}


def measure(name: str, params: dict, check: bool) -> list[dict]:
    row = Row.of(name, params)
    a, b = row.kernel.program.contraction.inputs
    found = []
    for layout in row.layouts():
        operands = {t: row.operand(layout, t) for t in (a, b)}
        for write in WRITES if layout.name.startswith("box") else WRITES[::2]:
            found.append({"row": name, "layout": layout.name, "write": write,
                          "operands": operands, "C": row.output(layout, write),
                          "tensor": row.tensor})
    if check:
        counted = row.kernel.counters()
        for t in (a, b):
            loads = counted.of(t, "ldgsts") or counted.of(t)
            mine = found[0]["operands"][t]
            print(f"{name} {t}: emulator {loads.per_request:.2f} ({loads.ideal_per_request:.2f})"
                  f", here {mine['first_per_request']:.2f} ({mine['first_ideal']:.2f})",
                  file=sys.stderr)
        writes = next(t for t in counted.traffic if (t.array, t.operation) == ("C", "st"))
        print(f"{name} C: emulator {writes.per_request:.2f}, here "
              f"{found[0]['C']['first_per_request']:.2f}", file=sys.stderr)
    return found


def per_request(traffic: dict, name: str = "sectors") -> float:
    return traffic[name] / traffic["requests"]


def meets(f: dict) -> bool:
    """Issue 37's line: both operands' copies at most 1.25x the ideal sectors a request."""
    return all(o["sectors"] <= LINE_RATIO * o["ideal"] for o in f["operands"].values())


def cells(f: dict, today: dict) -> list[str]:
    ops, c = f["operands"], f["C"]

    def total(g: dict, name: str) -> float:
        return sum(o[name] for o in g["operands"].values()) + g["C"][name]

    return [f["row"], f["layout"], f["write"],
            *(f"{per_request(o):.1f} ({per_request(o, 'ideal'):.1f}) x{o['width']}"
              for o in ops.values()),
            f"{per_request(c):.2f} ({per_request(c, 'ideal'):.2f}) "
            f"{per_request(c, 'lines'):.2f}",
            *(f"{o['sectors'] / 1e6:.2f}" for o in ops.values()), f"{c['sectors'] / 1e6:.2f}",
            f"{total(f, 'sectors') / 1e6:.2f}",
            f"{total(f, 'sectors') / total(today, 'sectors'):.2f}",
            f"{total(f, 'lines') / 1e6:.2f}", f"{total(f, 'lines') / total(today, 'lines'):.2f}",
            f"{c['mma_useful']:.2f}", "yes" if meets(f) else "no"]


COLUMNS = ("row", "layout", "write", "A sect/req (ideal) width", "B sect/req (ideal) width",
           "C sect/req (ideal) lines/req", "A Msect", "B Msect", "C Msect", "total Msect",
           "vs today", "total Mlines", "vs today", "MMA useful", "line")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(f"tccg_{i}" for i in range(31, 49)))
    parser.add_argument("--check", action="store_true",
                        help="print the emulator's first-block sectors beside this count's")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    picks = json.loads(PICKS.read_text())
    lines, found = [], []
    for name in args.rows.split(","):
        measured = measure(name, picks[name]["params"], args.check)
        found += measured
        lines += [cells(f, measured[0]) for f in measured]
    print(table(COLUMNS, lines))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

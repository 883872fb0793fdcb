"""The mma.sync write takes a vector of the output's fastest index a thread
(:func:`.tensorcore_tiles.write_vector`): one C tile load per 16 bytes of lanes side by side,
one global store per vector (16-bit values packed in pairs), where every vector is aligned
and lies inside the output or outside it whole; elsewhere a value at a time."""

from __future__ import annotations

import re

import pytest
from treduda.strategies import tensorcore_tiles as tiles
from treduda.strategies.tensorcore_kernel import Builder

import treduda
from treduda.polyhedral.lower import plan
from treduda.run.counters import LOAD, Region

GEMM = "C[i,j] = A[i,k] * B[k,j]"
TCCG_31 = "C[a,b,c,d,e,f]=A[d,e,g,a]*B[g,f,b,c]"  # a free box on A's M: d_e by a
SMALL_31 = {"a": 12, "b": 5, "c": 3, "d": 6, "e": 4, "f": 7, "g": 10}
PARAMS = {"warps_m": 2, "warps_n": 1, "frags_m": 2, "frags_n": 2, "frags_k": 2, "split": 1,
          "stages": 2, "mapping": "mma", "shared_layout": "pad", "async_copy": True,
          "free_layout": "group"}
BOX = {**PARAMS, "frags_m": 1, "frags_k": 1, "free_layout": "box"}


def _compile(expression: str, sizes: dict, layout: str, dtype: str = "float16",
             params: dict | None = None) -> treduda.Kernel:
    return treduda.compile(expression, sizes, dtype=dtype, layout=layout,
                           strategy="tensorcore", cache=False, params=params or PARAMS,
                           precision="tf32" if dtype == "float32" else "highest")


def _write(kernel: treduda.Kernel) -> str:
    """The printed CUDA after the kernel's last barrier: the write."""
    source = kernel.cuda_source
    body = source[source.rindex("__syncthreads();"):]
    return body[:body.index("\n}\n")]


@pytest.mark.parametrize(("sizes", "layout", "dtype", "vector"), [
    ({"i": 70, "j": 24, "k": 40}, "C", "float16", 8),  # rows of 48 bytes: 16-byte vectors
    ({"i": 72, "j": 21, "k": 40}, "F", "float16", 8),  # column-major: along M, down the tile
    ({"i": 70, "j": 20, "k": 40}, "C", "float16", 4),  # rows of 40 bytes: 8 at most
    ({"i": 70, "j": 20, "k": 40}, "C", "float32", 4),
    ({"i": 70, "j": 21, "k": 40}, "C", "float16", 1),  # odd: a value at a time
])
def test_the_write_stores_aligned_vectors_and_matches_einsum(sizes, layout, dtype, vector):
    """Output extents not multiples of the vector or of the tile: the printed write stores
    whole vectors where alignment allows (the C tile read 16 bytes at a time, halves packed
    in words), a value at a time where it does not, and both match numpy.einsum on PoCL
    and on the emulator (which checks every access, hazards included)."""
    kernel = _compile(GEMM, sizes, layout, dtype)
    program = kernel.program
    assert tiles.write_vector(program, kernel.params, Builder(program, PARAMS).tile) == vector
    write = _write(kernel)
    stores = re.findall(r"\*\((\w+) \*\)&C\[", write)
    if vector == 1:
        assert not stores and "td_half_store(td_sc[" in write
    else:
        kind = {"float16": {8: "uint4", 4: "uint2"}, "float32": {4: "float4"}}[dtype][vector]
        assert stores and set(stores) == {kind}
        assert "const float4" in write  # the lanes' C tile loads, merged
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok


@pytest.mark.parametrize(("sizes", "layout", "params"), [
    ({"i": 70, "j": 72, "k": 40}, "C", {**PARAMS, "frags_n": 4}),  # rows of 64 along N
    ({"i": 72, "j": 21, "k": 40}, "F", PARAMS),  # along M: the tile's 64 of M a row
])
def test_a_vectors_two_c_tile_loads_take_each_bank_once(sizes, layout, params):
    """Eight floats a thread, two LDS.128 32 bytes apart a lane: a quarter-warp's eight
    lanes span 256 bytes of a row, lanes ``i`` and ``i + 4`` on the same banks (2 ways)
    unless the row is skewed by 16 bytes every 128 (:func:`.tensorcore_tiles.
    accumulator_skew`): the ideal wavefronts, which the model counts of the C tile's round
    trip (:mod:`.tensorcore_model`: its bytes in 128-byte wavefronts); partial tiles, and
    PoCL matches numpy.einsum."""
    kernel = _compile(GEMM, sizes, layout, params=params)
    tile = Builder(kernel.program, params).tile
    assert tiles.write_vector(kernel.program, kernel.params, tile) == 8
    reads = kernel.counters(steps=1).of("td_sc", LOAD, Region.AFTER)
    assert (reads.ways, reads.transactions) == (1, reads.ideal)
    assert kernel.verify().ok


def test_a_box_taking_c_first_writes_a_value_at_a_time_without_conflicts():
    """A rank-6 output through a free box that takes ``c`` first (tccg_31's, partial tiles
    everywhere): a thread's values of ``a`` lie P apart in the C tile, where vectors of 4
    of them read 3 ways (each lane's loads counted: the emulator's vector store reads its
    values first), so the write stores a value at a time, each bank read once; so does a
    split reduction, whose parts add, and an update, which reads the output."""
    kernel = _compile(TCCG_31, SMALL_31, "F", params=BOX)
    assert Builder(kernel.program, kernel.params).vector() == 1
    assert not re.findall(r"\*\((\w+) \*\)&C\[", _write(kernel))
    assert kernel.verify().ok and kernel.verify(backend="emulator").ok
    assert kernel.counters(steps=1).worst_ways() == 1
    assert Builder(plan(TCCG_31, SMALL_31 | {"g": 40}, "F", "float16"),
                   {**BOX, "split": 2}).vector() == 1
    update = plan(TCCG_31.replace("=", "+=", 1), SMALL_31, "F", "float16")
    assert Builder(update, BOX).vector() == 1  # a read of the output: no plain store


def test_the_model_counts_a_vector_once():
    """The models' count of the write per element (:meth:`Builder.write_instructions`,
    which both the search and ``Kernel.estimate`` read) falls with the vector: GEMM fp16's
    128 x 256 tile, 8 halves a store."""

    class Scalar(Builder):
        vector_write = False

    program = plan(GEMM, {"i": 4096, "j": 4096, "k": 4096}, "C", "float16")
    params = {**PARAMS, "warps_n": 4, "frags_m": 4, "frags_n": 4, "frags_k": 4}
    vector, scalar = Builder(program, params), Scalar(program, params)
    assert vector.write_statement().vector == 8 and scalar.write_statement().vector == 1
    assert vector.write_instructions() < scalar.write_instructions() / 2

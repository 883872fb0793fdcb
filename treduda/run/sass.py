"""Read what the GPU will actually execute: a static report of a kernel's SASS.

ptxas's register and spill counts (:mod:`treduda.run.nvcc`) do not say whether a kernel is
well shaped. The SASS does: how much of the main loop is FMAs, whether global loads were
vectorised (``LDG.E.128``), how often shared memory is touched, how many barriers there are.
No GPU is needed; nvcc builds a cubin and ``nvdisasm -c`` (or ``cuobjdump -sass``) prints it.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import shutil
import statistics
import tempfile
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from treduda.codegen.ir import WARP
from treduda.codegen.targets import cuda_target
from treduda.errors import BackendUnavailable, CompileError
from treduda.once import once_per_key
from treduda.run.nvcc import (
    CudaReport,
    _demangle,
    compile_cuda_batch,
    cubin,
    find_nvcc,
    kernel_names,
    parse_ptxas,
    run_tool,
)

# cuobjdump: "Function : name"; nvdisasm: "//------ .text.name ------".
_FUNCTION = re.compile(r"^\s*(?:Function\s*:\s*(\S+)|//-+\s*\.text\.(\S+)\s+-+)")
# (an opcode's modifiers may hold a shape's "x": HGMMA.64x256x16.F32)
_INSTRUCTION = re.compile(
    r"/\*([0-9a-fA-F]+)\*/\s+(?:@(!?U?P(?:T|\d+))\s+)?([A-Z][A-Z0-9_.x]*)([^;]*);"
)
# Guards that are never true: ptxas places ``@!PT LDS RZ, [RZ]`` before LDGSTS (undocumented;
# three before each cp.async that follows a generic shared store, in the SASS read for issue
# 39). Such an instruction is issued but moves nothing, so it is counted apart from its kind.
_NEVER = {"!PT", "!UPT"}
_LABEL = re.compile(r"^\s*(\.L\w+):")  # nvdisasm names branch targets instead of addresses
_TARGET = re.compile(r"`\((\.L\w+)\)|(0x[0-9a-fA-F]+)\s*$")
# HFMA2 is not counted: sm_8x+ zero registers with "HFMA2.MMA R, -RZ, RZ, 0, 0".
_FMA = {"FFMA", "DFMA"}
# Tensor-core multiply-accumulates: HMMA (float16, bfloat16 and TF32 inputs), DMMA (float64),
# HGMMA (a warpgroup's wgmma, sm_90a).
_MMA = {"HMMA", "DMMA", "HGMMA"}
# A warpgroup's wgmma is issued by each of the warpgroup's four warps (PTX ISA, "Asynchronous
# Warpgroup Level Matrix Multiply-Accumulate Operations"): a warp's HGMMA does a quarter of its
# M x N x K multiply-adds.
_WARPGROUP_WARPS = 4
# cp.async: a global-to-shared copy that bypasses the registers (sm_80+).
_ASYNC_COPY = {"LDGSTS"}
_BULK_COPY = {"UTMALDG"}  # the tensor memory accelerator's loads (cp.async.bulk.tensor)
_JUMPS = {"BRA", "BRX", "JMP", "JMX", "RET", "EXIT"}  # end a basic block
# What a warp moves through shared memory per instruction: LDS/STS/LDGSTS 32 threads of their
# width; LDSM (ldmatrix) 128 bytes per 8x8 matrix of 16-bit values, .2 or .4 of them.
_SHARED = {"LDS", "STS", "LDGSTS"}
_MATRIX_BYTES = 128
# The main loop's opcodes by what they do, to read beside a profiler's instruction mix.
KINDS = {"tensor core": {"HMMA", "DMMA", "IMMA", "HGMMA"}, "FMA": {"FFMA", "DFMA", "HFMA2"},
         "shared memory": {"LDS", "STS", "LDSM"}, "global memory": {"LDG", "STG", "LD", "ST"},
         "async copy": {"LDGSTS", "LDGDEPBAR", "DEPBAR"}, "barrier": {"BAR"},
         "branch": {"BRA", "BSSY", "BSYNC", "WARPSYNC", "EXIT", "NOP", "YIELD"}}
_MEMORY = {"LDG": "global_load_widths", "LDS": "shared_load_widths",
           "STG": "global_store_widths", "STS": "shared_store_widths"}
_SUBWORD = {"U8": 8, "S8": 8, "U16": 16, "S16": 16}
# Loads whose distance to the first use of their value the main loop report gives: a use
# closer than the load's latency stalls the warp unless other warps issue meanwhile (issue 40:
# tccg_04's three direct-read kernels use their global loads a median 14, 24 and 12
# instructions on, and ran 0.80, 0.56 and 0.65 ms on the H200 with 8, 8 and 12 warps per
# scheduler, in the order of warps x distance).
_LOADS = {"LDS", "LDG", "LDL", "LDSM"}
_STORES = {"STS", "STG", "STL"}  # every register operand of a store is read
_LOCAL = {"LDL", "STL"}  # local memory: a thread's spilled registers
_REGISTER = re.compile(r"\bR(\d+)\b")
_VECTOR = {"32", "64", "128", "256"}
# cuobjdump (CUDA 13 at least) runs nvdisasm to print SASS, so nvdisasm comes first; older
# cuobjdumps disassemble by themselves.
_TOOLS = ("nvdisasm", "cuobjdump")
# nvdisasm's dataflow analysis only infers the targets of jumps through the branch stack
# (`nvdisasm --help`, -ndf); without it a listing costs 0.29 CPU s instead of 0.41 (CUDA 13.5),
# and the listings of SIMT, mma.sync, wgmma and float64 kernels, and of one with CALL, RET
# and BSSY, were the same byte for byte.
_TOOL_ARGS = {"cuobjdump": ["-sass"], "nvdisasm": ["-c", "-ndf"]}


@dataclass(frozen=True)
class SassLoop:
    """One loop of a kernel's SASS (:func:`_loops`): its addresses and what it holds, for a
    count of what a thread executes with each loop taken as many times as it runs."""

    start: int  # the address branched back to ...
    end: int  # ... and the last branch back
    instructions: int  # never-executed ones included (they are issued)
    mma: int
    store_bits: int  # what a thread's global stores (STG) in it write per pass
    producer: bool = False  # a warp-specialised kernel's producer loop (:func:`_producer_loop`)

    def within(self, other: SassLoop) -> bool:
        """Whether this loop lies inside ``other`` (and is not it)."""
        return other.start <= self.start and self.end <= other.end and self != other


@dataclass(frozen=True)
class SassReport:
    """Instruction mix of one compiled kernel, as a quality check of the generated code."""

    kernel: str
    arch: str
    instructions: int
    ffma: int
    main_loop_instructions: int
    main_loop_ffma: int
    ffma_share: float
    global_load_widths: dict[int, int]
    shared_load_widths: dict[int, int]
    global_store_widths: dict[int, int]
    shared_store_widths: dict[int, int]
    barriers: int
    # Global loads through the read-only path (LDG...CONSTANT): nvcc takes it where it knows
    # an input is never written (const __restrict__), and loses it where it cannot tell.
    read_only_loads: int = 0
    mma: int = 0  # tensor-core instructions (HMMA, DMMA, HGMMA) in the kernel ...
    main_loop_mma: int = 0  # ... and in its main loop
    # the multiply-adds a warp's MMAs of the main loop do, read from their shapes
    # (:func:`_mma_macs`): instructions per MMA compare kernels of one MMA shape, per
    # multiply-add any two (an mma.sync m16n8k8 does half an m16n8k16's work)
    main_loop_mma_macs: int = 0
    async_copies: int = 0  # cp.async copies (LDGSTS) in the kernel ...
    main_loop_async_copies: int = 0  # ... and in its main loop
    bulk_copies: int = 0  # bulk tensor copies (UTMALDG) in the kernel
    # the register counts its setmaxnreg ask for (USETMAXREG, one per role that ptxas kept:
    # none where it ignored them), smallest first
    register_limits: tuple[int, ...] = ()
    # the main loop's instructions by opcode without modifiers ("LDS", "IMAD", "BAR"), to see
    # what besides its FMAs takes issue slots
    main_loop_opcodes: dict[str, int] = field(default_factory=dict)
    # bytes the main loop moves through shared memory per warp and pass (LDS, STS, LDSM, LDGSTS)
    main_loop_shared_bytes: int = 0
    # the main loop's shared loads (LDS) by width in bits: 128-bit loads of register tiles
    # take a quarter of the issue slots of 32-bit ones
    main_loop_shared_load_widths: dict[int, int] = field(default_factory=dict)
    # whether the main loop is a loop, or (a reduction of one or two steps that nvcc unrolled
    # whole) the straight run of code holding the most FMAs and MMAs, which is the kernel's
    # main body then: the per-MMA figures read it alike
    looped: bool = True
    # per load opcode in the main loop (LDS, LDG, LDL, LDSM), the median number of
    # instructions from a load to the first that reads its value (:func:`_load_use`)
    main_loop_load_use: dict[str, float] = field(default_factory=dict)
    # instructions of the main loop that one warp alone runs: a block issuing bulk tensor
    # copies (UTMALDG), which the other warps branch over (:func:`_issuing_block`)
    main_loop_one_warp: int = 0
    # a warp-specialised kernel's producer loop (the innermost loop that starts bulk tensor
    # copies and holds no MMA: :func:`_producer_loop`): its instructions and UTMALDG
    producer_loop_instructions: int = 0
    producer_loop_bulk_copies: int = 0
    # instructions guarded by a never-true predicate (``@!PT LDS RZ, [RZ]``), in the kernel
    # and by opcode in its main loop: in the instruction totals (issued), in no other count
    never_executed: int = 0
    main_loop_never_executed: dict[str, int] = field(default_factory=dict)
    # bytes one thread moves to and from local memory (LDL, STL: register spills, arrays
    # ptxas keeps there) per pass of the main loop: what spills cost where the loop runs
    main_loop_local_bytes: int = 0
    # every loop of the kernel (nested ones too), in address order
    loops: tuple[SassLoop, ...] = ()

    @property
    def non_mma_per_mma(self) -> float | None:
        """Instructions beside each tensor-core MMA in the main loop (None: no MMA there)."""
        mma = self.main_loop_mma
        return (self.main_loop_instructions - mma) / mma if mma else None

    @property
    def others_non_mma_per_mma(self) -> float | None:
        """:attr:`non_mma_per_mma` for the warps that branch over the bulk copies' issue."""
        mma = self.main_loop_mma
        return ((self.main_loop_instructions - self.main_loop_one_warp - mma) / mma
                if mma else None)

    @property
    def non_fma_per_fma(self) -> float | None:
        """Instructions beside each FFMA/DFMA in the main loop (None: no FMA there)."""
        fma = self.main_loop_ffma
        return (self.main_loop_instructions - fma) / fma if fma else None

    @property
    def shared_bytes_per_mma(self) -> float | None:
        """Shared-memory bytes a warp moves per tensor-core MMA in the main loop."""
        mma = self.main_loop_mma
        return self.main_loop_shared_bytes / mma if mma else None

    def main_loop_kinds(self) -> dict[str, dict[str, int]]:
        """The main loop's opcodes grouped by :data:`KINDS` ("integer and other" the rest,
        "never executed" those guarded by a never-true predicate), most frequent kind
        first: the groups add up to the main loop's instructions."""
        grouped: dict[str, dict[str, int]] = (
            {"never executed": self.main_loop_never_executed}
            if self.main_loop_never_executed else {})
        for opcode, n in self.main_loop_opcodes.items():
            kind = next((k for k, opcodes in KINDS.items() if opcode in opcodes),
                        "integer and other")
            grouped.setdefault(kind, {})[opcode] = n
        return dict(sorted(grouped.items(), key=lambda item: -sum(item[1].values())))

    def __str__(self) -> str:
        def widths(counts: dict[int, int]) -> str:
            return ", ".join(f"{n} x {bits}-bit" for bits, n in sorted(counts.items())) or "none"

        loop = "main loop:    " if self.looped else "main body:    "
        return "\n".join([
            f"{self.kernel} ({self.arch}): {self.instructions} SASS instructions, "
            f"{self.ffma} FFMA/DFMA, {self.barriers} barriers",
            f"  {loop} {self.main_loop_instructions} instructions, "
            f"{self.main_loop_ffma} FFMA/DFMA ({self.ffma_share:.0%} FMA), "
            f"{self.main_loop_mma} HMMA/DMMA",
            f"  global loads:  {widths(self.global_load_widths)} "
            f"({self.read_only_loads} read-only)",
            f"  global stores: {widths(self.global_store_widths)}",
            f"  shared loads:  {widths(self.shared_load_widths)}",
            f"  shared stores: {widths(self.shared_store_widths)}",
            f"  async copies:  {self.async_copies} LDGSTS ({self.main_loop_async_copies} in "
            "the main loop)",
            "  load to use:   " + (", ".join(f"{kind} {n:g}" for kind, n in
                                           self.main_loop_load_use.items()) or "no loads")
            + " instructions (median, main loop)",
            *([f"  never executed: {self.never_executed} (guarded by !PT; in no count above "
               "but the instructions)"] if self.never_executed else []),
        ])


@dataclass(frozen=True)
class _Instruction:
    address: int
    opcode: str  # with modifiers, e.g. "LDG.E.128.CONSTANT"
    target: int | None  # for branches: the address jumped to
    operands: str = ""  # as printed, e.g. " R30, R12, R14, R30"
    never_executed: bool = False  # guarded by a predicate that is never true (_NEVER)
    guarded: bool = False  # under a predicate other than the always-true one


def _width(opcode: str) -> int:
    """Bits moved by a load or store: ``.128`` -> 128, ``.U8`` -> 8, no suffix -> 32.

    Only whole modifiers count, so cache hints such as ``.LTC128B`` are not taken for widths.
    """
    for modifier in opcode.split(".")[1:]:
        if modifier in _VECTOR:
            return int(modifier)
        if modifier in _SUBWORD:
            return _SUBWORD[modifier]
    return 32


def _split_functions(text: str) -> list[tuple[str, list[_Instruction]]]:
    """The listing's functions, each with its instructions and branch targets resolved."""
    functions: list[tuple[str, list[tuple[int, str | None, str, str]]]] = []
    labels: dict[str, int] = {}
    pending: list[str] = []  # labels waiting for the address of the next instruction
    for line in text.splitlines():
        if header := _FUNCTION.match(line):
            functions.append((header.group(1) or header.group(2), []))
        elif label := _LABEL.match(line):
            pending.append(label.group(1))
        elif functions and (found := _INSTRUCTION.search(line)):
            address = int(found.group(1), 16)
            labels.update(dict.fromkeys(pending, address))
            pending.clear()
            functions[-1][1].append((address, *found.group(2, 3, 4)))
    resolved = []
    for name, rows in functions:
        body = []
        for address, guard, opcode, operands in rows:
            target = None
            never = guard in _NEVER
            if (opcode.split(".")[0] == "BRA" and not never
                    and (jump := _TARGET.search(operands.strip()))):
                target = labels.get(jump.group(1)) if jump.group(1) else int(jump.group(2), 16)
            body.append(_Instruction(address, opcode, target, operands, never,
                                     guard is not None and guard not in ("PT", "UPT")))
        resolved.append((name, _strip_padding(body)))
    return resolved


def _strip_padding(body: list[_Instruction]) -> list[_Instruction]:
    """Drop the ``BRA`` to itself and the ``NOP`` alignment that end every kernel."""
    end = len(body)
    while end and (body[end - 1].opcode == "NOP" or body[end - 1].target == body[end - 1].address):
        end -= 1
    return body[:end]


def _main_loop(body: list[_Instruction]) -> tuple[list[_Instruction], bool]:
    """The loop holding the most FMAs and tensor-core MMAs (the innermost one on a tie), else
    the whole kernel.

    A loop is ``[target, branch]`` for a branch backwards; several branches back to one
    target (``continue``) close the same loop, so the last of them delimits it; a branch
    back from code after an EXIT to before it returns from an out-of-line block. A loop with
    no FMA or MMA is no main loop: where the reduction takes a single step, its unrolled
    FFMAs lie outside every loop (a copy loop may remain), and the straight run of code
    holding the most of them (the full blocks' scan, which tests nothing) stands for it, up
    to the wait for its last wgmma (:func:`_through_mma_wait`); and whether it is a loop.
    """
    loops = [loop for loop in _loops(body) if _count_fma(loop) + _count(loop, _MMA)]
    looped = bool(loops)
    if not looped:
        loops = _straight_runs(body) if _count_fma(body) + _count(body, _MMA) else [body]
    main = min(loops, key=lambda loop: (-_count_fma(loop) - _count(loop, _MMA), len(loop),
                                        loop[0].address))
    return (main, True) if looped else (_through_mma_wait(main), False)


def _through_mma_wait(run: list[_Instruction]) -> list[_Instruction]:
    """``run`` up to the last wait for warpgroup MMAs (``WARPGROUP.DEPBAR``, PTX's
    wgmma.wait_group) after its last HGMMA, where one follows: what a step's multiplies take,
    as a loop's body would. After it a one-step kernel writes its C tile, as after a main
    loop (tccg_42's run: 96 STS of the C tile after its 2 HGMMAs' wait)."""
    mmas = [n for n, i in enumerate(run) if i.opcode.split(".")[0] in _MMA]
    waits = [n for n, i in enumerate(run) if mmas and n > mmas[-1]
             and i.opcode.startswith("WARPGROUP.DEPBAR")]
    return run[:waits[-1] + 1] if waits else run


def _loops(body: list[_Instruction], past_guarded_exits: bool = False
           ) -> list[list[_Instruction]]:
    """The kernel's loops, ``[target, last branch back to it]`` each (:func:`_main_loop`).
    With ``past_guarded_exits`` an EXIT under a predicate does not end the kernel's code: a
    branch back over it closes a loop (a write's loop that ends the threads past a partial
    tile: a warpgroup GEMM's ``@!P0 EXIT; BRA`` back). The main loop is read without it, as
    the search's SASS tie-break has read it (such a loop holds no MMA)."""
    ends: dict[int, int] = {}
    exit_at = None  # the latest EXIT so far: code after it is out of line
    for instruction in body:
        if instruction.opcode.split(".")[0] == "EXIT" and not (
                past_guarded_exits and instruction.guarded):
            exit_at = instruction.address
        # a branch back from out-of-line code over an EXIT (an mbarrier wait's retry,
        # placed after the kernel's end, returning into it) closes no loop
        returns = exit_at is not None and instruction.target is not None and (
            instruction.target < exit_at < instruction.address)
        if instruction.target is not None and instruction.target < instruction.address \
                and not returns:
            ends[instruction.target] = max(ends.get(instruction.target, 0), instruction.address)
    return [[i for i in body if start <= i.address <= end] for start, end in ends.items()]


def _producer_loop(body: list[_Instruction]) -> list[_Instruction]:
    """A warp-specialised kernel's producer loop: the shortest loop that starts bulk tensor
    copies and holds no MMA (nvcc wraps each UTMALDG in a short loop of its own that makes
    its operands uniform: a loop holding one copy and no mbarrier arrival is such a wrapper,
    not the producer's); none elsewhere."""
    loops = [loop for loop in _loops(body) if _count(loop, _BULK_COPY) and not _count(loop, _MMA)
             and _count(loop, {"SYNCS"})]
    return min(loops, key=len, default=[])


def _issuing_block(loop: list[_Instruction]) -> int:
    """Instructions of ``loop`` that a forward branch skips where what it skips starts bulk
    tensor copies and no MMA: one thread's issue, which every other warp branches over."""
    inside: set[int] = set()
    for branch in loop:
        if branch.target is not None and branch.target > branch.address:
            block = [i for i in loop if branch.address < i.address < branch.target]
            opcodes = {i.opcode.split(".")[0] for i in block}
            if _BULK_COPY & opcodes and not _MMA & opcodes:
                inside.update(i.address for i in block)
    return len(inside)


def _straight_runs(body: list[_Instruction]) -> list[list[_Instruction]]:
    """The kernel cut into basic blocks: each ends at a branch and starts at a branch target."""
    targets = {i.target for i in body if i.target is not None}
    runs: list[list[_Instruction]] = [[]]
    for instruction in body:
        if instruction.address in targets and runs[-1]:
            runs.append([])
        runs[-1].append(instruction)
        if instruction.opcode.split(".")[0] in _JUMPS and not instruction.never_executed:
            runs.append([])
    return [run for run in runs if run] or [body]


def _load_use(loop: list[_Instruction]) -> dict[str, float]:
    """Per load opcode, the median number of instructions from each load of ``loop`` to the
    first later instruction of the loop that reads a register the load writes (its first
    operand, and the next ones of a 64- or 128-bit load); loads whose value the loop body
    does not read again are left out. Predicates and the zero register are not registers."""
    reads = []  # the registers each instruction reads
    for instruction in loop:
        operands = instruction.operands.split(",")
        read = operands if instruction.opcode.split(".")[0] in _STORES else operands[1:]
        reads.append(set() if instruction.never_executed
                     else {int(r) for r in _REGISTER.findall(",".join(read))})
    distances: dict[str, list[int]] = {}
    for n, load in enumerate(loop):
        kind = load.opcode.split(".")[0]
        first = _REGISTER.match(load.operands.split(",")[0].strip())
        if kind not in _LOADS or not first or load.never_executed:
            continue
        start = int(first.group(1))
        written = set(range(start, start + max(1, _width(load.opcode) // 32)))
        distance = next((d for d, read in enumerate(reads[n + 1:], 1) if written & read), None)
        if distance is not None:
            distances.setdefault(kind, []).append(distance)
    return {kind: statistics.median(found) for kind, found in sorted(distances.items())}


def _count(body: list[_Instruction], opcodes: set[str]) -> int:
    """Instructions of ``body`` with one of ``opcodes`` that may execute."""
    return sum(i.opcode.split(".")[0] in opcodes and not i.never_executed for i in body)


def _count_fma(body: list[_Instruction]) -> int:
    return _count(body, _FMA)


def _mma_macs(opcode: str) -> int:
    """The multiply-adds a warp's MMA instruction ``opcode`` does: its shape is its first
    modifier, M x N x K (``HGMMA.64x128x16``: a warpgroup's, a quarter of it a warp's) or
    the digits of M (16 or 8), N (8) and K (``HMMA.16816``, ``HMMA.1688``, ``DMMA.884``);
    0 for a shape written otherwise (the main loop's work is then unknown)."""
    parts = opcode.split(".")
    shape = parts[1] if len(parts) > 1 else ""
    if "x" in shape:
        return math.prod(map(int, shape.split("x"))) // _WARPGROUP_WARPS
    m = 16 if shape.startswith("16") else 8
    rest = shape[len(str(m)):]
    if not rest.isdigit() or len(rest) < 2:
        return 0
    return m * int(rest[0]) * int(rest[1:])


def _macs(body: list[_Instruction]) -> int:
    """The multiply-adds a warp's MMAs of ``body`` do; 0 where one's shape is unknown."""
    each = [_mma_macs(i.opcode) for i in body if i.opcode.split(".")[0] in _MMA]
    return sum(each) if all(each) else 0


def _shared_bytes(opcode: str) -> int:
    """Bytes a warp moves through shared memory with one instruction."""
    parts = opcode.split(".")
    if parts[0] == "LDSM":
        return _MATRIX_BYTES * (int(parts[-1]) if parts[-1] in ("2", "4") else 1)
    return WARP * _width(opcode) // 8 if parts[0] in _SHARED else 0


def _report(name: str, arch: str, body: list[_Instruction]) -> SassReport:
    """The counts of ``body``: its instruction totals hold the never-executed instructions
    (they take issue slots), every count by kind, width or bytes leaves them out."""
    executed = [i for i in body if not i.never_executed]
    widths: dict[str, Counter[int]] = {field: Counter() for field in _MEMORY.values()}
    for instruction in executed:
        if field := _MEMORY.get(instruction.opcode.split(".")[0]):
            widths[field][_width(instruction.opcode)] += 1
    loop, looped = _main_loop(body)
    producer = _producer_loop(body)
    loop_executed = [i for i in loop if not i.never_executed]
    loop_fma = _count_fma(loop)
    return SassReport(
        kernel=_demangle(name),
        arch=arch,
        instructions=len(body),
        ffma=_count_fma(body),
        main_loop_instructions=len(loop),
        main_loop_ffma=loop_fma,
        ffma_share=loop_fma / len(loop) if loop else 0.0,
        **{field: dict(sorted(counts.items())) for field, counts in widths.items()},
        barriers=_count(body, {"BAR"}),
        read_only_loads=sum(i.opcode.startswith("LDG") and "CONSTANT" in i.opcode.split(".")
                            for i in executed),
        mma=_count(body, _MMA),
        main_loop_mma=_count(loop, _MMA),
        main_loop_mma_macs=_macs(loop_executed),
        async_copies=_count(body, _ASYNC_COPY),
        main_loop_async_copies=_count(loop, _ASYNC_COPY),
        bulk_copies=_count(body, _BULK_COPY),
        register_limits=tuple(sorted(int(i.operands.split(",")[-1], 16) for i in body
                                     if i.opcode.split(".")[0] == "USETMAXREG")),
        main_loop_opcodes=_opcodes(loop_executed),
        main_loop_shared_bytes=sum(_shared_bytes(i.opcode) for i in loop_executed),
        main_loop_shared_load_widths=dict(sorted(Counter(
            _width(i.opcode) for i in loop_executed if i.opcode.split(".")[0] == "LDS").items())),
        looped=looped,
        main_loop_one_warp=_issuing_block(loop),
        producer_loop_instructions=len(producer),
        producer_loop_bulk_copies=_count(producer, _BULK_COPY),
        never_executed=len(body) - len(executed),
        main_loop_never_executed=_opcodes([i for i in loop if i.never_executed]),
        main_loop_load_use=_load_use(loop),
        main_loop_local_bytes=sum(_width(i.opcode) // 8 for i in loop_executed
                                  if i.opcode.split(".")[0] in _LOCAL),
        loops=tuple(sorted((SassLoop(
            start=found[0].address, end=found[-1].address, instructions=len(found),
            mma=_count(found, _MMA),
            store_bits=sum(_width(i.opcode) for i in found
                           if i.opcode.split(".")[0] == "STG" and not i.never_executed),
            producer=found == producer) for found in _loops(body, past_guarded_exits=True)),
            key=lambda loop: (loop.start, -loop.end))),
    )


def _opcodes(body: list[_Instruction]) -> dict[str, int]:
    """``body``'s opcodes without modifiers, most frequent first."""
    return dict(Counter(i.opcode.split(".")[0] for i in body).most_common())


def parse_sass(text: str, arch: str) -> list[SassReport]:
    """One report per function in a ``cuobjdump -sass`` or ``nvdisasm -c`` listing."""
    return [_report(name, arch, body) for name, body in _split_functions(text)]


def find_disassembler() -> str | None:
    """nvdisasm or cuobjdump: on PATH, beside nvcc, in the CUDA home or a pip wheel's bin."""
    nvcc = find_nvcc()
    folders = [Path(nvcc).parent] if nvcc else []
    folders += [Path(home, "bin") for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda")
                if home]
    # The nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump wheels install into nvidia/cu*/bin.
    spec = importlib.util.find_spec("nvidia")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folders += sorted(Path(location).glob("cu*/bin"), reverse=True)
    for tool in _TOOLS:
        if found := shutil.which(tool):
            return found
        for folder in folders:
            candidate = folder / tool
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def sass_report(source: str, arch: str = "sm_90") -> list[SassReport]:
    """Compile ``source`` as :func:`~treduda.run.nvcc.compile_cuda` does; one report per kernel.

    Device functions that the listing shows apart from a kernel are left out: only the entry
    functions ptxas names are reported.
    """
    disassembler = find_disassembler()
    if disassembler is None:
        raise BackendUnavailable(
            "nvdisasm (or cuobjdump) was not found on PATH (nor in $CUDA_HOME/bin); install the "
            "CUDA toolkit, or `pip install nvidia-cuda-nvdisasm`, to inspect kernels' SASS"
        )
    with cubin(source, arch) as (binary, log):
        entries = {report.kernel for report in parse_ptxas(log)}
        return _entries(disassembler, binary, entries, cuda_target(source, arch))


def _entries(disassembler: str, binary: Path, entries: Collection[str], arch: str
             ) -> list[SassReport]:
    """The SASS reports of the entry functions ``entries`` (those ptxas's log names) in the
    cubin ``binary``."""
    listing = _disassembled(disassembler, binary.read_bytes(), ", ".join(sorted(entries)))
    return [report for report in parse_sass(listing, arch) if report.kernel in entries]


# The last 64 kept, by the disassembler and the cubin: a kernel compiled again
# (:func:`treduda.run.nvcc.cubin` keeps its cubin) is not disassembled again, and nvdisasm
# spends a third of a CPU second on any cubin.
@once_per_key(64)
def _disassembled(disassembler: str, cubin_bytes: bytes, names: str) -> str:
    """The disassembler's listing of ``cubin_bytes``, the cubin of the kernels ``names``."""
    tool = Path(disassembler).name
    with tempfile.TemporaryDirectory(prefix="treduda-sass-") as tmp:
        binary = Path(tmp, "k.cubin")
        binary.write_bytes(cubin_bytes)
        listing = run_tool([disassembler, *_TOOL_ARGS[tool], str(binary)], f"{tool} failed")
    if listing.returncode != 0:
        raise CompileError(f"{tool} failed to disassemble kernel {names}", log=listing.stderr)
    return listing.stdout


@dataclass(frozen=True)
class Compilation:
    """What compiling one kernel says: ptxas's report, and its SASS's (None where neither
    nvdisasm nor cuobjdump is found)."""

    ptxas: CudaReport
    sass: SassReport | None

    @property
    def name(self) -> str:
        return self.ptxas.name


def compile_with_sass(sources: Sequence[str], arch: str = "sm_90",
                      read: Collection[str] | None = None) -> list[list[Compilation]]:
    """:func:`~treduda.run.nvcc.compile_cuda_batch` with the SASS report of each kernel of the
    sources in ``read`` (all where None) beside ptxas's: one disassembly per nvcc call whose
    cubin holds such a kernel, none for the others (nvdisasm spends about half a CPU second on
    any cubin, and only the SIMT model reads the SASS)."""
    wanted = None if read is None else {name for source in read for name in kernel_names(source)}
    return compile_cuda_batch(sources, arch, functools.partial(_compilations,
                                                               find_disassembler(), arch, wanted))


def _compilations(disassembler: str | None, arch: str, wanted: set[str] | None, binary: Path,
                  log: str) -> list[Compilation]:
    reports = parse_ptxas(log)  # once: the entries disassembled are those it names
    entries = {r.kernel for r in reports}
    read = [r.kernel for r in reports if wanted is None or r.kernel in wanted]
    sass = ({r.kernel: r for r in _entries(disassembler, binary, entries, arch)}
            if disassembler and read else {})
    return [Compilation(report, sass.get(report.kernel) if report.kernel in read else None)
            for report in reports]

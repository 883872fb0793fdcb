"""The warpgroup mapping's warp specialisation (``producer``): a block of ``G`` consumer
warpgroups and one producer warpgroup after them, ``128 (G + 1)`` threads, each role in a
loop over the steps of its own.

The producer's first thread, per step, waits until the step's stage is *empty* (the phase
of the stage's previous round on its empty mbarrier: none on the first round, where a
fresh barrier's phase "before" counts as completed; rounds counted from the first step of a
split reduction's part, as every wait's), expects the step's bytes on the stage's
*full* mbarrier and starts its bulk tensor copies (:mod:`.warpgroup_tma`); so it runs up to
``S`` steps ahead of the MMAs, bounded by the empty barriers alone. The consumers, per step,
wait for the full phase, start their wgmmas, wait until ``P`` groups are pending (``P`` 1
from two stages: the step before retires while this one's MMAs are issued) and each arrives
on the empty mbarrier of the stage those retired MMAs read (CUTLASS's Hopper "warp
specialized" main loops pair their barriers alike). No block barrier is left in the loop;
the consumers' write through the C tile synchronises them alone, on a named barrier (``bar.sync
1, 128 G``: :class:`ir.Barrier`'s ``threads``), while the producer, done, has left.

With two consumer warpgroups each role sets its registers (``setmaxnreg``: PTX ISA,
"Miscellaneous Instructions: setmaxnreg"): the producer gives all but :data:`PRODUCER_REGISTERS`
up and the consumers take what the register file then leaves them (232 of 65536 for 384
threads, where each thread started with 168). One consumer warpgroup's 256 threads may use
255 registers already: no rebalancing there.

Schedule: the warpgroup kernel's, a role dimension ahead of the phase (0: the mbarriers'
initialisation and the block's barrier after it; 1: the producer; 2: the consumers), so that
isl scans each role's loop on its own; the two thread tests it writes around them become one
role split (:func:`treduda.codegen.role_split.joined_roles`), which the emulator runs at once
and the OpenCL twin step by step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from treduda.codegen import ir
from treduda.codegen.simplify import plus, remainder
from treduda.polyhedral.lower import Kind, Program
from treduda.polyhedral.strategy import Role, Scheduled

from .tensorcore_kernel import A_TILE, B_TILE, STAGE_COPY, STAGE_MMA
from .warpgroup_kernel import WarpgroupBuilder
from .warpgroup_tma import BARRIERS

EMPTY = "td_empty"  # the mbarriers, one per stage: the consumers have read the stage
PRODUCER_REGISTERS = 40  # the producer's registers per thread, as CUTLASS's Hopper kernels
REGISTER_FILE = 65536  # 32-bit registers of an SM, one block's alone (launch bounds' 1)
MAX_REGISTERS = 255  # a thread's (the ISA's limit)
SETUP, PRODUCER, CONSUMERS = 0, 1, 2  # the role dimension's values


def consumer_registers(warpgroups: int) -> int | None:
    """What each consumer thread's ``setmaxnreg.inc`` asks for (a multiple of 8, the
    instruction's rule): the register file less the producer's, shared by ``warpgroups``
    consumer warpgroups; None where the block's threads may use all they can at entry."""
    if REGISTER_FILE // (ir.WARPGROUP * (warpgroups + 1)) >= MAX_REGISTERS:
        return None
    share = (REGISTER_FILE - ir.WARPGROUP * PRODUCER_REGISTERS) // (ir.WARPGROUP * warpgroups)
    return min(share, MAX_REGISTERS) // 8 * 8


class ProducerBuilder(WarpgroupBuilder):
    """Builds one warp-specialised warpgroup kernel (see the module's doc): ``threads``
    are the consumers', who deal the copies of the write among them; the producer's
    warpgroup follows them."""

    def __init__(self, program: Program, params: Mapping[str, Any]):
        super().__init__(program, params)
        self.role = CONSUMERS
        self.issuer = str(self.threads)  # the producer's first thread
        self.lead = 0  # the producer runs ahead on its own: no step lead in the consumers
        self.mma_pending = 1 if self.stages >= 2 else 0

    def point(self, thread: str, tail: Sequence[str], prefix: Sequence[str] | None = None
              ) -> str:
        return super().point(thread, [str(self.role), *tail], prefix)

    def run(self) -> Scheduled:
        """The roles in the schedule's order: the setup, the producer, the consumers."""
        self.role = SETUP
        everyone = f"0 <= t < {self.threads + ir.WARPGROUP}"
        for barrier, arrivals in ((BARRIERS, 1), (EMPTY, self.threads)):
            self.add(f"init_{barrier}", Kind.SYNC, [*self.prefix(), "s"],
                     f"{self.prefix_bounds()} and 0 <= s < {self.stages}",
                     ir.MbarrierInit(ir.Element(barrier, ()), arrivals),
                     [ir.Element(barrier, (ir.Var("s"),))],
                     self.point("0", ["0"] * 5 + [str(int(barrier == EMPTY)), "s"]))
        self.add("sync_init", Kind.SYNC, [*self.prefix(), "t"],
                 f"{self.prefix_bounds()} and {everyone}", ir.Barrier(), [],
                 self.point("t", ["0"] * 5 + ["2", "0"]))
        self.role = PRODUCER
        self.registers_of_role("producer", f"{self.threads} <= t < {self.threads + ir.WARPGROUP}",
                               PRODUCER_REGISTERS, False)
        parity = remainder(plus(self.rounds(), ir.Int(1)), 2)
        self.add("empty_wait", Kind.SYNC, [*self.prefix(), "ks"],
                 f"{self.prefix_bounds()} and {self.step_bounds()}",
                 ir.MbarrierWait(ir.Element(EMPTY, ()), parity),
                 [ir.Element(EMPTY, self.stage_of(ir.Var("ks")))],
                 self.point(self.issuer, ["1", "ks", str(STAGE_COPY), "-1", "0", "0", "0"]))
        self.copy(self.a, A_TILE, "m", 0, "ks")  # bulk copies: see WarpgroupBuilder.copy
        self.copy(self.b, B_TILE, "n", 1, "ks")
        self.role = CONSUMERS
        self.registers_of_role("consumer", f"0 <= t < {self.threads}",
                               consumer_registers(self.threads // ir.WARPGROUP), True)
        self.fill()
        self.sync("wait", ["1", "ks", str(self.wait_stage()), "0", "1", "0", "0"], True)
        self.fragments()
        self.release()
        self.write()
        return self.scheduled()

    def registers_of_role(self, role: str, threads: str, count: int | None,
                          increase: bool) -> None:
        """``<role>_registers[P, t]``: each of the role's threads sets its registers first
        (none where :func:`consumer_registers` says the block needs no rebalancing)."""
        if consumer_registers(self.threads // ir.WARPGROUP) is None or count is None:
            return
        self.add(f"{role}_registers", Kind.SYNC, [*self.prefix(), "t"],
                 f"{self.prefix_bounds()} and {threads}", ir.SetMaxRegisters(count, increase),
                 [], self.point("t", ["0"] * 6 + ["-1"]))

    def release(self) -> None:
        """``release[P, ks, t]``: each consumer thread, once its MMAs of step ``ks - P``
        retired (``wgmma.wait_group P``), arrives on that step's stage's empty mbarrier."""
        pending = self.mma_pending
        step = plus(ir.Var("ks"), ir.Int(-pending)) if pending else ir.Var("ks")
        first = f"{self.chunk}*part" if self.parts > 1 else "0"  # the part's first step
        self.add("release", Kind.SYNC, [*self.prefix(), "ks", "t"],
                 f"{self.prefix_bounds()} and {self.step_bounds()} and "
                 f"ks >= {first} + {pending} and 0 <= t < {self.threads}",
                 ir.MbarrierArrive(ir.Element(EMPTY, ())),
                 [ir.Element(EMPTY, self.stage_of(step))],
                 self.point("t", ["1", "ks", str(STAGE_MMA), "4", "0", "0", "0"]))

    def stage_of(self, step: ir.Expr) -> tuple[ir.Expr, ...]:
        """The stage that step ``step`` fills."""
        return (remainder(step, self.stages),) if self.stages > 1 else (ir.Int(0),)

    def sync(self, name: str, tail: Sequence[str], stepped: bool,
             body: ir.Barrier | ir.CommitCopies | ir.WaitCopies | None = None,
             beyond: int = 0) -> None:
        """The consumers' barriers are theirs alone (named: the producer takes no part)."""
        if body is None or isinstance(body, ir.Barrier):
            body = ir.Barrier(self.threads)
        super().sync(name, tail, stepped, body, beyond)

    def locals(self) -> dict[str, ir.Local]:
        return {**super().locals(),
                EMPTY: ir.Local(EMPTY, ir.Space.MBARRIER, (self.stages,))}

    def scheduled(self) -> Scheduled:
        """The base's, with the role dimension ahead of the phase and the producer's
        warpgroup in the block."""
        scheduled = super().scheduled()
        phase = scheduled.roles.index(Role.PHASE)
        return replace(scheduled,
                       roles=(*scheduled.roles[:phase], Role.PHASE, *scheduled.roles[phase:]),
                       unroll=tuple(d + 1 for d in scheduled.unroll),
                       block=(self.threads + ir.WARPGROUP, 1, 1))

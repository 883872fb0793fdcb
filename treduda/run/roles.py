"""The emulator's warp-specialised roles: the two branches of an if/else that splits a block's
threads and waits on mbarriers (a producer warpgroup issuing bulk copies, consumer warpgroups
multiplying what landed) run at once, as they do on a GPU, not one after the other.

The emulator walks a block's threads in lock step; a producer's loop run to its end first
would wait for a consumer's arrival that has not come, and report that phase as never
completing. So each branch runs in a Python thread of its own, and one baton lets exactly
one of them run at a time: a branch holds it until it finishes or waits for an mbarrier
phase that nothing in flight completes (:meth:`Roles.wait_for_others`), then hands it to the
other. The switch happens only inside such a wait, so the block's state is never seen half
updated; each branch keeps its own loop iterators. A phase is reported as never completing
only when every branch still running waits and none changed an mbarrier since the last hand
over: this is one interleaving of the many a GPU allows, the one that lets the producer run
as far ahead as its waits allow (where a missing wait lets it overwrite a tile).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codegen import ir

if TYPE_CHECKING:
    from .emulator import _Block


class Roles:
    """The branches of one role split (:func:`ir.is_role_split`) of ``block``, run at once."""

    def __init__(self, block: _Block):
        self.block = block
        self.turn = threading.Condition()
        self.running: int | None = None  # the branch holding the baton
        self.live: set[int] = set()
        self.waiting: set[int] = set()  # branches that handed the baton over in a wait
        self.changes = 0  # mbarrier changes (arrivals, landings, inits) so far
        self.seen: dict[int, int] = {}  # changes when each waiting branch handed over
        self.envs: dict[int, dict[str, Any]] = {}
        self.failure: BaseException | None = None

    def run(self, branches: list[tuple[ir.Stmt, np.ndarray]],
            walk: Callable[[ir.Stmt, np.ndarray], None]) -> None:
        """Walk each branch with its threads, handing the baton over in waits."""
        block, outer = self.block, self.block.roles
        block.roles = self
        start = dict(block.env)
        self.live = set(range(len(branches)))
        self.envs = {n: dict(start) for n in self.live}
        workers = [threading.Thread(target=self._branch, args=(n, body, active, walk))
                   for n, (body, active) in enumerate(branches)]
        with self.turn:
            self.running = 0
            block.env = self.envs[0]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        block.env, block.roles = start, outer
        if self.failure is not None:
            raise self.failure

    def _branch(self, number: int, body: ir.Stmt, active: np.ndarray,
                walk: Callable[[ir.Stmt, np.ndarray], None]) -> None:
        with self.turn:
            self.turn.wait_for(lambda: self.running == number)
        try:
            with np.errstate(over="ignore" if self.block.integer else "warn"):
                walk(body, active)
        except BaseException as error:  # raised again in the block's own thread
            self.failure = self.failure or error
        with self.turn:
            self.live.discard(number)
            self.waiting.discard(number)
            self._hand_over(number)

    def _hand_over(self, number: int) -> None:
        """Give the baton to the next live branch after ``number`` (the caller holds the
        condition)."""
        others = sorted(self.live - {number})
        if not others:
            self.running = number if number in self.live else None
        else:
            self.running = next((n for n in others if n > number), others[0])
            self.block.env = self.envs[self.running]
        self.turn.notify_all()

    def changed(self) -> None:
        """An mbarrier changed: a waiting branch may now go on."""
        self.changes += 1

    def wait_for_others(self) -> bool:
        """The running branch cannot go on until another changes an mbarrier: hand the
        baton over and take it back when it is this branch's turn again. False where no
        other branch could (all that still run wait, none changed anything since)."""
        with self.turn:
            number = self.running
            self.waiting.add(number)
            self.seen[number] = self.changes
            stuck = all(n in self.waiting and self.seen[n] == self.changes
                        for n in self.live if n != number)
            if stuck or self.live == {number} or self.failure is not None:
                self.waiting.discard(number)
                return False
            self._hand_over(number)
            self.turn.wait_for(lambda: self.running == number)
            self.waiting.discard(number)
            return True

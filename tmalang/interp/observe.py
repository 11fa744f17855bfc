"""What the interpreter tells an observer about synchronisation, as it happens.

The interpreter defines every op; an observer only listens. `tmalang.verify` records, through
this interface, each warp's sequence of synchronisation events (arrivals, bytes, waits,
rendezvous, named barriers, transfers issued) in one run, and then explores every interleaving
of those sequences. The calls are made where the state changes, so nothing reaches the state
except through a call below: the observer sees all of it.

A barrier is named `(cta, name, stage)`; `phase` is the barrier's count of completed phases when
the event takes effect (for a wait: the phase it observed).
"""

from __future__ import annotations


class Observer:
    """Does nothing: the interpreter's default."""

    def acting(self, actor: tuple) -> None:
        """The scheduler hands the next step to `actor`: ("warp", CTA, Warp) or ("transfer", Transfer)."""

    def issued(self, transfer) -> None:
        """The acting warp put `transfer` in flight (a TMA load or store, a push, an MMA commit)."""

    def init(self, bar: tuple, count: int) -> None:
        """mbarrier.init with `count` arrivals per phase."""

    def arrive(self, bar: tuple, count: int, phase: int) -> None:
        """`count` arrivals land in `phase`."""

    def tx(self, bar: tuple, delta: int, phase: int) -> None:
        """The transaction count moves by `delta` bytes: + expect_tx, - bytes landed."""

    def wait(self, bar: tuple, parity: int, phase: int) -> None:
        """A try_wait.parity passed, observing completed phase `phase` (-1: the free first pass)."""

    def meet(self, key: tuple, members: tuple, leaving: bool) -> None:
        """A warp reaches (leaving=False) or leaves (True) a rendezvous of `members`."""

    def named(self, key: tuple, count: int, phase: int, leaving: bool) -> None:
        """A warp's 32 threads arrive at named barrier `key` = (cta, id) expecting `count`
        threads, in `phase`; leaving=True when a bar.sync leaves that phase."""


NO_OBSERVER = Observer()

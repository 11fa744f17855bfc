"""The machine state the interpreter evolves: mbarriers, the TMA engine, bulk groups, smem.

Semantics follow the PTX ISA: an mbarrier phase completes when its pending arrivals and its
transaction count both reach zero (the tx-count may go transiently negative when bytes land
before expect_tx); `try_wait.parity p` succeeds once the phase with parity p has completed,
i.e. while the current phase's parity differs from p.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..diagnostics import Span


class ProtocolError(Exception):
    """A protocol violation found while interpreting; rendered by interp/__init__.py."""

    def __init__(self, code: str, message: str, span: Span | None, notes: list[str]):
        super().__init__(message)
        self.code, self.message, self.span, self.notes = code, message, span, notes


@dataclass
class Blocked:
    """What a warp that cannot proceed yields to the scheduler."""

    op: object
    what: str                        # human description: "mbarrier ring.full[2] parity 1"
    ready: object                    # callable: True once the warp may proceed


@dataclass
class Mbarrier:
    name: str
    stage: int
    count: int
    initialized: bool = False
    phase: int = 0              # parity of the phase in progress
    pending: int = 0            # arrivals still missing in this phase
    tx: int = 0                 # transaction bytes still expected (may go negative)
    completed: int = 0          # phases completed so far

    def init(self, count: int) -> None:
        self.count, self.pending, self.tx, self.phase, self.initialized = count, count, 0, 0, True

    def phase_done(self, parity: int) -> bool:
        return self.phase != (parity & 1)

    def settle(self) -> bool:
        """Complete the phase if nothing is pending; True when a phase completed."""
        if self.pending == 0 and self.tx == 0:
            self.phase ^= 1
            self.completed += 1
            self.pending = self.count
            return True
        return False

    def describe(self) -> str:
        state = f"phase {self.completed} (parity {self.phase}) in progress, {self.pending} of {self.count} arrivals missing"
        return state + (f", {self.tx} tx bytes outstanding" if self.tx else "")


@dataclass
class Transfer:
    """One TMA operation in flight."""

    kind: str                   # "load" | "store"
    issuer: int                 # warp that issued it
    span: Span | None
    apply: object               # callable performing the data movement
    barrier: Mbarrier | None = None
    nbytes: int = 0
    group: "BulkGroup | None" = None
    due: int = 0                # scheduler step at which the engine may complete it
    issued: int = 0
    agent: tuple | None = None  # its identity for race detection
    finished: bool = False


@dataclass
class BulkGroup:
    transfers: list[Transfer] = field(default_factory=list)
    committed: bool = False

    def done(self) -> bool:
        """Whether this run's engine has finished its stores (they complete atomically here); a
        wait_group learns what a group did only where the protocol promises it (interp/bulk.py)."""
        return all(t.finished for t in self.transfers)


@dataclass
class Smem:
    """The CTA's dynamic shared memory as bytes, viewed per buffer stage as typed tiles."""

    data: np.ndarray

    @staticmethod
    def allocate(nbytes: int) -> "Smem":
        # poison: an interpreter read of never-written smem shows up as NaN/garbage, not zeros
        return Smem(np.full(nbytes, 0xFF, dtype=np.uint8))

    def tile(self, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = int(np.prod(shape)) * dtype.itemsize
        return self.data[offset : offset + nbytes].view(dtype).reshape(shape)

"""Ordering of global memory: TMA stores against later loads and stores of the same elements.

A TMA store's writes to global memory complete only at `cp.async.bulk.wait_group N` without
`.read` in its issuing thread (`wait_group read` says only that the store has read its shared
source). Each store therefore writes global memory as an agent of its own, which the issuing
warp acquires at a full wait_group (interp/bulk.py) and passes on through barrier phases and
syncs like any other knowledge. A TMA load reading, or a store writing, elements that a store
wrote must happen after that write; otherwise it may read stale data, or the two writes may land
in either order (E421).

A TMA reduce writes too, but each element's read-modify-write is atomic (PTX: element-wise
atomic, .relaxed.gpu), so two reduces never race, whatever their operations and CTAs; a reduce
and a plain store, or a reduce and a load, of the same elements do, unless ordered.

Only tensors that some TMA store of the kernel writes are tracked, and within them each access
is kept under its box's region, found through a grid of the first box's shape. A box with
element strides touches every stride-th element of its range, and its region says so: two such
boxes that interleave (even and odd rows) share no element. CTAs of different clusters share no
barrier, so their accesses to the same elements are never ordered.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .shares import covers, overlaps
from .state import ProtocolError


@dataclass
class GlobalAccess:
    agent: object
    epoch: int
    write: bool
    cluster: int
    span: object
    who: str
    reduce: bool = False      # a TMA reduce: atomic per element, so it never races another reduce


@dataclass
class GlobalMemory:
    accesses: dict = field(default_factory=dict)     # (tensor, region) -> [GlobalAccess]
    grids: dict = field(default_factory=dict)        # tensor -> cell extents
    cells: dict = field(default_factory=dict)        # (tensor, cell) -> {region}
    counter: int = 0                                 # the tile counter of dynamic tile loops (interp/claims.py)
    claims: int = 0                                  # claims made on it in this launch

    def access(self, races, cluster: int, tensor: str, region: tuple, agent, write: bool, span, who: str,
               reduce: bool = False, steps: tuple = ()) -> None:
        """Check one TMA access of `region` (((start, stop), ...) per dim; `steps`: the box's element
        strides) against earlier ones."""
        region = _stepped(region, steps)
        clock = races.clock(agent)
        current = GlobalAccess(agent, clock[agent], write, cluster, span, who, reduce)
        for other in self._near(tensor, region):
            if not overlaps(("region", other), ("region", region)):
                continue
            kept = []
            for old in self.accesses[(tensor, other)]:
                same = old.cluster == cluster and old.agent == agent   # agents are numbered per cluster
                ordered = old.cluster == cluster and clock.get(old.agent, 0) >= old.epoch
                atomic = reduce and old.reduce
                if not ordered and (write or old.write) and not same and not atomic:
                    raise _race(tensor, region, old, current)
                if not (ordered and _hides(current, old) and covers(("region", region), ("region", other))):
                    kept.append(old)
            self.accesses[(tensor, other)] = kept
        self._add(tensor, region, current)

    def _grid(self, tensor: str, region: tuple) -> tuple:
        return self.grids.setdefault(tensor, tuple(max(1, d[1] - d[0]) for d in region))

    def _cells(self, tensor: str, region: tuple):
        grid = self._grid(tensor, region)
        return itertools.product(*(range(d[0] // g, (d[1] - 1) // g + 1) for d, g in zip(region, grid)))

    def _near(self, tensor: str, region: tuple) -> set:
        near = set()
        for cell in self._cells(tensor, region):
            near |= self.cells.get((tensor, cell), set())
        return near

    def _add(self, tensor: str, region: tuple, access: GlobalAccess) -> None:
        if (tensor, region) not in self.accesses:
            self.accesses[(tensor, region)] = []
            for cell in self._cells(tensor, region):
                self.cells.setdefault((tensor, cell), set()).add(region)
        self.accesses[(tensor, region)].append(access)


def _stepped(region: tuple, steps: tuple) -> tuple:
    """(start, stop, step) for each dimension a strided box takes every step-th element of."""
    if not any(step > 1 for step in steps):
        return region
    return tuple(d if step == 1 else (d[0], d[1], step) for d, step in zip(region, steps))


def _hides(new: GlobalAccess, old: GlobalAccess) -> bool:
    """Whether `new`, ordered after `old` and covering it, stands for it against later accesses:
    a plain write conflicts with everything `old` conflicts with; a reduce only with what a
    reduce `old` conflicts with (a later reduce would not race a reduce, but does race a store)."""
    return new.write and (not new.reduce or old.reduce)


def _race(tensor: str, region: tuple, first: GlobalAccess, second: GlobalAccess) -> ProtocolError:
    def verb(a: GlobalAccess) -> str:
        return "reduces into" if a.reduce else "writes" if a.write else "reads"
    where = first.span.location() if first.span else "?"
    elements = ", ".join(":".join(map(str, d)) for d in region)
    why = ("CTAs of different clusters share no barrier: nothing orders their accesses" if first.cluster != second.cluster
           else "a TMA store's writes to global memory complete only at its thread's `wait_group N` without "
                "`read` (`wait_group read` only frees its shared source); whoever accesses the elements next "
                "must be ordered after that wait (a barrier phase or sync)")
    return ProtocolError(
        "E421", f"global memory race on {tensor}[{elements}]: {second.who} {verb(second)} it, unordered with "
        f"{first.who}, which {verb(first)} it", second.span,
        [f"the other access is at {where}", why])

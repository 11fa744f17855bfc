"""Ordering of global memory: TMA stores against later loads and stores of the same elements.

A TMA store's writes to global memory complete only at `cp.async.bulk.wait_group N` without
`.read` in its issuing thread (`wait_group read` says only that the store has read its shared
source). Each store therefore writes global memory as an agent of its own, which the issuing
warp acquires at a full wait_group (interp/bulk.py) and passes on through barrier phases and
syncs like any other knowledge. A TMA load reading, or a store writing, elements that a store
wrote must happen after that write; otherwise it may read stale data, or the two writes may land
in either order (E421).

A TMA reduce writes too, but each element's read-modify-write is atomic (PTX: element-wise
atomic, .relaxed.gpu), so two reduces of one operation never race, whatever their CTAs: they
commute. Reduces of two operations do not (max then add is not add then max), so they race
like two stores unless ordered; so do a reduce and a plain store, or a reduce and a load.

Tiles: an access belongs to the tile its warp is walking when it issues it (`tile`, the linear
tile of the tile loop, `%I.tile` of passes/lower_tile_walk.py and passes/claim_tiles.py; None
outside tile loops). The interpreter runs each tile in one CTA of one grid, but the GPU may run
any two tiles in two CTAs of two clusters, whatever the grid size: so only accesses of one tile
are ever ordered (by the clocks, within a cluster); two accesses of different tiles, or of a
tile and code outside the tile loop, are unordered even when this run put both in one CTA and
that CTA's own waits ordered them.

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
    reduce: str = ""          # a TMA reduce's operation, atomic per element: reduces of one operation commute
    tile: object = None       # the tile it belongs to (None: outside tile loops); see the docstring


@dataclass
class GlobalMemory:
    accesses: dict = field(default_factory=dict)     # (tensor, region) -> [GlobalAccess]
    grids: dict = field(default_factory=dict)        # tensor -> cell extents
    cells: dict = field(default_factory=dict)        # (tensor, cell) -> {region}
    counter: int = 0                                 # the tile counter of dynamic tile loops (interp/claims.py)
    claims: int = 0                                  # claims made on it in this launch

    def access(self, races, cluster: int, tensor: str, region: tuple, agent, write: bool, span, who: str,
               reduce: str = "", steps: tuple = (), tile=None) -> None:
        """Check one TMA access of `region` (((start, stop), ...) per dim; `steps`: the box's element
        strides; `reduce`: a reduce's operation; `tile`: the tile it belongs to) against earlier ones."""
        region = _stepped(region, steps)
        clock = races.clock(agent)
        current = GlobalAccess(agent, clock[agent], write, cluster, span, who, reduce, tile)
        for other in self._near(tensor, region):
            if not overlaps(("region", other), ("region", region)):
                continue
            kept = []
            for old in self.accesses[(tensor, other)]:
                same = old.cluster == cluster and old.agent == agent   # agents are numbered per cluster
                ordered = _may_order(old, current) and clock.get(old.agent, 0) >= old.epoch
                if not ordered and _conflict(old, current) and not same:
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

    def agents(self, cluster: int) -> set:
        """The agents of cluster `cluster` that recorded accesses belong to (interp/races.py's
        collection keeps their clock entries)."""
        return {a.agent for accesses in self.accesses.values() for a in accesses if a.cluster == cluster}

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


def walks_tiles(var: str) -> bool:
    """Whether a loop variable (of a `for_step`, or what a `tile_take` sets) is a tile loop's
    linear tile: lower_tile_walk and claim_tiles name it `%I.tile`."""
    return var.endswith(".tile")


def _stepped(region: tuple, steps: tuple) -> tuple:
    """(start, stop, step) for each dimension a strided box takes every step-th element of."""
    if not any(step > 1 for step in steps):
        return region
    return tuple(d if step == 1 else (d[0], d[1], step) for d, step in zip(region, steps))


def _may_order(old: GlobalAccess, new: GlobalAccess) -> bool:
    """Whether anything can order the two: only accesses of one tile in one cluster. CTAs of two
    clusters share no barrier; two tiles may run in two such CTAs under another grid size or
    schedule, so what orders them in this run (one CTA's waits) proves nothing."""
    return old.cluster == new.cluster and old.tile == new.tile


def _conflict(old: GlobalAccess, new: GlobalAccess) -> bool:
    """A write against anything, except two reduces of one operation: those commute."""
    commute = old.reduce and old.reduce == new.reduce
    return (old.write or new.write) and not commute


def _hides(new: GlobalAccess, old: GlobalAccess) -> bool:
    """Whether `new`, ordered after `old` and covering it, stands for it against later accesses
    (everything that conflicts with `old` conflicts with `new`): a plain write does; a reduce
    only stands for a reduce of its own operation (a later reduce of that operation would not
    race `new`, but a later store, load or other reduce races both)."""
    return new.write and (not new.reduce or old.reduce == new.reduce)


def _race(tensor: str, region: tuple, first: GlobalAccess, second: GlobalAccess) -> ProtocolError:
    def verb(a: GlobalAccess) -> str:
        return "reduces into" if a.reduce else "writes" if a.write else "reads"
    where = first.span.location() if first.span else "?"
    elements = ", ".join(":".join(map(str, d)) for d in region)
    notes = [f"the other access is at {where}", _unordered(first, second)]
    if first.reduce and second.reduce:
        notes.append(f"reduces of different operations ({first.reduce}, {second.reduce}) do not commute: "
                     "which lands first decides the result, so they must be ordered like two stores")
    tiles = first.tile != second.tile     # then each side names its tile
    return ProtocolError(
        "E421", f"global memory race on {tensor}[{elements}]: {_side(second, tiles)} {verb(second)} it, unordered "
        f"with {_side(first, tiles)}, which {verb(first)} it", second.span, notes)


def _side(a: GlobalAccess, tiles: bool) -> str:
    if not tiles:
        return a.who
    return f"{a.who} outside the tile loop" if a.tile is None else f"{a.who} for tile {a.tile}"


def _unordered(first: GlobalAccess, second: GlobalAccess) -> str:
    """Why nothing orders the two."""
    if first.cluster != second.cluster:
        return "CTAs of different clusters share no barrier: nothing orders their accesses"
    if first.tile != second.tile:
        what = ("two tiles" if first.tile is not None and second.tile is not None
                else "a tile and code outside the tile loop (which runs in every CTA)")
        return (f"{what} may run in CTAs of different clusters, under another grid size or order of tiles, "
                "and such CTAs share no barrier: the waits that ordered them in this run's CTA order nothing "
                "there (give each tile its own elements, or combine them with one reduce operation)")
    return ("a TMA store's writes to global memory complete only at its thread's `wait_group N` without "
            "`read` (`wait_group read` only frees its shared source); whoever accesses the elements next "
            "must be ordered after that wait (a barrier phase or sync)")

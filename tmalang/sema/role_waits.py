"""The roles' pipeline waits as a small machine, run for one choice of trip counts (wait_cycles.py).

No IR and no data: each role is the sequence of its produce/consume blocks, unrolled over the
trip counts of one `Trips`, and each block is two events:
  - taking the slot: the i-th produce block of pipeline P (from 0) waits until the consumer has
    released item i - S (S = P's stages, so the first S are free); the i-th consume block waits
    until item i is filled;
  - handing it over at the end of its body: a produce block fills its item, a consume block
    releases its slot. Nested blocks hold the outer slot while they wait. TMA loads, MMAs and
    commits complete by themselves once issued, so here they complete at the end of the block;
    a later completion (or a release that defer_mma_release delays) can only wait longer.
A role that both produces and consumes P (§11) runs its blocks in source order; the loads that
prefetch_own_pipelines moves ahead wait only for slots the role itself has released.

Every wait reads counters that only grow, and what a role does next depends on nothing else, so
whether a role waits forever does not depend on the order in which the roles run: running each
role as far as it can, round after round, until none moves, decides it for these trip counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..syntax import ast

Block = ast.Produce | ast.Consume


class TooLong(Exception):
    """The trip counts unroll into more events than one run may take."""


class Unknown(Exception):
    """An extent reads a name this model does not bind (or divides by zero): skip these trips."""


@dataclass
class Trips:
    """One choice of what a CTA runs: values of the sizes that steps extents read (dims, integer
    scalars), of every tile and split index, and the number of tiles each tile loop walks."""

    names: dict[str, int]
    tile_value: int = 0
    tiles: int = 1
    counts: dict[int, int] = field(default_factory=dict)   # id(ForSteps) -> its latest trip count
    holders: dict[int, bool] = field(default_factory=dict)  # id(statement) -> holds a block (a cache)

    def holds_blocks(self, stmt) -> bool:
        if id(stmt) not in self.holders:
            inner = ast.statements(getattr(stmt, "body", None) or [])
            self.holders[id(stmt)] = any(isinstance(s, (ast.Produce, ast.Consume)) for s in inner)
        return self.holders[id(stmt)]


@dataclass(frozen=True)
class Wait:
    """A role stuck taking a slot: the block, and which item (1-based) it fills or takes."""

    role: str
    block: Block
    item: int

    @property
    def pipe(self) -> str:
        return self.block.pipeline.name

    @property
    def producing(self) -> bool:
        return isinstance(self.block, ast.Produce)


def events(body: list, env: dict, trips: Trips):
    """(block, taking) for each event of a role body, in program order."""
    for stmt in body:
        if isinstance(stmt, (ast.Produce, ast.Consume)):
            yield stmt, True
            yield from events(stmt.body, env, trips)
            yield stmt, False
        elif not trips.holds_blocks(stmt):
            continue
        elif isinstance(stmt, ast.ForTiles):
            for t in range(trips.tiles):
                yield from events(stmt.body, tile_env(stmt, t, env, trips), trips)
        elif isinstance(stmt, ast.ForSteps):
            count = trip_count(stmt, env)
            trips.counts[id(stmt)] = count
            for k in range(count):
                yield from events(stmt.body, {**env, stmt.var: k}, trips)
        else:   # elect, turn, and what else holds a block: its statements in order (turns order warpgroups only)
            yield from events(stmt.body, env, trips)


def tile_env(loop: ast.ForTiles, t: int, env: dict, trips: Trips) -> dict:
    bound = {**env, **{v: trips.tile_value for v in loop.vars}}
    if loop.index:
        bound[loop.index] = t
    if loop.split is not None:
        parts = max(1, value(loop.split, env))
        bound["$parts"] = parts
        bound[loop.vars[0]] = min(trips.tile_value, parts - 1)
    return bound


def trip_count(loop: ast.ForSteps, env: dict) -> int:
    """As the compiled loop counts (§10): ceil(extent / chunk) in 32-bit arithmetic, at least 0;
    with `part p` the p-th share of those steps; with `stream` at least one."""
    extent = value(loop.extent, env)
    count = max(0, _wrap(_div(extent, loop.chunk) + (_rem(extent, loop.chunk) > 0)))
    if loop.part is not None:
        parts = env.get("$parts", 1)
        count = count // parts + (value(loop.part, env) < count % parts)
    if loop.stream is not None:
        count = max(1, count)
    return count


def value(e, env: dict) -> int:
    """An integer expression (§18) under `env`; `cluster.x` and the like are 0 (rank 0's view)."""
    if isinstance(e, ast.Number):
        return e.value
    if isinstance(e, ast.Ref):
        if e.block is not None:   # `t[i]` (§18) as i · size(t): a table of offsets, t[i+1] - t[i] = size
            if e.name not in env:
                raise Unknown(e.name)
            return _wrap(value(e.block[0], env) * env[e.name])
        if e.field is not None:
            return 0
        if e.name not in env:
            raise Unknown(e.name)
        return env[e.name]
    if isinstance(e, ast.Neg):
        return _wrap(-value(e.operand, env))
    if isinstance(e, ast.Call):
        args = [value(a, env) for a in e.args]
        return min(args) if e.func == "min" else max(args)
    lhs, rhs = value(e.lhs, env), value(e.rhs, env)
    if e.op in "/%" and rhs == 0:
        raise Unknown("division by zero")
    ops = {"+": lambda: lhs + rhs, "-": lambda: lhs - rhs, "*": lambda: lhs * rhs, "&": lambda: lhs & rhs,
           "/": lambda: _div(lhs, rhs), "%": lambda: _rem(lhs, rhs)}
    return _wrap(ops[e.op]())


def _wrap(x: int) -> int:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


def _div(a: int, b: int) -> int:       # truncating, as PTX's div.s32
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _rem(a: int, b: int) -> int:
    return a - b * _div(a, b)


class _Rings:
    """How far each pipeline has gone: items taken by its producer (`put`) and consumer (`got`),
    filled and released."""

    def __init__(self, stages: dict[str, int]):
        self.stages = stages
        self.filled, self.released, self.put, self.got = Counter(), Counter(), Counter(), Counter()

    def take(self, block: Block) -> bool:
        """Take the block's slot if its wait is over (a free stage, or a filled item)."""
        pipe = block.pipeline.name
        if isinstance(block, ast.Produce):
            if self.released[pipe] < self.put[pipe] + 1 - self.stages[pipe]:
                return False
            self.put[pipe] += 1
        else:
            if self.filled[pipe] < self.got[pipe] + 1:
                return False
            self.got[pipe] += 1
        return True

    def hand_over(self, block: Block) -> None:
        (self.filled if isinstance(block, ast.Produce) else self.released)[block.pipeline.name] += 1

    def waiting(self, role: str, block: Block) -> Wait:
        taken = self.put if isinstance(block, ast.Produce) else self.got
        return Wait(role, block, taken[block.pipeline.name] + 1)


def run(roles: dict[str, list], stages: dict[str, int], trips: Trips, limit: int) -> tuple[list[Wait], int]:
    """Run every role as far as it can: (the roles left waiting (none: all of them finished), the
    number of events it took); TooLong past `limit` events."""
    rings = _Rings(stages)
    streams = {name: events(body, dict(trips.names), trips) for name, body in roles.items()}
    pending = {name: next(stream, None) for name, stream in streams.items()}
    used, moved = 0, True
    while moved:
        moved = False
        for name, stream in streams.items():
            while pending[name] is not None:
                block, taking = pending[name]
                if taking and not rings.take(block):
                    break
                if not taking:
                    rings.hand_over(block)
                pending[name] = next(stream, None)
                moved, used = True, used + 1
                if used > limit:
                    raise TooLong
    return [rings.waiting(name, event[0]) for name, event in pending.items() if event is not None], used


def blocks_in_order(body: list, trips: Trips) -> dict[tuple[str, bool], list[Block]]:
    """(pipeline, producing) -> the role's blocks of it in the order it runs them, as if no wait
    ever blocked: where the role fills (or frees) its k-th item."""
    order: dict[tuple[str, bool], list[Block]] = {}
    for block, taking in events(body, dict(trips.names), trips):
        if taking:
            order.setdefault((block.pipeline.name, isinstance(block, ast.Produce)), []).append(block)
    return order

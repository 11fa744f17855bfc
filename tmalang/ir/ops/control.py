"""Control flow inside roles: the tile loop (`for_tiles`) and the loops passes derive
(`for_range`, `for_step`, `loop` with its `leave_if`), branches and variables (`if`, `let`,
`val`), the ops that pick which threads run a region (`elect`, `in_warpgroup`, `in_pair_leader`,
`turn`), and a pipeline's `produce` / `consume` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..exprs import Const, Expr
from .base import Op, op


@op("for_tiles")
@dataclass
class ForTiles(Op):
    """Loop over the tiles of `tensor` cut by `box`; persistent grids stride over them.

    Binds `vars` (tile index per dim, outermost first) and `index` (this CTA's iteration). With
    `group` G, tile t lies in band t // (G * columns) and walks that band's G rows first, so
    concurrently running CTAs share operand tiles in L2 (in 3 or more dims, the dims after the
    first count as one column index, row-major). `reverse` walks the order last to first. With
    `split` S (a constant or a scalar parameter) every tile is walked S times, binding `part` =
    0 .. S - 1: the part is the slowest index, so the CTAs running at once work on the same part
    of K. With `stream` (the
    names of two variables: this CTA's first step of the tile and its step count) the walk is
    stream-K: the tiles x `steps` (K steps per tile) units of work are cut into one equal range
    per CTA, and the loop visits, in tile order, only the tiles its range touches, binding the
    steps of each that fall in it. The passes find the tile loop by this op; the last one,
    lower_tile_walk, writes out what it means in vals and a for_step, which is what the
    interpreter and the backend run.
    """

    vars: list[str]
    tensor: str
    box: str
    index: str
    group: int                      # 0: row-major; G: bands of G tile rows, walked column by column
    body: list[Op]
    split: Expr = Const(1)          # parts per tile (`split S`); 1: no split
    part: str = ""                  # the variable bound to the part (the split index), with a split
    dynamic: bool = False           # tiles claimed in linear order from a global counter (claim_tiles)
    # stream-K: the stream steps loops' steps(extent, chunk) (extent a literal or launch-bound),
    # and the names of this CTA's [first step, step count] of each tile it visits
    extent: Expr = Const(0)
    chunk: int = 0
    stream: list[str] = field(default_factory=list)
    # `by warpgroup`: this loop takes tiles offset, offset + every, ... of the CTA's walk (the
    # other offsets are the other warpgroups' roles); 1: every tile
    every: int = 1
    offset: int = 0
    reverse: bool = False           # `reversed`: linear tile t of the walk is tile tiles - 1 - t of the forward order


@op("for_range")
@dataclass
class ForRange(Op):
    """`var` = 0, 1, .., count - 1 (count is evaluated once, on entry)."""

    var: str
    count: Expr
    body: list[Op]


@op("for_step")
@dataclass
class ForStep(Op):
    """C's `for (var = start, count = 0; var < stop; var += step, count += 1) body`, unsigned
    32-bit: `start` is evaluated on entry, `stop` before every iteration, `step` after every
    iteration (neither reads `var` or `count`). `count` numbers the iterations 0, 1, ..: the body
    often needs it besides its strided position (a persistent CTA's i-th tile picks a parity)."""

    var: str
    count: str
    start: Expr
    stop: Expr
    step: Expr
    body: list[Op]


@op("if")
@dataclass
class If(Op):
    """Run `body` when `cond` is non-zero (uniform across the threads that reach it)."""

    cond: Expr
    body: list[Op]


@op("let")
@dataclass
class Let(Op):
    """Define or update an integer variable."""

    var: str
    value: Expr


@op("val")
@dataclass
class Val(Op):
    """Name a value: `var` = `value`, like a let, for the ops after it in its region. A val is the
    index arithmetic a pass derived: the backend keeps it as an SSA value (no stack slot, unless a
    let or a loop also binds the name), and the interpreter does not count it as a step of the
    warp, where the scheduler may switch warps (no other agent can observe it)."""

    var: str
    value: Expr


@op("in_pair_leader")
@dataclass
class InPairLeader(Op):
    """Run `body` only in the leader CTA of each CTA pair (even %cluster_ctarank, cta_group 2)."""

    body: list[Op]


@op("elect")
@dataclass
class Elect(Op):
    """Run `body` on one thread: the role's first thread, the first thread of each of the role's
    warpgroups, or thread 0 of the block."""

    scope: str                      # "role" | "warpgroup" | "block"
    body: list[Op]


@op("turn")
@dataclass
class Turn(Op):
    """The role's warpgroups run `body` one at a time, in warpgroup order, round-robin (§15e).
    order_turns replaces it by named-barrier ops; no turn remains after that pass."""

    body: list[Op]


@op("in_warpgroup")
@dataclass
class InWarpgroup(Op):
    """Run `body` on warpgroup `group` of the role only (its four warps, every thread)."""

    group: int
    body: list[Op]


@op("produce")
@dataclass
class Produce(Op):
    pipeline: str
    slot: str
    body: list[Op]


@op("consume")
@dataclass
class Consume(Op):
    pipeline: str
    slot: str
    body: list[Op]


@op("loop")
@dataclass
class Loop(Op):
    """`count` = 0, 1, ..: run `body` until a `leave_if` directly in it finds its condition true."""

    count: str
    body: list[Op]


@op("leave_if")
@dataclass
class LeaveIf(Op):
    """Leave the enclosing `loop` (of which it is a direct child) when `cond` is non-zero
    (uniform across the threads that reach it)."""

    cond: Expr

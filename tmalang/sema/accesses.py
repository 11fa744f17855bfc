"""The global-memory accesses of a kernel, described for global_races.

Each load, store and reduce becomes an `Access`: the tensor, whether it reads, writes or reduces
(and with which operation), the elements it covers along each tensor dimension as a `Run`
(start + stride·j, j < count, the start affine in the loop indices and launch-bound names), and
where it sits: its role, its enclosing loops, its position in the role's body (program order),
the produce block it loads in, whether the compiler commits and orders it. Alongside come the
places that order a role's own accesses: `wait_group 0` (not `read`), `commit_group`, and the
produce and consume blocks of each pipeline.

ACCESSES maps each statement kind that touches global memory to the function describing it. A
new statement kind that reads or writes global memory adds one entry; a staged store (`store
T[m, n] <- value through cs`, §13h) is an ast.Store, described by the tile box it writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..syntax import ast
from .declarations import Box, KernelInfo, Scalar
from .scope import CLUSTER, CLUSTER_COORDINATES


@dataclass(frozen=True)
class Affine:
    """Σ coefficient·name + const over integer names (loop indices, launch-bound names)."""

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(terms: dict, const: int) -> Affine:
        return Affine(tuple(sorted((n, k) for n, k in terms.items() if k)), const)

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        terms = dict(self.terms)
        for name, k in other.terms:
            terms[name] = terms.get(name, 0) + sign * k
        return Affine.of(terms, self.const + sign * other.const)

    def times(self, k: int) -> Affine:
        return Affine.of({n: c * k for n, c in self.terms}, self.const * k)

    def value(self, values: dict) -> int:
        return self.const + sum(k * values.get(n, 0) for n, k in self.terms)


@dataclass(frozen=True)
class Run:
    """The elements an access covers along one tensor dimension: start + stride·j for j < count.
    `start` is None where the coordinate is not affine (`opaque` says why): any element then.
    `space` names what the run counts when it is not the tensor's own elements: the positions of
    an index tensor, for rows that a scatter or gather takes from it."""

    start: Affine | None
    stride: int
    count: int
    space: str = ""
    opaque: str = ""


@dataclass(frozen=True)
class Quotient:
    """`dividend / divisor` and `dividend % divisor` of a dividend that is never negative, as the
    names `quotient` and `remainder`: dividend = divisor·quotient + remainder, 0 <= remainder <
    divisor, which keeps a coordinate such as `n / 2` affine (in one more name)."""

    quotient: str
    remainder: str
    dividend: Affine
    divisor: int


@dataclass(frozen=True)
class Loop:
    """An enclosing loop index: `kind` is "tile" (position = which tile index), "split", "count"
    (a tile loop's `as i`: the CTA's iteration count) or "steps"."""

    node: object = field(compare=False)
    var: str
    kind: str
    position: int
    trips: int | None            # how many values: 0 .. trips - 1 (None: bound at launch)
    stream: bool = False         # a stream tile loop, or a `steps .. stream` loop


@dataclass(frozen=True)
class Where:
    """Where a statement sits in its role: loops, program position, blocks around it."""

    role: str
    loops: tuple[Loop, ...] = ()
    path: tuple[int, ...] = ()
    region: object = None        # the statement list a consume block's stores are ordered within
    produce: str = ""            # the pipeline of the enclosing produce block
    consume: bool = False        # inside a consume block
    elected: bool = False        # inside the user's `elect`
    slots: tuple = ()            # open slot names


@dataclass
class Access:
    stmt: ast.Node
    where: Where
    kind: str                    # "load", "store" or "reduce"
    op: str                      # the reduce operation
    tensor: str
    box: Box
    runs: list[Run]
    committed: bool              # the compiler commits its bulk group right after it
    slot_source: bool            # a store from a pipeline slot: the compiler orders repeats (§13)
    quotients: list = field(default_factory=list)   # Quotient names its runs use

    @property
    def role(self) -> str:
        return self.where.role

    @property
    def writes(self) -> bool:
        return self.kind != "load"

    def words(self) -> str:
        verb = f"reduce {self.op}" if self.kind == "reduce" else self.kind
        coords = ", ".join(ast.expr_text(c) for c in self.stmt.coords)
        at = "@" if getattr(self.stmt, "elements", False) else ""
        return f"{verb} {self.box.name}{at}[{coords}] in role '{self.role}'"


@dataclass(frozen=True)
class Mark:
    """A statement that orders a role's accesses: its role, loops and program position."""

    where: Where
    node: object = field(compare=False)


@dataclass
class Accesses:
    accesses: list[Access] = field(default_factory=list)
    waits: list[Mark] = field(default_factory=list)        # `wait_group 0`, not `read`
    commits: list[Mark] = field(default_factory=list)      # `commit_group`
    produces: dict = field(default_factory=dict)           # pipeline -> [Mark] of its produce blocks
    consumes: dict = field(default_factory=dict)           # pipeline -> [Mark] of its consume blocks


def collect(info: KernelInfo) -> Accesses:
    found = Accesses()
    for role in info.roles:
        _Walk(info, found).block(role.decl.body, Where(role.name, region=role.decl))
    return found


class _Walk:
    def __init__(self, info: KernelInfo, found: Accesses):
        self.info, self.found = info, found

    def block(self, body: list, where: Where) -> None:
        for i, stmt in enumerate(body):
            here = replace(where, path=where.path + (i,))
            describe = ACCESSES.get(type(stmt))
            if describe is not None:
                self.found.accesses += describe(self.info, stmt, here)
            inner = _VISITS.get(type(stmt))
            if inner is not None:
                inner(self, stmt, here)

    def for_tiles(self, s: ast.ForTiles, where: Where) -> None:
        shape, extents, _, parts, streamed = self.info.tile_space[:5]
        tile_vars = s.vars[1:] if s.split is not None else s.vars
        loops = []
        if s.split is not None:
            loops.append(Loop(s, s.vars[0], "split", -1, parts if isinstance(parts, int) else None))
        for u, (var, dim, extent) in enumerate(zip(tile_vars, shape, extents)):
            trips = -(-dim // extent) if isinstance(dim, int) else None
            loops.append(Loop(s, var, "tile", u, trips, streamed))
        if s.index:
            loops.append(Loop(s, s.index, "count", -1, None))
        self.block(s.body, replace(where, loops=where.loops + tuple(loops), region=s))

    def for_steps(self, s: ast.ForSteps, where: Where) -> None:
        extent = _upper_bound(s.extent)
        trips = None if extent is None else max(0, -(-extent // s.chunk))
        loop = Loop(s, s.var, "steps", len(where.loops), trips, s.stream is not None)
        self.block(s.body, replace(where, loops=where.loops + (loop,), region=s))

    def produce(self, s: ast.Produce, where: Where) -> None:
        self.found.produces.setdefault(s.pipeline.name, []).append(Mark(where, s))
        self.block(s.body, replace(where, produce=s.pipeline.name, slots=where.slots + (s.slot,)))

    def consume(self, s: ast.Consume, where: Where) -> None:
        """A consume block's body joins the statement list around it: the compiler orders the
        stores of one list (passes/order_slot_release.py), consume blocks spliced in."""
        self.found.consumes.setdefault(s.pipeline.name, []).append(Mark(where, s))
        self.block(s.body, replace(where, consume=True, slots=where.slots + (s.slot,)))

    def elect(self, s: ast.Elect, where: Where) -> None:
        self.block(s.body, replace(where, region=s, elected=True))

    def turn(self, s: ast.Turn, where: Where) -> None:
        self.block(s.body, replace(where, region=s))

    def wait_group(self, s: ast.WaitGroup, where: Where) -> None:
        if not s.read and s.pending == 0:
            self.found.waits.append(Mark(where, s))

    def commit_group(self, s: ast.CommitGroup, where: Where) -> None:
        self.found.commits.append(Mark(where, s))


_VISITS = {   # the blocks the walk enters and the statements that order a role's accesses
    ast.ForTiles: _Walk.for_tiles, ast.ForSteps: _Walk.for_steps, ast.Produce: _Walk.produce,
    ast.Consume: _Walk.consume, ast.Elect: _Walk.elect, ast.Turn: _Walk.turn,
    ast.WaitGroup: _Walk.wait_group, ast.CommitGroup: _Walk.commit_group,
}


# ---- the accesses of each statement kind ---------------------------------------------------


def _load(info: KernelInfo, s: ast.Load, where: Where) -> list[Access]:
    box = info.box_for(s.source)
    quotients: list[Quotient] = []
    if box.im2col is not None:
        why = f"im2col box '{box.name}' gathers convolution windows from anywhere in the tensor"
        runs = [Run(None, 1, 1, opaque=why) for _ in box.tensor.shape]
    else:
        runs = _runs(info, box, s, where, quotients)
    return [Access(s, where, "load", "", box.tensor.name, box, runs, False, False, quotients)]


def _store(info: KernelInfo, s: ast.Store, where: Where) -> list[Access]:
    """A plain store, a reduce, or a staged store (`through cs`), which writes the tile box at its
    coordinates in blocks. The compiler commits the bulk group of each but those the user elects
    (passes/order_slot_release.py for consume blocks, passes/stage_stores.py for staged and bare
    stores), and orders repeated stores from a consume block's slots (§13)."""
    box = info.box_for(s.target)
    staged = getattr(s, "through", None) is not None
    source = s.source if isinstance(s.source, ast.Ref) else None
    slot = source is not None and source.field is not None and source.name in where.slots
    quotients: list[Quotient] = []
    runs = _runs(info, box, s, where, quotients)
    committed = where.consume or staged or not where.elected
    return [Access(s, where, "reduce" if s.reduce else "store", s.reduce, box.tensor.name, box, runs,
                   committed, where.consume and slot and not staged, quotients)]


ACCESSES = {
    ast.Load: _load,
    ast.Store: _store,    # stores, reduces and staged stores (§13, §13a, §13h)
}


# ---- coordinates to runs -------------------------------------------------------------------


def _runs(info: KernelInfo, box: Box, s, where: Where, quotients: list) -> list[Run]:
    """One run per tensor dimension: tile coordinates scale by the box extent, element
    coordinates (`@`) do not; a strided box takes every stride-th element of its extent; the
    rows of a gathered copy are positions in its index tensor, not elements."""
    runs = []
    for d, coord in enumerate(s.coords):
        extent, stride = box.shape[d], box.strides[d]
        count = -(-extent // stride)
        space = ""
        if d == 0 and getattr(s, "gather", ""):
            coord, space, stride, count = coord.block[0], f"rows named by '{s.gather}'", 1, extent
        start = affine(info, coord, where, quotients)
        if start is None:
            runs.append(Run(None, stride, count, space, f"coordinate `{ast.expr_text(coord)}` is not a sum of "
                            "integer multiples of loop indices and launch-bound names (nor `/` or `%` of such "
                            "a sum, never negative, by a literal)"))
            continue
        scale = 1 if getattr(s, "elements", False) else extent
        runs.append(Run(start.times(scale), stride, count, space))
    return runs


def _upper_bound(e) -> int | None:
    """A literal the extent cannot exceed: the literal itself, or the least of those of a `min`'s
    arguments (`min(t[s + 1] - t[s], 256)`: a data-dependent extent capped by a literal); None."""
    if isinstance(e, ast.Number):
        return e.value if isinstance(e.value, int) else None
    if isinstance(e, ast.Call) and e.func == "min":
        bounds = [b for b in map(_upper_bound, e.args) if b is not None]
        return min(bounds) if bounds else None
    return None


def affine(info: KernelInfo, e, where: Where, quotients: list) -> Affine | None:
    """Integer expression `e` as an Affine over loop indices (by name), launch-bound names (`$name`),
    cluster coordinates (`cluster.x`) and quotients it adds to `quotients`; None if it is not
    affine."""
    if isinstance(e, ast.Number):
        return Affine((), e.value) if isinstance(e.value, int) else None
    if isinstance(e, ast.Ref):
        return _name(info, e, where)
    if isinstance(e, ast.Neg):
        inner = affine(info, e.operand, where, quotients)
        return None if inner is None else inner.times(-1)
    if not isinstance(e, ast.BinOp) or e.op not in "+-*/%":
        return None
    lhs, rhs = affine(info, e.lhs, where, quotients), affine(info, e.rhs, where, quotients)
    if lhs is None or rhs is None:
        return None
    if e.op in "/%":
        return _quotient(info, e, lhs, rhs, quotients)
    if e.op == "*":
        if lhs.terms and rhs.terms:
            return None
        return rhs.times(lhs.const) if not lhs.terms else lhs.times(rhs.const)
    return lhs.plus(rhs, 1 if e.op == "+" else -1)


def _quotient(info: KernelInfo, e: ast.BinOp, lhs: Affine, rhs: Affine, quotients: list) -> Affine | None:
    """`lhs / c` or `lhs % c` by a positive literal c, of an lhs that cannot be negative (a constant
    >= 0 plus positive multiples of loop indices, cluster coordinates and dimensions), where
    truncating division is floor division."""
    if rhs.terms or rhs.const < 1 or lhs.const < 0:
        return None
    if any(k < 0 or (n.startswith("$") and n[1:] not in info.dims) for n, k in lhs.terms):
        return None
    key = f"{ast.expr_text(e.lhs, grouped=True)}, {rhs.const}"
    quotient = Quotient(f"div({key})", f"mod({key})", lhs, rhs.const)
    if quotient not in quotients:
        quotients.append(quotient)
    return Affine((((quotient.quotient if e.op == "/" else quotient.remainder), 1),))


def _name(info: KernelInfo, e: ast.Ref, where: Where) -> Affine | None:
    if e.block is not None:
        return None
    if e.field is not None:
        known = e.name == CLUSTER and e.field in CLUSTER_COORDINATES
        return Affine(((f"{CLUSTER}.{e.field}", 1),)) if known else None
    if any(loop.var == e.name for loop in where.loops):
        return Affine(((e.name, 1),))
    if e.name in info.dims or isinstance(info.symbols.get(e.name), Scalar):
        return Affine(((f"${e.name}", 1),))
    return None

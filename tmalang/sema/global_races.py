"""global_races: no two global-memory accesses of an accepted kernel race (E580).

Requires: the statement checks have run (boxes resolved, the tile space known), so every load,
store and reduce names a box and coordinates of its rank.
Guarantees: for every two accesses to one tensor of which at least one writes (reduces of one
operation excepted: each element's read-modify-write is atomic), no execution of one and
execution of the other that nothing orders (unordered.py: different tiles, CTAs or roles, or one
role with no `wait_group 0` or hand-off between) touch a common element; else E580 at the later
access in the source, naming both, how they are unordered and, where the solver found one, an
element both touch and the loop indices that reach it.

The decision is arithmetic, not a pattern. Along each tensor dimension an access covers
start + stride·j (j < ceil(extent / stride)), its start affine in the loop indices (tile
coordinates times the box extent, element coordinates as written). Two executions touch a common
element iff for every dimension start_A + stride_A·j_A = start_B + stride_B·j_B has a solution
with the loop indices in range and linked as the case says (equal tile indices, a later
iteration, ...). lattice.py decides these small integer systems exactly. A coordinate that is not
affine, rows an index tensor names (unless both accesses scatter through the same one: rows are
then compared as positions, and the interpreter checks that the indices themselves are apart),
or a system beyond the solver's budget is taken to overlap, and E580 says the analysis could not
tell the elements apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .accesses import Access, Accesses, Affine, collect
from .declarations import KernelInfo, Mbarrier, Pipeline
from .lattice import SAT, UNKNOWN, UNSAT, System, solve
from .race_diagnostics import race, unprovable
from .scope import CLUSTER
from .unordered import Case, Facts, cases


def check_kernel(info: KernelInfo) -> None:
    found = collect(info)
    facts = _facts(info)
    written = list(dict.fromkeys(x.tensor for x in found.accesses if x.writes))   # in program order
    for tensor in written:
        group = [x for x in found.accesses if x.tensor == tensor]
        for i, a in enumerate(group):
            for b in group[i:]:
                if _may_race(a, b):
                    _check_pair(info, a, b, found, facts)


def _may_race(a: Access, b: Access) -> bool:
    if not (a.writes or b.writes):
        return False
    return not (a.kind == b.kind == "reduce" and a.op == b.op)


def _facts(info: KernelInfo) -> Facts:
    shape, extents, _, parts, streamed = info.tile_space[:5]
    one_tile = all(isinstance(d, int) and d <= e for d, e in zip(shape, extents))
    many = not (one_tile and parts in (None, 1) and not streamed and info.cluster == 1)
    explicit = any(isinstance(s, Mbarrier) for s in info.symbols.values())
    peers = {p.name for p in info.symbols.values() if isinstance(p, Pipeline) and p.peer}
    return Facts(many, explicit, peers)


def _check_pair(info: KernelInfo, a: Access, b: Access, found: Accesses, facts: Facts) -> None:
    for case in cases(a, b, found, facts):
        problem = _Problem(info, a, b, case)
        result = solve(problem.system)
        if result.status == UNSAT:
            continue
        if problem.opaque or result.status == UNKNOWN:
            raise unprovable(problem)
        raise race(problem, result.model or problem.witness())


# ---- the integer system of one case ----------------------------------------------------------


@dataclass
class _Problem:
    """The system whose solutions are executions of `a` and `b`, linked as `case` says, that touch
    a common element. Index `v` of access a is the variable `a.v`, of b `b.v`; launch-bound names
    (`$M`) are shared; `j{d}` is the offset into the box along dimension d."""

    info: KernelInfo
    a: Access
    b: Access
    case: Case
    system: System = field(default_factory=System)
    names: dict = field(default_factory=dict)       # a side's variable -> its Affine over solver variables
    opaque: list = field(default_factory=list)      # (dimension, why) where the analysis cannot compare

    def __post_init__(self) -> None:
        for side, x in (("a", self.a), ("b", self.b)):
            for loop in x.where.loops:
                self.system.bounds[f"{side}.{loop.var}"] = (0, None if loop.trips is None else loop.trips - 1)
            for coord in ("x", "y", "rank"):
                self.system.bounds[f"{side}.{CLUSTER}.{coord}"] = (0, self._cluster_extent(coord) - 1)
            for q in x.quotients:
                self.system.bounds[f"{side}.{q.quotient}"] = (0, None)
                self.system.bounds[f"{side}.{q.remainder}"] = (0, q.divisor - 1)
        for kind, lhs, rhs, offset in self.case.links:
            self._link(kind, f"{lhs[0]}.{lhs[1]}", self._term(f"{rhs[0]}.{rhs[1]}"), offset)
        if self.case.same_cta:
            for coord in ("x", "y", "rank"):
                self._link("eq", f"b.{CLUSTER}.{coord}", self._term(f"a.{CLUSTER}.{coord}"), 0)
        for side, x in (("a", self.a), ("b", self.b)):
            for q in x.quotients:   # dividend = divisor·quotient + remainder
                dividend = self.start(side, q.dividend)
                coeffs = dict(dividend.terms)
                coeffs[f"{side}.{q.quotient}"], coeffs[f"{side}.{q.remainder}"] = -q.divisor, -1
                self.system.eqs.append((coeffs, -dividend.const))
        for d, (ra, rb) in enumerate(zip(self.a.runs, self.b.runs)):
            if ra.start is None or rb.start is None or ra.space != rb.space:
                self.opaque.append((d, ra.opaque or rb.opaque or _spaces(ra.space, rb.space)))
                continue
            ja, jb = f"a.j{d}", f"b.j{d}"
            self.system.bounds[ja], self.system.bounds[jb] = (0, ra.count - 1), (0, rb.count - 1)
            start = self.start("a", ra.start).plus(self.start("b", rb.start), -1)
            coeffs = dict(start.terms)
            coeffs[ja], coeffs[jb] = ra.stride, -rb.stride
            self.system.eqs.append((coeffs, -start.const))

    def _cluster_extent(self, coord: str) -> int:
        rows, cols = self.info.cluster // self.info.cluster_cols, self.info.cluster_cols
        return {"x": rows, "y": cols, "rank": self.info.cluster}[coord]

    def _term(self, name: str) -> Affine:
        return self.names.get(name, Affine(((name, 1),)))

    def _link(self, kind: str, lhs: str, rhs: Affine, offset: int) -> None:
        """lhs = rhs + offset ("eq"), or lhs = rhs + offset + s with a new s >= 0 ("ge"); lhs's own
        bounds become constraints on what replaces it."""
        value = rhs.plus(Affine((), offset))
        if kind == "ge":
            slack = f"s{len(self.names)}.{lhs}"
            self.system.bounds[slack] = (0, None)
            value = value.plus(Affine(((slack, 1),)))
        lo, hi = self.system.bounds.pop(lhs)
        self.names[lhs] = value
        terms = dict(value.terms)
        if hi is not None:
            self.system.les.append((terms, hi - value.const))
        if lo is not None and _least(value, self.system.bounds) < lo:
            self.system.les.append(({n: -k for n, k in terms.items()}, value.const - lo))

    def start(self, side: str, start: Affine) -> Affine:
        """An access's start over solver variables: its indices renamed to its side, launch-bound
        names shared, linked indices replaced by what they equal."""
        out = Affine((), start.const)
        for name, k in start.terms:
            full = name if name.startswith("$") else f"{side}.{name}"
            if name.startswith("$"):
                self.system.bounds.setdefault(full, self._launch_bounds(name[1:]))
            out = out.plus(self._term(full).times(k))
        return out

    def _launch_bounds(self, name: str) -> tuple:
        return (1, None) if name in self.info.dims else (None, None)

    def values(self, model: dict, side: str, names: list[str]) -> list[int]:
        return [self._term(f"{side}.{n}").value(model) for n in names]

    def witness(self) -> dict | None:
        """A solution with every unbounded end capped near the other (the solver proves some cases
        without one)."""
        capped = System({v: _capped(lo, hi) for v, (lo, hi) in self.system.bounds.items()},
                        self.system.eqs, self.system.les)
        found = solve(capped, tries=4000)
        return found.model if found.status == SAT else None


def _least(value: Affine, bounds: dict) -> float:
    total = value.const
    for name, k in value.terms:
        lo, hi = bounds[name]
        end = lo if k > 0 else hi
        if end is None:
            return float("-inf")
        total += k * end
    return total


def _capped(lo, hi) -> tuple[int, int]:
    if lo is None and hi is None:
        return (-64, 64)
    return (lo if lo is not None else hi - 256, hi if hi is not None else lo + 256)


def _spaces(x: str, y: str) -> str:
    named = x or y
    return f"one copy takes {named} (data the compiler cannot see) and the other does not" if not (x and y) \
        else f"the copies take {x} and {y} (data the compiler cannot see)"

"""When two executions of two global-memory accesses run with nothing ordering them (global_races).

An execution of an access is the access at one value of each enclosing loop index. `cases`
lists, for a pair of accesses A and B, the ways an execution of A and one of B can be unordered,
each as links between A's and B's loop indices (`Case.links`); global_races asks whether some
case lets the two touch a common element. What orders two executions:

- nothing, across tiles: two tiles (or split parts) may run in different CTAs, which share no
  barrier (on a persistent grid the same pair may run in one CTA or in two); nor across CTAs,
  for accesses outside tile loops, nor across the CTAs that share one tile of a stream-K walk;
- within a CTA and tile, a pipeline hand-off: a load in a produce block completes on the full
  barrier that its consume block waits on, so everything its consumer role does from that
  consume block on (in that iteration or later ones) comes after the load;
- within one role, the role's `wait_group 0` (not `read`) between a committed store or reduce and
  the later access, running in every iteration of the loops around both; and the full wait the
  compiler puts between two stores (or reduces of two operations) of one consume region that may
  overlap (§13, passes/order_slot_release.py); a load that a role produces for itself is hoisted
  ahead of its program position (passes/prefetch_own_pipelines.py), so nothing earlier orders it;
- in a kernel with its own mbarriers (the explicit layer, §17), accesses of one CTA and tile are
  the user's protocol: the interpreter checks it (E421), this analysis does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..syntax import ast
from .accesses import Access, Accesses, Loop, Mark


@dataclass(frozen=True)
class Case:
    """`links` are (kind, (side, var), (side, var), offset): lhs = rhs + offset ("eq") or
    lhs >= rhs + offset ("ge"), side "a" or "b" naming the access whose index it is."""

    family: str          # "tiles", "ctas", "stream", "roles", "steps", "order"
    words: str
    links: tuple = ()
    same_cta: bool = False   # the two run in one CTA: their cluster coordinates agree


@dataclass
class Facts:
    many_ctas: bool              # the launch may have more than one CTA
    explicit: bool               # the kernel declares its own mbarriers (§17)
    peers: set = field(default_factory=set)   # pipelines whose produce blocks fill another CTA's slot


def cases(a: Access, b: Access, found: Accesses, facts: Facts):
    """Those of one CTA and tile first: where they race, that is the simplest account of it."""
    if not facts.explicit:
        same = _same_tile(a, b)
        if a.role != b.role:
            yield from _across_roles(a, b, same, found, facts)
        else:
            yield from _within_role(a, b, same, found, facts)
    yield from _shared_tile(a, b)
    yield from _other_tiles(a, b, facts)


def _tiles(x: Access) -> dict:
    return {(l.kind, l.position): l for l in x.where.loops if l.kind in ("tile", "split")}


def _other_tiles(a: Access, b: Access, facts: Facts):
    ta, tb = _tiles(a), _tiles(b)
    if not (ta and tb):
        if facts.many_ctas:
            yield Case("ctas", "in two CTAs (the statement outside the tile loop runs in every CTA)")
        return
    for key, la in ta.items():
        lb = tb[key]
        what = "split parts" if key[0] == "split" else "tiles"
        yield Case("tiles", f"in two different {what}", (("ge", ("b", lb.var), ("a", la.var), 1),))
        if a is not b:
            yield Case("tiles", f"in two different {what}", (("ge", ("a", la.var), ("b", lb.var), 1),))


def _same_tile(a: Access, b: Access) -> tuple:
    ta, tb = _tiles(a), _tiles(b)
    links = [("eq", ("b", tb[k].var), ("a", la.var), 0) for k, la in ta.items() if k in tb]
    ca, cb = _loops(a, "count"), _loops(b, "count")
    if ta and tb and ca and cb:     # the CTA's iteration count of one tile
        links.append(("eq", ("b", cb[0].var), ("a", ca[0].var), 0))
    return tuple(links)


def _loops(x: Access, kind: str) -> list[Loop]:
    return [l for l in x.where.loops if l.kind == kind]


def _shared_tile(a: Access, b: Access):
    """Stream-K: the CTAs that share a tile take disjoint ranges of its steps."""
    if not any(l.stream for l in _loops(a, "tile")) or not any(l.stream for l in _loops(b, "tile")):
        return
    same = _same_tile(a, b)
    ka = [l for l in _loops(a, "steps") if l.stream]
    kb = [l for l in _loops(b, "steps") if l.stream]
    words = "in one tile run by two CTAs (stream-K shares a tile's steps among CTAs)"
    if not (ka and kb):
        yield Case("stream", words, same)
        return
    yield Case("stream", words, same + (("ge", ("b", kb[-1].var), ("a", ka[-1].var), 1),))
    if a is not b:
        yield Case("stream", words, same + (("ge", ("a", ka[-1].var), ("b", kb[-1].var), 1),))


# ---- two roles of one CTA ------------------------------------------------------------------


def _across_roles(a: Access, b: Access, same: tuple, found: Accesses, facts: Facts):
    for load, other, ls, os in ((a, b, "a", "b"), (b, a, "b", "a")):
        consume = _handoff(load, other, found, facts)
        if consume is not None:
            yield from _before_consume(load, other, consume, same, (ls, os))
            return
    yield Case("roles", "in one tile", same, True)


def _handoff(load: Access, other: Access, found: Accesses, facts: Facts) -> Mark | None:
    """The consume block that orders `load` before `other`'s role: the load's pipeline has one
    produce and one consume block, in `other`'s role, under matching steps loops."""
    pipe = load.where.produce
    if load.kind != "load" or not pipe or pipe in facts.peers:
        return None
    produces, consumes = found.produces.get(pipe, []), found.consumes.get(pipe, [])
    if len(produces) != 1 or len(consumes) != 1 or consumes[0].where.role != other.role:
        return None
    steps = lambda where: [l for l in where.loops if l.kind == "steps"]   # noqa: E731
    if len(steps(consumes[0].where)) != len(steps(load.where)):
        return None
    return consumes[0]


def _before_consume(load: Access, other: Access, consume: Mark, same: tuple, sides: tuple):
    """The executions of `other` that run before the consume block at the load's loop point: an
    earlier iteration of a loop around both, or an earlier place in the same iteration."""
    ls, os = sides
    words = f"in one tile, before role '{other.role}' has consumed the loaded slot"
    ksteps = [l for l in consume.where.loops if l.kind == "steps"]
    lsteps = [l for l in load.where.loops if l.kind == "steps"]
    mapped = {id(k.node): l.var for k, l in zip(ksteps, lsteps)}
    prefix = list(same)
    for loop in _common(other.where.loops, consume.where.loops):
        if loop.kind != "steps":
            continue
        lvar = mapped[id(loop.node)]
        yield Case("roles", words, tuple(prefix) + (("ge", (ls, lvar), (os, loop.var), 1),), True)
        prefix.append(("eq", (os, loop.var), (ls, lvar), 0))
    if not _before(consume.where.path, other.where.path):
        yield Case("roles", words, tuple(prefix), True)


# ---- one role ------------------------------------------------------------------------------


def _within_role(a: Access, b: Access, same: tuple, found: Accesses, facts: Facts):
    common = _common(a.where.loops, b.where.loops)
    prefix = list(same)
    for i, loop in enumerate(common):
        if loop.kind != "steps":
            continue
        for first, second, fs, ss in ((a, b, "a", "b"), (b, a, "b", "a"))[: 1 if a is b else 2]:
            ordered, adjacent = _ordered_across(first, second, common[: i + 1], found, facts)
            if ordered:
                continue
            link = ("eq" if adjacent else "ge", (ss, loop.var), (fs, loop.var), 1)
            yield Case("steps", f"in different iterations of `{loop.var}`",
                       tuple(prefix) + (link,), True)
        prefix.append(("eq", ("b", loop.var), ("a", loop.var), 0))
    if a is b:
        return
    first, second = (a, b) if _before(a.where.path, b.where.path) else (b, a)
    if not _ordered_within(first, second, common, found, facts):
        yield Case("order", "one after the other in one tile", tuple(prefix), True)


def _ordered_across(first: Access, second: Access, loops: list, found: Accesses, facts: Facts):
    """Whether every execution of `first` is ordered before those of `second` in later iterations
    of loops[-1] (the loops around both, outermost first, up to it); else whether only the next
    iteration's are unordered (every wait of that loop's body lies between second and first)."""
    if first.kind == "load":
        consume = _handoff(first, second, found, facts)
        return consume is not None and _same_loops(consume.where.loops, first.where.loops), False
    if _hoisted(second, found):
        return False, False
    waits = [w for w in _waits(first, found) if _same_loops(w.where.loops, loops)]
    if not waits:
        return False, False
    if any(_before(first.where.path, w.where.path) or _before(w.where.path, second.where.path) for w in waits):
        return True, False
    return False, True


def _ordered_within(first: Access, second: Access, common: list, found: Accesses, facts: Facts) -> bool:
    """Whether `first`, earlier in program order, is ordered before `second` in one iteration of
    every loop around both."""
    if first.kind == "load":
        consume = _handoff(first, second, found, facts)
        return (consume is not None and _same_loops(consume.where.loops, first.where.loops)
                and _before(consume.where.path, second.where.path))
    if _hoisted(second, found):
        return False
    if first.slot_source and second.slot_source and first.where.region is second.where.region:
        if _compiler_waits(first, second):
            return True
    return any(_before(first.where.path, w.where.path) and _before(w.where.path, second.where.path)
               and _same_loops(w.where.loops, common[: len(w.where.loops)]) for w in _waits(first, found))


def _waits(store: Access, found: Accesses) -> list[Mark]:
    """The role's `wait_group 0`s that can complete `store`: it is committed before them."""
    return [w for w in found.waits if w.where.role == store.role and _committed(store, w, found)]


def _committed(store: Access, wait: Mark, found: Accesses) -> bool:
    """The compiler commits consume-block and staged stores; the user's own store needs a
    `commit_group` after it in its block."""
    if store.committed:
        return True
    path = store.where.path
    return any(c.where.role == store.role and c.where.path[:-1] == path[:-1] and _before(path, c.where.path)
               for c in found.commits)


def _hoisted(x: Access, found: Accesses) -> bool:
    """A load in a produce block whose consumer is its own role: issued ahead of its place."""
    consumes = found.consumes.get(x.where.produce, []) if x.kind == "load" and x.where.produce else []
    return any(c.where.role == x.role for c in consumes)


def _compiler_waits(first: Access, second: Access) -> bool:
    """Whether order_slot_release puts a full wait before `second`: the same tensor through boxes
    of another geometry, or either at element coordinates or scattered, or the same geometry at
    the same coordinates; a reduce after a reduce of its own operation is issued without one."""
    if first.kind == "reduce" and second.kind == "reduce" and first.op == second.op:
        return False
    f, s = first.stmt, second.stmt
    if f.elements or s.elements or f.gather or s.gather:
        return True
    if (first.box.shape, first.box.strides) != (second.box.shape, second.box.strides):
        return True
    return [_text(c) for c in f.coords] == [_text(c) for c in s.coords]


def _text(e) -> str:
    return ast.expr_text(e, grouped=True)


def _common(x: tuple, y: tuple) -> list[Loop]:
    out = []
    for lx, ly in zip(x, y):
        if lx.node is not ly.node or lx.var != ly.var:
            break
        out.append(lx)
    return out


def _same_loops(x, y) -> bool:
    return len(x) == len(y) and all(lx.node is ly.node and lx.var == ly.var for lx, ly in zip(x, y))


def _before(p: tuple, q: tuple) -> bool:
    """Whether program position p comes before q (a block's own position before its body's)."""
    return p < q

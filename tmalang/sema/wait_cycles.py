"""Wait cycles across roles: no role waits for a slot that another role fills (or frees) only
after waiting for this one (E047).

Requires: a checked kernel: one producer role and one consumer role per pipeline (E068), a
pipeline's produce and consume blocks equal in number and under the same loops (E056), a role on
both sides of a pipeline pairing its blocks (E103).
Guarantees: in a kernel of the high-level layer (no mbarrier of the user's: there the protocol is
the user's, and the interpreter checks it), for every choice of trip counts tried below, every
role runs all of its produce and consume blocks to the end (role_waits.py is the model), or the
kernel is refused with the roles and pipelines of the cycle, a note on each block involved and
the trip counts that close it.

The trip counts tried: the sizes that `steps` extents read (dims, integer scalars) scaled so that
a loop cut by chunk c runs j times (size j·c), for j = 0, 1, 2, 3 and every ring depth S and
S + 1 (a cycle through a full ring closes only after S items); integer scalars also 0 and 1
(flags like `causal`); tile and split indices 0, 1 and j; literal extents as written; and two
tiles per CTA where a block stands outside the tile loop (within it, every tile starts with
every ring drained, so one tile shows what any does). Each choice is one a launch can make, so a
cycle found is a hang on the GPU (E401 on the interpreter); a cycle that needs other counts is
missed, never invented. Every CTA of a cluster runs the same blocks with the same trip counts
(E059, E479), so the CTA that a peer pipeline (§16b) or a multicast load (§16) reaches is in the
same state as this one: one CTA stands for all.
"""

from __future__ import annotations

from ..diagnostics import TmalangError, error
from ..syntax import ast
from . import role_waits
from .declarations import KernelInfo, Mbarrier, Pipeline, Scalar, Tensor
from .role_waits import Trips, Wait

CODE = "E047"
EVENTS_PER_RUN = 50_000      # beyond this a choice of trip counts is skipped: a check, not a hang
EVENTS_PER_KERNEL = 400_000
EXPLICIT = (ast.Wait, ast.Arrive, ast.ExpectTx)


def check(info: KernelInfo) -> None:
    pipes = {p.name: p for p in info.symbols.values() if isinstance(p, Pipeline)}
    if _explicit(info) or not any(set(p.producers) != set(p.consumers) for p in pipes.values()):
        return   # the user's protocol, or no role waits for another
    roles = {r.name: r.decl.body for r in info.roles}
    stages = {name: p.stages for name, p in pipes.items()}
    found = _first_cycle(info, roles, stages, pipes)
    if found:
        cycle, trips = found
        raise _refusal(cycle, pipes, roles, trips, _deeper(info, roles, stages, pipes, cycle))


def _first_cycle(info: KernelInfo, roles: dict[str, list], stages: dict[str, int], pipes):
    """(the cycle, the trips that close it) for the first choice of trip counts that closes one."""
    order = [r.name for r in info.roles]
    budget = EVENTS_PER_KERNEL
    for trips in trip_choices(info, roles, stages):
        limit = min(EVENTS_PER_RUN, budget)
        try:
            stuck, used = role_waits.run(roles, stages, trips, limit)
        except role_waits.TooLong:
            used, stuck = limit, []
        except role_waits.Unknown:
            continue
        cycle = _cycle(stuck, pipes, order)
        if cycle:
            return cycle, trips
        budget -= used
        if budget <= 0:
            return None
    return None


def _deeper(info: KernelInfo, roles, stages: dict[str, int], pipes, cycle: list[Wait]) -> str:
    """A hint when more stages of the full rings in the cycle break every cycle: 'give P N stages'."""
    full = sorted({w.pipe for w in cycle if w.producing})
    for depth in range(max(stages[p] for p in full) + 1, 33) if full else ():
        deeper = {**stages, **{p: max(stages[p], depth) for p in full}}
        if _first_cycle(info, roles, deeper, pipes) is None:
            return f"give {' and '.join(map(_quoted, full))} {depth} stages"
    return ""


def _explicit(info: KernelInfo) -> bool:
    if any(isinstance(s, Mbarrier) for s in info.symbols.values()):
        return True
    return any(isinstance(s, EXPLICIT) for r in info.roles for s in ast.statements(r.decl.body))


# ---- the trip counts tried -----------------------------------------------------------------

def trip_choices(info: KernelInfo, roles: dict[str, list], stages: dict[str, int]):
    """The trip counts to try, fewest items first (so a refusal shows the smallest case)."""
    loops = [s for body in roles.values() for s in ast.statements(body) if isinstance(s, ast.ForSteps)]
    scale = _scales(info, loops)
    scalars = {n for n in scale if isinstance(info.symbols.get(n), Scalar)}
    tile_names = _tile_names(roles)
    tile_dependent = any(r.name in tile_names or r.field or r.block for s in loops for r in ast.refs(s.extent))
    counts = sorted({0, 1, 2, 3} | {n for s in stages.values() for n in (s, s + 1)})
    tiles = 2 if any(_outside_tile_loops(body) for body in roles.values()) else 1
    seen = set()
    for j in counts if scale or tile_dependent else [1]:
        for flag in ([None, 0, 1] if scalars else [None]):
            names = {n: _size(j, chunk, flag if n in scalars else "dim") for n, chunk in scale.items()}
            for tile_value in sorted({0, 1, j}) if tile_dependent else [0]:
                key = (tuple(sorted(names.items())), tile_value)
                if key not in seen:
                    seen.add(key)
                    yield Trips(names, tile_value, tiles)


def _size(j: int, chunk: int, kind) -> int:
    """A dim is at least 1 (the launch refuses 0): j·chunk, but chunk for j = 0. An integer scalar
    is j·chunk, or the flag value 0 or 1."""
    if kind == "dim":
        return max(j, 1) * chunk
    return j * chunk if kind is None else kind


def _scales(info: KernelInfo, loops: list[ast.ForSteps]) -> dict[str, int]:
    """Each size a steps extent reads (and each scalar split count) -> the largest chunk it is cut
    by, so that size j·chunk runs such a loop j times."""
    scale: dict[str, int] = {}
    sized = [(r, s.chunk) for s in loops for r in ast.refs(s.extent)]
    splits = [(s.split, 1) for body in info.roles for s in ast.statements(body.decl.body)
              if isinstance(s, ast.ForTiles) and isinstance(s.split, ast.Ref)]
    for ref, chunk in sized + splits:
        found = info.symbols.get(ref.name)
        if ref.block is not None and isinstance(found, Tensor):   # an element read `t[i]`: t's step
            scale[ref.name] = max(scale.get(ref.name, 1), chunk)
        elif ref.field is None and (ref.name in info.dims or (isinstance(found, Scalar) and found.dtype.kind != "float")):
            scale[ref.name] = max(scale.get(ref.name, 1), chunk)
    return scale


def _tile_names(roles: dict[str, list]) -> set[str]:
    loops = [s for body in roles.values() for s in ast.statements(body) if isinstance(s, ast.ForTiles)]
    return {name for s in loops for name in [*s.vars, *([s.index] if s.index else [])]}


def _outside_tile_loops(body: list) -> bool:
    for stmt in body:
        if isinstance(stmt, (ast.Produce, ast.Consume)):
            return True
        if not isinstance(stmt, ast.ForTiles) and _outside_tile_loops(getattr(stmt, "body", None) or []):
            return True
    return False


# ---- the cycle and its diagnostic ----------------------------------------------------------

def _cycle(stuck: list[Wait], pipes: dict[str, Pipeline], order: list[str]) -> list[Wait]:
    """The stuck roles that wait for each other in a ring, starting at the earliest declared one;
    [] when no stuck role waits for another stuck role that waits back."""
    waits = {w.role: w for w in stuck}
    for start in sorted(waits, key=order.index):
        path = [start]
        while True:
            other = _awaited(waits[path[-1]], pipes)
            if other == path[-1] or other not in waits:
                break
            if other in path:
                ring = path[path.index(other):]
                first = min(ring, key=order.index)
                ring = ring[ring.index(first):] + ring[:ring.index(first)]
                return [waits[r] for r in ring]
            path.append(other)
    return []


def _awaited(w: Wait, pipes: dict[str, Pipeline]) -> str:
    """The role whose later block `w` waits for: the consumer frees a slot, the producer fills one."""
    pipe = pipes[w.pipe]
    return (pipe.consumers if w.producing else pipe.producers)[0]


def _refusal(cycle: list[Wait], pipes, roles, trips: Trips, deeper: str) -> TmalangError:
    order = {w.role: role_waits.blocks_in_order(roles[w.role], Trips(trips.names, trips.tile_value, trips.tiles))
             for w in cycle}
    sentences, notes = [], []
    for i, w in enumerate(cycle):
        before = cycle[i - 1]            # the role that waits for this one
        item = before.item - pipes[before.pipe].stages if before.producing else before.item
        side = (before.pipe, not before.producing)
        blocks = order[w.role].get(side, [])
        there = blocks[item - 1] if 0 < item <= len(blocks) else pipes[before.pipe]
        act = (f"frees {_nth(item) or 'a slot of '}'{before.pipe}'" if before.producing
               else f"fills {_nth(item)}'{before.pipe}'")
        sentences.append(f"role '{w.role}' waits for {_awaiting(w, cycle[(i + 1) % len(cycle)], pipes, i == 0)} "
                         f"before it {act}")
        notes.append(f"role '{w.role}' waits at {w.block.span.location()}, and {act} in the block at "
                     f"{there.span.location()}")
    notes += _trip_notes(cycle, roles, trips)
    fix = "order each role's blocks so that it fills or frees what another role waits for before it waits itself"
    fix += f", or {deeper}" if deeper else ""
    notes.append(f"every role of the cycle would wait forever (a hang on the GPU, E401 on the interpreter): {fix}")
    message = ", ".join(sentences[:-1]) + f", and {sentences[-1]}" if len(sentences) > 1 else sentences[0]
    return error(CODE, message, cycle[0].block.span, *notes)


def _awaiting(w: Wait, other: Wait, pipes, first: bool) -> str:
    if w.producing:
        stages = pipes[w.pipe].stages
        held = f"{stages} stage{'s' if stages > 1 else ''}, freed by role '{other.role}'"
        item = f" for item {w.item}" if w.item > 1 else ""
        return f"a free slot of '{w.pipe}'{item}" + (f" ({held})" if first else "")
    return f"{_nth(w.item)}{'pipeline ' if first else ''}'{w.pipe}'" + (f" (filled by role '{other.role}')" if first else "")


def _quoted(name: str) -> str:
    return f"'{name}'"


def _nth(item: int) -> str:
    return f"item {item} of " if item > 1 else ""


def _trip_notes(cycle: list[Wait], roles: dict[str, list], trips: Trips) -> list[str]:
    """The trip counts of the steps loops around the waiting blocks, where they matter."""
    loops = {}
    for w in cycle:
        for loop in _steps_around(roles[w.role], w.block) or []:
            loops.setdefault(id(loop), loop)
    counted = [(s, trips.counts.get(key, 0)) for key, s in loops.items()]
    if all(n == 1 for _, n in counted):
        return []
    described: dict[str, int] = {}   # two roles' loops of one extent read as one
    for s, n in counted:
        described.setdefault(f"`steps({ast.expr_text(s.extent)}, {s.chunk})`", n)
    runs = ", ".join(f"{loop} runs {n} time{'s' if n != 1 else ''}" for loop, n in described.items())
    tile_names = _tile_names(roles)
    read = dict.fromkeys(r.name for s, _ in counted for r in ast.refs(s.extent) if r.field is None)
    sizes = ", ".join(f"{name} = {trips.names[name] if name in trips.names else trips.tile_value}"
                      for name in read if name in trips.names or name in tile_names)
    return [f"the cycle closes when {runs}" + (f" ({sizes})" if sizes else "")]


def _steps_around(body: list, block, around: tuple = ()) -> list[ast.ForSteps] | None:
    """The steps loops around `block` in `body`, outermost first (None: not in `body`)."""
    for stmt in body:
        if stmt is block:
            return list(around)
        inner = getattr(stmt, "body", None)
        if inner:
            found = _steps_around(inner, block, around + ((stmt,) if isinstance(stmt, ast.ForSteps) else ()))
            if found is not None:
                return found
    return None

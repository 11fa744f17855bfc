"""Tensor Memory holds a value before an MMA adds onto it: no stage of a tmem pipeline is
accumulated into while nothing has written it (E106).

The language's accumulate flag (§15b): a tile's first `mma` overwrites it, later ones add, until
`t.d = 0` makes the next one overwrite again; a copy (`t.d = tile`) writes the tile and sets the
flag. The flag is one per tile name, not per stage. So in a ring of S >= 2 stages, an MMA role
that does not clear the flag for every item overwrites stage 0 with item 0 and then adds item
1's products onto stage 1, which nothing has written: on the GPU onto whatever Tensor Memory
held, on the interpreter E422.

Requires: checked role bodies: every `mma`, `t.d = 0` and copy into a tmem field stands in an
open slot of its pipeline in a one-warp role (E099, E085); one producer role per pipeline
(E068); a pipeline's blocks under the same loops (E056); the trip counts wait_cycles tries.
Guarantees: for every tmem field that only its pipeline's producer role writes, in produce
blocks, and every choice of trip counts tried (role_waits models the run; a CTA walks 1 .. S
tiles where a persistent grid or a dynamic tile loop lets it take several), each MMA that adds
onto the field finds its stage written (by an overwriting MMA or a copy); otherwise the kernel is
refused at that MMA, naming the stage, the item and the MMA that left the flag set. Each choice
is one a launch can make, so a refusal is an MMA the GPU runs onto unwritten Tensor Memory.
Left to the interpreter (E422, docs/interpreter.md): fields another role writes too (row math,
as attention_sm100's O), reads of a stage nothing wrote (a steps loop that ran no step), copies
of only some blocks of a tile (a copy counts as writing all of it here), and producer roles
whose steps loops depend on the tile (their trip counts differ from tile to tile).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import TmalangError, error
from ..syntax import ast
from . import role_waits
from .declarations import KernelInfo, Pipeline
from .role_waits import Trips
from .wait_cycles import trip_choices

CODE = "E106"
EVENTS_PER_KERNEL = 200_000    # beyond this the check stops: the interpreter still reports E422


@dataclass(frozen=True)
class Write:
    """A statement that writes (or re-arms) tmem field `field` of the slot of `pipe` it names."""

    stmt: ast.Mma | ast.Assign
    pipe: str
    field: str
    producing: bool
    role: str


class _Budget(Exception):
    """The runs took more events than the check may spend."""


def check(info: KernelInfo) -> None:
    pipes = {p.name: p for p in info.symbols.values() if isinstance(p, Pipeline) and p.tmem_fields and not p.peer}
    writes = [w for role in info.roles for w in _writes(role.name, role.decl.body, pipes, {})]
    judged = _judged(writes, pipes)
    budget = [EVENTS_PER_KERNEL]
    for role in info.roles:
        fields = {key for key in judged if pipes[key[0]].producers[0] == role.name}
        if fields and not _tile_dependent(role.decl.body):
            try:
                _check_role(info, role.decl.body, fields, pipes, budget)
            except _Budget:
                return


def _writes(role: str, body: list, pipes: dict[str, Pipeline], slots: dict[str, tuple[str, bool]]):
    """Every statement of `body` that writes a tmem field, with the slot it names resolved."""
    for stmt in body:
        if isinstance(stmt, (ast.Produce, ast.Consume)):
            inner = {**slots, stmt.slot: (stmt.pipeline.name, isinstance(stmt, ast.Produce))}
            yield from _writes(role, stmt.body, pipes, inner)
            continue
        target = _tmem_target(stmt, pipes, slots)
        if target is not None:
            yield Write(stmt, *target, role)
        yield from _writes(role, getattr(stmt, "body", None) or [], pipes, slots)


def _tmem_target(stmt, pipes: dict[str, Pipeline], slots: dict) -> tuple[str, str, bool] | None:
    """(pipeline, field, producing) when `stmt` is an mma into or an assignment to a tmem field."""
    ref = stmt.acc if isinstance(stmt, ast.Mma) else stmt.target if isinstance(stmt, ast.Assign) else None
    if ref is None or ref.field is None or ref.name not in slots:
        return None
    pipe, producing = slots[ref.name]
    if pipe not in pipes or ref.field not in pipes[pipe].tmem_fields:
        return None
    return pipe, ref.field, producing


def _judged(writes: list[Write], pipes: dict[str, Pipeline]) -> set[tuple[str, str]]:
    """The (pipeline, field)s whose every write stands in a produce block of the pipeline's one
    producer role: then that role alone decides what each stage holds."""
    fields = {(w.pipe, w.field) for w in writes if isinstance(w.stmt, ast.Mma)}
    for w in writes:
        if not w.producing or set(pipes[w.pipe].producers) != {w.role}:
            fields.discard((w.pipe, w.field))
    return fields


def _tile_dependent(body: list) -> bool:
    """A steps loop whose trip count can differ between the tiles (and CTAs) of one launch."""
    tile_names = {n for s in ast.statements(body) if isinstance(s, ast.ForTiles) for n in [*s.vars, s.index] if n}
    return any(s.part is not None or s.stream is not None
               or any(r.field is not None or r.name in tile_names for r in ast.refs(s.extent))
               for s in ast.statements(body) if isinstance(s, ast.ForSteps))


# ---- one role run under one choice of trip counts -------------------------------------------

@dataclass
class _State:
    """What the run knows: each field's accumulate flag (and the MMA or copy that set it), each
    pipeline's next item, and the stages of each field something has written."""

    stages: dict[str, int]
    flag: dict[tuple[str, str], tuple[ast.Node, int] | None]   # set by (statement, in item)
    item: dict[str, int]
    written: set[tuple[str, str, int]]


def _check_role(info: KernelInfo, body: list, fields: set, pipes: dict[str, Pipeline], budget: list) -> None:
    roles = {r.name: r.decl.body for r in info.roles}
    stages = {name: p.stages for name, p in pipes.items()}
    deepest = max(pipes[p].stages for p, _ in fields)
    most = max(2, deepest) if info.grid == "persistent" or _dynamic(body) else 1
    seen = set()
    for choice in trip_choices(info, roles, stages):
        names = tuple(sorted(choice.names.items()))
        if names in seen:
            continue
        seen.add(names)
        for tiles in range(1, most + 1):
            trips = Trips(choice.names, choice.tile_value, tiles)
            try:
                _run(body, fields, pipes, trips, budget)
            except role_waits.Unknown:
                break


def _dynamic(body: list) -> bool:
    return any(isinstance(s, ast.ForTiles) and s.dynamic for s in ast.statements(body))


def _run(body: list, fields: set, pipes: dict[str, Pipeline], trips: Trips, budget: list) -> None:
    state = _State({p: pipes[p].stages for p, _ in fields}, dict.fromkeys(fields), {p: 0 for p, _ in fields}, set())
    for event in _events(body, dict(trips.names), trips, {}):
        budget[0] -= 1
        if budget[0] < 0:
            raise _Budget
        _step(state, fields, pipes, trips, *event)


def _events(body: list, env: dict, trips: Trips, slots: dict):
    """(statement, slots, leaving) in the order the role runs them under `trips`; a produce or
    consume block comes once on entry (leaving False) and once at its end (leaving True)."""
    for stmt in body:
        if isinstance(stmt, (ast.Produce, ast.Consume)):
            inner = {**slots, stmt.slot: (stmt.pipeline.name, isinstance(stmt, ast.Produce))}
            yield stmt, slots, False
            yield from _events(stmt.body, env, trips, inner)
            yield stmt, slots, True
        elif isinstance(stmt, ast.ForTiles):
            for t in range(trips.tiles):
                yield from _events(stmt.body, role_waits.tile_env(stmt, t, env, trips), trips, slots)
        elif isinstance(stmt, ast.ForSteps):
            for k in range(role_waits.trip_count(stmt, env)):
                yield from _events(stmt.body, {**env, stmt.var: k}, trips, slots)
        elif getattr(stmt, "body", None):
            yield from _events(stmt.body, env, trips, slots)
        else:
            yield stmt, slots, False


def _step(state: _State, fields: set, pipes, trips: Trips, stmt, slots: dict, leaving: bool) -> None:
    if isinstance(stmt, ast.Produce):
        if leaving and stmt.pipeline.name in state.item:
            state.item[stmt.pipeline.name] += 1
        return
    target = _tmem_target(stmt, pipes, slots)
    if target is None or target[:2] not in fields:
        return
    key = target[:2]
    item = state.item[key[0]]
    stage = item % state.stages[key[0]]
    written = (*key, stage) in state.written
    if isinstance(stmt, ast.Mma):
        if state.flag[key] is not None and not written:
            raise _refusal(stmt, key, item, stage, state.flag[key], trips)
        state.flag[key] = (stmt, item)
    elif isinstance(stmt.value, ast.Number) and not stmt.row_math:   # `t.d = 0`: the next MMA overwrites
        state.flag[key] = None
        return
    elif not stmt.row_math:                                            # a copy: written, and added onto
        state.flag[key] = (stmt, item)
    state.written.add((*key, stage))


def _refusal(mma: ast.Mma, key: tuple[str, str], item: int, stage: int, setter: tuple, trips: Trips) -> TmalangError:
    pipe, field = key
    slot, (stmt, set_in) = mma.acc.name, setter
    what = ("this MMA" if stmt is mma else "the MMA at " + stmt.span.location()) if isinstance(stmt, ast.Mma) \
        else "the copy at " + stmt.span.location()
    notes = [
        f"item {item + 1} of pipeline '{pipe}' is the first in stage {stage}, and {what}, in item {set_in + 1}, "
        "left the tile's accumulate flag set",
        f"a launch can make this run: {_runs(trips)}",
        f"the flag is one per tile name, not per stage: write `{slot}.{field} = 0` at the top of the produce block, "
        "so that each item's first MMA overwrites (examples/gemm_sm100.tma), or copy a value in first "
        f"(`{slot}.{field} = tile`); on the GPU the MMA adds onto whatever Tensor Memory held (E422 on the "
        "interpreter)",
    ]
    return error(CODE, f"mma adds onto stage {stage} of '{pipe}.{field}', which nothing has written", mma.span, *notes)


def _runs(trips: Trips) -> str:
    tiles = f"a CTA walks {trips.tiles} tile{'s' if trips.tiles > 1 else ''}"
    sizes = ", ".join(f"{name} = {value}" for name, value in sorted(trips.names.items()))
    return tiles + (f", with {sizes}" if sizes else "")

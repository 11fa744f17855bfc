"""Every schedule of the recorded agents: breadth-first search over the model's states.

Requires: a Model (model.py). Guarantees: `explore` returns either the number of states it
visited, having visited every state reachable under some schedule of the agents' steps up to
persistent-set reduction (so every deadlock, and every step taken in another phase than the
recorded one), or the shortest schedule it found that reaches a Violation or a deadlock.

Reduction (persistent sets, Godefroid 1996): from a state, only the steps of a set of agents
closed under "may touch the same barrier, now or later" are tried. Two steps that touch
different barriers commute: taking them in either order reaches the same state, and neither
enables, disables or changes the other. Any schedule that starts with a step outside the set is
then equivalent to one that starts inside it, so no deadlock and no out-of-phase step is lost.
The state graph is acyclic (every step advances one agent), so the reduction needs no proviso.
`reduce=False` tries every agent (a check of the reduction in tests).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .model import Model, State, Violation, barrier_name

DEFAULT_STATE_LIMIT = 2_000_000
PROGRESS = False


@dataclass
class Counterexample:
    schedule: list[tuple[int, int]]     # (agent, step index) in order, the last one failing or blocked
    violation: Violation
    state: State


@dataclass
class Explored:
    states: int
    complete: bool                      # False: the state limit stopped the search
    counterexample: Counterexample | None = None


def explore(model: Model, reduce: bool = True, limit: int = DEFAULT_STATE_LIMIT) -> Explored:
    touches = _touches(model) if reduce else None
    start = model.initial()
    parent: dict[State, tuple[State, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        enabled = [i for i in range(len(model.agents)) if model.enabled(state, i)]
        if not enabled:
            stuck = [i for i in range(len(model.agents)) if not model.finished(state, i)]
            if stuck:
                return Explored(len(parent), True, _deadlock(model, state, stuck, parent))
            continue
        for i in _persistent(model, state, enabled, touches) if reduce else enabled:
            try:
                after = model.step(state, i)
            except Violation as v:
                return Explored(len(parent), True, Counterexample(_schedule(model, parent, state) +
                                                                  [(i, _place(model, state, i))], v, state))
            if after not in parent:
                parent[after] = (state, i)
                if len(parent) % 100_000 == 0 and PROGRESS:
                    print(f"verify: {len(parent)} states, {len(queue)} queued", flush=True)
                if len(parent) > limit:
                    return Explored(len(parent), False)
                queue.append(after)
    return Explored(len(parent), True)


# ---- persistent sets
#
# What a step touches is three bit masks over the barriers, rendezvous and named barriers of the
# model (one bit each): what it reads (waits), counts up (reaches a rendezvous) and writes.

def _touches(model: Model) -> list[list[tuple[Access, Access]]]:
    """Per agent and place: (the masks of its next step, the masks of it and every later step).
    A step that issues a transfer writes what the transfer touches: it enables it."""
    bits: dict = {}
    own = {a.key: [_access(step, bits) for step in a.steps] for a in model.agents}
    result = []
    for a in model.agents:
        steps = []
        for access, step in zip(own[a.key], a.steps):
            for e in step:
                if e[0] == "issue":
                    access = (access[0], access[1], access[2] | own[e[1]][0][0] | own[e[1]][0][1] | own[e[1]][0][2])
            steps.append(access)
        later, rows = NOTHING, []
        for access in reversed(steps):
            later = (later[0] | access[0], later[1] | access[1], later[2] | access[2])
            rows.append((access, later))
        result.append(list(reversed(rows)) + [(NOTHING, NOTHING)])
    return result


Access = tuple   # (read mask, count mask, write mask)
NOTHING: Access = (0, 0, 0)
READS = {"wait", "leave", "named_leave"}   # blocking events only look: two of them commute
COUNTS = {"meet"}                          # reaching a rendezvous counts up: two of them commute


def _access(step: list[tuple], bits: dict) -> Access:
    masks = [0, 0, 0]
    for e in step:
        if e[0] != "issue":
            mode = 0 if e[0] in READS else 1 if e[0] in COUNTS else 2
            masks[mode] |= 1 << bits.setdefault(e[1], len(bits))
    return tuple(masks)


def _conflict(a: Access, b: Access) -> bool:
    """Steps that do not commute: one writes what the other touches, or one counts up what the
    other reads."""
    return bool(a[2] & (b[0] | b[1] | b[2]) or b[2] & (a[0] | a[1]) or a[0] & b[1] or a[1] & b[0])


def _persistent(model: Model, state: State, enabled: list[int], touches) -> list[int]:
    """The smallest closed set of agents over the enabled ones; its enabled agents."""
    rows = [touches[i][_place(model, state, i)] for i in range(len(model.agents))]
    best = None
    for first in enabled:
        members = _closure(rows, first)
        if best is None or len(members) < len(best):
            best = members
            if len(best) == 1:
                break
    return [i for i in enabled if i in best]


def _closure(rows: list, first: int) -> set[int]:
    """Agents whose steps, now or later, conflict with the next step of a member (a blocked
    member's next step included: whoever may unblock it writes what it reads)."""
    members = {first}
    nexts = rows[first][0]
    grew = True
    while grew:
        grew = False
        for j, (step, later) in enumerate(rows):
            if j not in members and _conflict(nexts, later):
                members.add(j)
                nexts = (nexts[0] | step[0], nexts[1] | step[1], nexts[2] | step[2])
                grew = True
    return members


def _place(model: Model, state: State, i: int) -> int:
    return max(state.places[i], 0) if model.agents[i].is_transfer else state.places[i]


# ---- counterexamples

def _schedule(model: Model, parent: dict, state: State) -> list[tuple[int, int]]:
    steps = []
    while parent[state] is not None:
        before, i = parent[state]
        steps.append((i, _place(model, before, i)))
        state = before
    return list(reversed(steps))


def _deadlock(model: Model, state: State, stuck: list[int], parent: dict) -> Counterexample:
    return Counterexample(_schedule(model, parent, state), deadlock_violation(model, state, stuck), state)


def deadlock_violation(model: Model, state: State, stuck: list[int]) -> Violation:
    notes = [f"{model.names[i]} waits at {model.agents[i].where(_place(model, state, i))} on "
             f"{_waiting_for(model, state, i)}" for i in stuck if not model.agents[i].is_transfer]
    return Violation("E401", "deadlock: every live warp is blocked and no copy is in flight", notes)


def _waiting_for(model: Model, state: State, i: int) -> str:
    event = model.next_step(state, i)[0]
    if event[0] == "wait":
        initialised, pending, tx, completed = state.bars[model.bar_index[event[1]]]
        return (f"mbarrier {barrier_name(event[1])} parity {event[2]} (phase {completed} in progress, {pending} of "
                f"{model.counts.get(event[1])} arrivals missing" + (f", {tx} tx bytes outstanding)" if tx else ")"))
    if event[0] == "leave":
        return f"a rendezvous of {len(event[2])} warps"
    return f"named barrier {event[1][1]}"

"""Every trip count of one loop from finitely many: the cutoff argument on a pumped recording.

Requires: a Pumped (pumping.py): R(t0 + n) = X · Y · … · Y+(n-1) · Z+n for every n (the premise
docs/interpreter.md, "Every trip count", states and loop_shape.py checks on the IR).

Guarantees: `cutoff` returns a Cutoff when the happens-before checks A, B, C, P and I hold on
R(t0 + n) for every n >= 0, shown from R(t0 + n), n <= N, and the conditions that make those
stand for the rest:
- M (monotone copies): every happens-before edge runs from a step of copy i to one of copy >= i
  (X first, Z last), so a chain between two steps stays within the copies between them;
- reach: from positions alone (Pumped.reach), a check instance (a pair of A or C, a wait of B, a
  phase of P) that touches neither X nor Z spans at most w copies, one that touches X ends within
  the first a copies, one that touches Z starts within the last b, and N >= a + b + w + 2;
- bridges: an instance that touches both X and Z holds through a warp that runs in every copy
  (u -> its first step of copy 0, its last step of copy N-1 -> v), which no n changes.
Otherwise the reason the argument does not apply, or the trip count at which a check fails.
"""

from __future__ import annotations

from dataclasses import dataclass

from .happens_before import Order, findings
from .pumping import Pumped


CLOCK_LIMIT = 2e7


@dataclass
class Cutoff:
    """What was shown: `copies` the N checked, and the widths that made N enough."""

    copies: int
    a: int
    b: int
    w: int


def cutoff(pumped: Pumped, copies: int) -> Cutoff | str:
    """The argument with N = the larger of `copies` and a + b + w + 2 (Pumped.reach)."""
    reach = pumped.reach()
    if isinstance(reach, str):
        return reach
    a, b, w = reach
    return _cutoff(pumped, max(copies, a + b + w + 2), reach)


def _cutoff(pumped: Pumped, copies: int, reach: tuple) -> Cutoff | str:
    """R(t0 + N) first (its order and windows), then the checks on every R(t0 + n), n <= N."""
    for n in [copies] + list(range(copies)):
        recording, labels, completed = pumped.recording(n)
        if isinstance(completed, str):
            return f"at trip count {pumped.t0 + n} the built run does not complete: {completed}"
        size = sum(len(a.steps) for a in recording.agents) * len(recording.agents)
        if size > CLOCK_LIMIT:          # the vector clocks: one entry per agent for every step
            return (f"the built run of {copies} copies is too large to check here ({size:.1e} clock entries, "
                    f"over {CLOCK_LIMIT:.0e})")
        order = Order(recording)
        found = findings(order, completed)
        if found:
            return f"at trip count {pumped.t0 + n}: {found[0].code}, {found[0].why}"
        if n == copies:
            copy = _copies(order, labels)
            shown = _descending_edge(order, copy) or _windows(order, completed, copy, copies, reach)
            if not isinstance(shown, Cutoff):
                return shown
    return shown


def _copies(order: Order, labels: dict) -> dict:
    """Each step's copy (pumping.py's labels); a floating step goes in the latest copy of what
    directly happens before it."""
    copy = {(order.index[key], p): label for (key, p), label in labels.items()}
    for _, i, p in order.steps:
        if copy[(i, p)] is None:
            copy[(i, p)] = max([-1] + [copy[q] for q in order.predecessors((i, p))])
    return copy


def _descending_edge(order: Order, copy: dict) -> str | None:
    found = _descending(order, copy)
    if found is None:
        return None
    step, late = found
    return (f"{order.agents[step[0]].name} in copy {copy[step]} comes after a step of copy {copy[late]} "
            f"({order.agents[late[0]].name}): the copies are not ordered")


def _descending(order: Order, copy: dict) -> tuple | None:
    for step in copy:
        late = next((q for q in order.predecessors(step) if copy[q] > copy[step]), None)
        if late is not None:
            return step, late
    return None


def aligned(pumped: Pumped, tries: int = 12) -> Pumped | None:
    """The pumping with each warp's copies started early enough that no edge runs back across
    copies (check M): each round moves back (Pumped.moved) every warp with a step that waits for a
    later copy's, by as many copies; None when a warp cannot move back that far."""
    back = {key: 0 for key in pumped.warps}
    most = {key: pumped.most_back(key) for key in pumped.warps}
    for _ in range(tries):
        moved = pumped.moved(back)
        recording, labels, completed = moved.recording(3)
        if isinstance(completed, str):
            return None
        order = Order(recording)
        copy = _copies(order, labels)
        need = dict(back)
        for step in copy:
            target = max((copy[q] for q in order.predecessors(step)), default=-1)
            if target > copy[step]:
                i, p = _issuing(order, step)
                key = order.agents[i].key
                need[key] = max(need[key], _rotation_to(pumped, key, p, target))
        if need == back:
            return moved
        if any(need[key] > most[key] for key in need):
            return None
        back = need
    return None


def _rotation_to(pumped: Pumped, key, index: int, copy: int) -> int:
    """Steps to rotate warp `key` back (Pumped.moved) for its step `index` of the built run to be
    in copy `copy` or later: copy c starts at len(X) - r + c·len(Y)."""
    _, xs, ys, _ = pumped.warps[key]
    return len(xs) + copy * len(ys) - index if ys else 10 ** 9


def _issuing(order: Order, step: tuple) -> tuple:
    """The warp step whose copies a step follows: itself, or, for a transfer, the step that issued it."""
    return order.fixed[step][0] if order.agents[step[0]].is_transfer else step


def _windows(order: Order, completed: dict, copy: dict, n: int, reach: tuple) -> Cutoff | str:
    """Every check instance that touches both X and Z holds through a bridge; the rest are within
    the reach of X, of Z, or w copies wide (Pumped.reach), which n copies hold apart."""
    bridges = _bridges(order, copy, n)

    def place(steps, needs=None) -> str | None:
        labels = {copy[s] for s in steps}
        if -1 in labels and n in labels:
            return None if needs is not None and needs(bridges) else "x-z"
        return None

    for bar, phases in order.phases.items():
        for k, events in phases.items():
            for u in phases.get(k - 1, ()):
                for v in events:                                            # A
                    if place([u[:2], v[:2]], lambda g: _bridged(order, g, u[:2], v[:2])):
                        return _unbridged(order, u[:2], v[:2])
            if bar[0] != "named" and any(d is not None for *_, d in events):
                if place([e[:2] for e in events]):                          # P
                    return "a phase's byte counts lie before and after the loop"
    for i, p, bar, k in order.waits:
        w = (i, p)
        phases = order.phases.get(bar, {})
        for u in phases.get(k - 1, ()):                                     # C
            if place([u[:2], w], lambda g: _bridged(order, g, u[:2], w, order.base)):
                return _unbridged(order, u[:2], w)
        following = [e[:2] for e in phases.get(k + 1, ())]
        if completed.get(bar, 0) > k + 1 and following:                     # B
            if place([w, *following], lambda g: any(_bridged(order, g, w, e) for e in following)):
                return _unbridged(order, w, following[0])
    init_issue = _init_before_copies(order, copy, n)
    if init_issue:
        return init_issue
    return Cutoff(n, *reach)


def _bridges(order: Order, copy: dict, n: int) -> list[tuple]:
    """Warps with steps in every copy: (first step of copy 0, last step of copy n - 1)."""
    found = []
    for i, a in enumerate(order.agents):
        if a.is_transfer:
            continue
        mine = [p for p in range(len(a.steps)) if 0 <= copy[(i, p)] < n]
        if mine and {copy[(i, p)] for p in mine} == set(range(n)):
            first = min(p for p in mine if copy[(i, p)] == 0)
            last = max(p for p in mine if copy[(i, p)] == n - 1)
            found.append(((i, first), (i, last)))
    return found


def _bridged(order: Order, bridges: list, u: tuple, v: tuple, clocks=None) -> bool:
    return any(order.before(u, first) and order.before(last, v, clocks) for first, last in bridges)


def _unbridged(order: Order, u: tuple, v: tuple) -> str:
    return (f"an order between {order.agents[u[0]].name} before the loop and {order.agents[v[0]].name} after "
            "it passes through no warp that runs every iteration")


def _init_before_copies(order: Order, copy: dict, n: int) -> str | None:
    """I for every n: each warp that uses a barrier (or issues a transfer that does) in a copy has
    the barrier's init before its first step of copy 0, and so, in program order, before all."""
    for i, p, bar in order.uses:
        init = order.inits.get(bar)
        if init is None or not 0 <= copy[(i, p)] < n:
            continue
        user = _issuing(order, (i, p))
        first = min(q for q in range(len(order.agents[user[0]].steps)) if copy[(user[0], q)] >= 0)
        if not order.before(init, (user[0], first)):
            return f"{order.agents[user[0]].name} can use a barrier in the loop before its initialisation"
    return None

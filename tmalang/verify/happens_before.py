"""Every schedule at once: checks on the recorded run's happens-before order.

Requires: a Recording (record.py) whose steps carry the time they ran. Guarantees: `findings`
returns the conditions under which some schedule takes an event in another phase than the
recorded run did, or uses a barrier before its initialisation; with none, no schedule does, and
no schedule deadlocks (docs/interpreter.md, "Verification", gives the argument). Each finding
names steps that can run while others are held back: schedule.py turns that into a schedule the
model replays to the violation.

The order. A step happens before another when a chain of these edges joins them:
- program order: an agent's steps, one after the other;
- issue: the step that issues a transfer, before the transfer lands;
- phase: every arrival and byte count of phase k of a barrier, before each wait that observed
  phase k in the recorded run (and likewise for named barriers);
- rendezvous: every member reaching it, before each member leaving it.
Each step gets a vector clock over the agents (one entry each), computed in the recorded order,
which is one linearisation of these edges. `base` is the clock without the step's own phase
edges: what must have happened before the step is even tried.

The checks, per barrier b and phase k (A, B, C and P of the argument):
- A: every event of phase k - 1 happens before each arrival and byte count of phase k;
- B: a wait that observed phase k happens before some event of phase k + 1, when that phase
  completed (else phase k + 1 could complete first and the wait would pass on a later phase);
- C: every event of phase k - 1 happens before the wait's base (else the wait, tried early,
  passes on phase k - 2);
- P: no set of byte counts of phase k that may have run when its last arrival does sums to
  zero short of all of them (an early completion) or below zero (E403);
- I: the initialisation of b happens before every other use of b.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from .record import Recording

SUBSETS_LIMIT = 12    # P enumerates subsets of a phase's byte-count steps up to this many


@dataclass(frozen=True)
class Finding:
    """A schedule runs `targets` (steps, (agent, step)) while every step of `held` waits: the
    targets' pasts first (for a wait among the targets, its past without its own phase edges when
    `early_wait`), then the targets, in the recorded order."""

    code: str
    targets: tuple
    held: tuple
    why: str
    early_wait: bool = False


class Order:
    """The steps of a recording, their clocks, and which event of which phase each holds."""

    def __init__(self, recording: Recording):
        self.agents = recording.agents
        self.index = {a.key: i for i, a in enumerate(self.agents)}
        self.steps = sorted(((a.times[p], i, p) for i, a in enumerate(self.agents) for p in range(len(a.steps))))
        self.phases: dict[tuple, dict[int, list[tuple]]] = {}    # barrier -> phase -> [(agent, step, delta|None)]
        self.waits: list[tuple] = []                              # (agent, step, barrier, phase)
        self.inits: dict[tuple, tuple] = {}
        self.uses: list[tuple] = []                               # (agent, step, barrier)
        self._index_events()
        self.fixed, self.observed = self._edges()
        self.base, self.clock = self._clocks()

    def _index_events(self) -> None:
        for i, a in enumerate(self.agents):
            for p, step in enumerate(a.steps):
                for e in step:
                    kind = e[0]
                    if kind == "init":
                        self.inits[e[1]] = (i, p)
                    elif kind in ("arrive", "tx"):
                        self.phases.setdefault(e[1], {}).setdefault(e[3], []).append(
                            (i, p, e[2] if kind == "tx" else None))
                        self.uses.append((i, p, e[1]))
                    elif kind == "wait":
                        self.waits.append((i, p, e[1], e[3]))
                        self.uses.append((i, p, e[1]))
                    elif kind == "named":
                        self.phases.setdefault(("named",) + e[1], {}).setdefault(e[3], []).append((i, p, None))

    def _edges(self) -> tuple[dict, dict]:
        """Each step's direct predecessors, in two parts: `fixed` (the agent's step before, a
        transfer's issuing step, the members that reached a rendezvous or a named barrier's phase it
        leaves) and `observed` (the events of the phase a wait observed)."""
        fixed: dict[tuple, list[tuple]] = {}
        observed: dict[tuple, list[tuple]] = {}
        issuer, reached = {}, {}
        for i, a in enumerate(self.agents):
            for p, step in enumerate(a.steps):
                for e in step:
                    if e[0] == "issue":
                        issuer[e[1]] = (i, p)
                    if e[0] == "meet":
                        reached.setdefault(("meet", e[1]), []).append((i, p))
        for i, a in enumerate(self.agents):
            for p, step in enumerate(a.steps):
                before = fixed.setdefault((i, p), [(i, p - 1)] if p else [])
                if p == 0 and a.key in issuer:
                    before.append(issuer[a.key])
                for e in step:
                    if e[0] == "leave":
                        before += reached.get(("meet", e[1]), [])
                    elif e[0] == "named_leave":
                        before += [q[:2] for q in self.phases.get(("named",) + e[1], {}).get(e[2], ())]
                    elif e[0] == "wait" and e[3] >= 0:
                        observed.setdefault((i, p), []).extend(q[:2] for q in self.phases.get(e[1], {}).get(e[3], ()))
        return fixed, observed

    def predecessors(self, step: tuple) -> list[tuple]:
        """A step's direct happens-before predecessors (every kind of edge)."""
        return self.fixed[step] + self.observed.get(step, [])

    def _clocks(self):
        """Vector clocks in the recorded order (a linearisation of the edges): `base` without the
        step's own phase edges, `clock` with them."""
        n = len(self.agents)
        base: dict[tuple, list[int]] = {}
        clock: dict[tuple, list[int]] = {}
        for _, i, p in self.steps:
            vc = [0] * n
            for q in self.fixed[(i, p)]:
                _join(vc, clock[q])
            vc[i] = p + 1
            base[(i, p)] = list(vc)
            for q in self.observed.get((i, p), ()):
                _join(vc, clock[q])
            clock[(i, p)] = vc
        return base, clock

    def before(self, u: tuple, v: tuple, clocks=None) -> bool:
        """Step u happens before step v (or is v)."""
        return u[1] + 1 <= (clocks or self.clock)[v][u[0]]


def _join(into: list[int], other: list[int]) -> None:
    for k, x in enumerate(other):
        if x > into[k]:
            into[k] = x


def findings(order: Order, completed: dict[tuple, int]) -> list[Finding]:
    """`completed`: phases each barrier completed in the recorded run (the model's replay)."""
    found = []
    found += _initialised_first(order)
    found += _phases_in_turn(order)
    found += _waits_bounded(order, completed)
    found += _bytes_complete_last(order)
    return found


def _initialised_first(order: Order) -> list[Finding]:
    found = []
    for i, p, bar in order.uses:
        init = order.inits.get(bar)
        if init is not None and not order.before(init, (i, p)):
            found.append(Finding("E409", ((i, p),), (init,), "a use of the barrier can run before its initialisation"))
    return found


def _phases_in_turn(order: Order) -> list[Finding]:
    """A: the events of phase k - 1 happen before each event of phase k."""
    found = []
    for phases in order.phases.values():
        for k, events in phases.items():
            for i, p, _ in events:
                late = next((q for q in phases.get(k - 1, ()) if not order.before(q[:2], (i, p))), None)
                if late is not None:
                    found.append(Finding("E425", ((i, p),), (late[:2],), f"it can take effect before phase {k - 1} "
                                         "completes"))
    return found


def _waits_bounded(order: Order, completed: dict[tuple, int]) -> list[Finding]:
    """B and C: a wait can pass neither before the phase before its own, nor after the next."""
    found = []
    for i, p, bar, k in order.waits:
        phases = order.phases.get(bar, {})
        late = next((q for q in phases.get(k - 1, ()) if not order.before(q[:2], (i, p), order.base)), None)
        if late is not None:
            found.append(Finding("E425", ((i, p),), (late[:2],), f"tried before phase {k - 1} completes, it passes "
                                 "on an earlier phase", early_wait=True))
        following = phases.get(k + 1, ())
        if completed.get(bar, 0) > k + 1 and not any(order.before((i, p), q[:2]) for q in following):
            found.append(Finding("E425", (*(q[:2] for q in following), (i, p)), (),
                                 f"phase {k + 1} can complete before it, and it then passes on a later phase"))
    return found


def _bytes_complete_last(order: Order) -> list[Finding]:
    """P: a phase completes with its last event, whatever the order of its byte counts."""
    found = []
    for bar, phases in order.phases.items():
        if bar[0] == "named":
            continue
        for k, events in phases.items():
            found += _phase_bytes(order, bar, k, events)
    return found


def _phase_bytes(order: Order, bar: tuple, k: int, events: list[tuple]) -> list[Finding]:
    arrivals = {(i, p) for i, p, delta in events if delta is None}
    deltas: dict[tuple, int] = {}
    for i, p, delta in events:
        if delta is not None:
            deltas[(i, p)] = deltas.get((i, p), 0) + delta
    free = [s for s in deltas if s not in arrivals]      # byte counts not in an arrival's step
    if not free or len(free) > SUBSETS_LIMIT:
        return []
    forced = sum(d for s, d in deltas.items() if s in arrivals)
    for size in range(len(free)):
        for taken in combinations(free, size):
            rest = [s for s in free if s not in taken]
            if any(order.before(r, s) for r in rest for s in [*arrivals, *taken]):
                continue   # not a state a schedule can reach: a byte count left out happens before one taken
            total = forced + sum(deltas[s] for s in taken)
            if total < 0:
                return [Finding("E403", (*arrivals, *taken), tuple(rest), f"its arrivals can complete with {-total} "
                                "more bytes landed than expected")]
            if total == 0:
                return [Finding("E425", (*arrivals, *taken), tuple(rest), f"phase {k} can complete before its byte "
                                "counts are all in")]
    return []

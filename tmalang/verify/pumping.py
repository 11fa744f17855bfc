"""A loop's recordings pumped: R(t0 + n) = X · Y · Y+1 · … · Y+(n-1) · Z+n, for every n, from four.

Requires: the recordings (record.py) of one kernel at launches that differ only in one loop's trip
count, t0, t0 + 1, t0 + 2 and t0 + 3 (one launch step apart).

Guarantees: `pump` returns a Pumped when each warp's steps at t0 + n (n = 1, 2, 3) are its steps
at t0 with n more copies of a block Y, found from the first three, where copy j is Y with every barrier, rendezvous and
named barrier moved j places along its ring (`shifts`: how far one copy moves each), and the rest
(Z) moved with them; otherwise the reason it is not. `Pumped.recording(n)` builds R(t0 + n) for any
n, with each step's copy in `labels` (-1: X, n: Z), in an order the model can run.

Positions. A barrier `name` of S stages is a ring: phase k of stage s is position k·S + s (a wait
that passed freely, phase -1, sits at -S + s). A rendezvous' n-th meeting is position n, a named
barrier's phase k position k. A copy moves every event of a family by the same amount, so the
happens-before edges among copies (which match arrivals and waits by position) repeat with them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Model, Violation
from .record import Agent, Recording


@dataclass
class Pumped:
    """Per warp: its steps in X, Y and Z (canonical events); the shift one copy applies per family."""

    t0: int
    warps: dict          # key -> (name, X, Y, Z): lists of (canonical step, span)
    shifts: dict         # family -> positions one copy moves it
    stages: dict         # (cta, name) -> stages of that barrier
    counts: dict

    def reach(self) -> tuple[int, int, int] | str:
        """(a, b, w) from positions alone, for every n: the copies whose events can share a check
        with X's (a, from the start) or with Z's (b, from the end), and the most copies one check
        can span (w). A check relates phases k - 1, k and k + 1 of a barrier: positions up to S
        apart (S its stages; 1 for a named barrier)."""
        spans: dict = {}
        for _, xs, ys, zs in self.warps.values():
            for part, steps in (("X", xs), ("Y", ys), ("Z", zs)):
                for step, _ in steps:
                    for fam, pos in _positions(step):
                        spans.setdefault(fam, {}).setdefault(part, []).append(pos)
        a = b = w = 0
        for fam, parts in spans.items():
            d, ys = self.shifts.get(fam, 0), parts.get("Y", [])
            if not ys or fam[0] == "meet":
                continue
            if d <= 0:
                return f"{_family_name(fam)} does not move from one copy to the next, yet the loop uses it"
            near = self.stages.get(fam[1:], 1) if fam[0] == "bar" else 1
            w = max(w, (max(ys) - min(ys) + 2 * near) // d + 1)
            if parts.get("X"):
                a = max(a, (max(parts["X"]) + near - min(ys)) // d + 1)
            if parts.get("Z"):
                b = max(b, (max(ys) + near - min(parts["Z"])) // d + 1)
        return a, b, w

    def most_back(self, key) -> int:
        """How many steps warp `key`'s copies can start earlier: where X ends with a step equal to
        Y's last moved back one copy, that step can open Y instead (a rotation, `moved`). Warps
        must agree on where copies start for the copies to be ordered (every_trip_count.aligned)."""
        _, xs, ys, _ = self.warps[key]
        r = 0
        while ys and r < len(xs) and xs[-1 - r][0] == _shifted_step(ys[-1 - r % len(ys)][0], -(1 + r // len(ys)),
                                                                   self.shifts):
            r += 1
        return r

    def moved(self, back: dict) -> "Pumped":
        """Each warp's X, Y, Z rotated back by `back[key]` steps: with x = X's last step, equal to
        Y's last moved back one copy, X·Y·Z+1 = X'·(x·Y')·(x·Z)+1, Y' = Y without its last step."""
        warps = {}
        for key, (name, xs, ys, zs) in self.warps.items():
            for _ in range(back.get(key, 0)):
                x = xs[-1]
                xs, ys, zs = xs[:-1], [x] + ys[:-1], [x] + zs
            warps[key] = (name, xs, ys, zs)
        return Pumped(self.t0, warps, self.shifts, self.stages, self.counts)

    def recording(self, n: int) -> tuple[Recording, dict, str | dict]:
        """R(t0 + n); each step's copy ((agent key, step) -> -1 for X, j, n for Z); and the phases
        each barrier completed when the model runs it, or why the model cannot run it all."""
        build = _Builder(self)
        for key, (name, xs, ys, zs) in self.warps.items():
            parts = [(xs, 0, -1)] + [(ys, j, j) for j in range(n)] + [(zs, n, n)]
            build.warp(key, name, parts)
        return build.finish()


def pump(r0: Recording, r1: Recording, r2: Recording, t0: int, *later: Recording) -> Pumped | str:
    """From R(t0), R(t0 + 1) and R(t0 + 2); each of `later` (R(t0 + 3), …) must be built alike."""
    runs = [r0, r1, r2, *later]
    stages = {}
    for r in runs:
        stages |= _stages(r)
    canon = [_canonical(r, stages) for r in runs]
    c0, c1, c2 = canon[:3]
    if any(set(c) != set(c0) for c in canon):
        return "the warps that synchronise differ between trip counts"
    warps, pairs = {}, []
    for key in c0:
        a, b = c0[key][1], c1[key][1]
        x = _common_prefix(a, b)
        grown = len(b) - len(a)
        if grown < 0:
            return f"{c0[key][0]} takes fewer steps at trip count {t0 + 1} than at {t0}"
        zs, ys = a[x:], b[x:x + grown]
        pairs += [(s[0], t[0]) for s, t in zip(zs, b[x + grown:])]
        warps[key] = (c0[key][0], a[:x], ys, zs)
    for key, (_, xs, ys, zs) in warps.items():
        pairs += [(s[0], t[0]) for s, t in zip(ys, c2[key][1][len(xs) + len(ys):])]
    if not any(ys for _, _, ys, _ in warps.values()):
        return "no warp takes more steps as the dim grows (no loop over it runs longer at these launches)"
    shifts = _shifts(pairs)
    if isinstance(shifts, str):
        return shifts
    pumped = Pumped(t0, warps, shifts, stages, dict(r0.counts))
    for n, seen in enumerate(canon[1:], start=1):
        built = _canonical(pumped.recording(n)[0], stages)
        bad = next((seen[k][0] for k in seen if [s for s, _ in seen[k][1]] != [s for s, _ in built[k][1]]), None)
        if bad is not None:
            return f"{bad}'s steps at trip count {t0 + n} are not those at {t0} with {n} more copies of one block"
    if any(e[0] == "init" for _, _, ys, _ in warps.values() for s, _ in ys for e in s):
        return "a barrier is initialised inside the loop"
    return pumped


# ---- canonical events: positions instead of (stage, phase) -----------------------------------


def _stages(r: Recording) -> dict:
    found: dict = {}
    for cta, name, stage in r.counts:
        found[(cta, name)] = max(found.get((cta, name), 0), stage + 1)
    return found


def _canonical(r: Recording, stages: dict) -> dict:
    """key -> (name, [(canonical step, span)]) for each warp; a transfer is folded into the event
    that issued it (its steps, canonical), so that transfers need no names of their own."""
    transfers = {a.key: a for a in r.agents if a.is_transfer}
    out = {}
    for a in r.agents:
        if not a.is_transfer:
            out[a.key] = (a.name, [(tuple(_event(e, stages, transfers) for e in step), span)
                                   for step, span in zip(a.steps, a.spans)])
    return out


def _event(e: tuple, stages: dict, transfers: dict) -> tuple:
    kind = e[0]
    if kind == "init":
        return e
    if kind in ("arrive", "tx", "wait"):
        (cta, name, stage), phase = e[1], e[3]
        pos = phase * stages[(cta, name)] + stage
        return (kind, ("bar", cta, name), pos) + ((e[2],) if kind != "wait" else (e[2] - (phase & 1),))
    if kind in ("meet", "leave"):
        opid, members, count = e[1]
        return (kind, ("meet", opid, members), count)
    if kind == "named":
        return (kind, ("named",) + e[1], e[3], e[2])
    if kind == "named_leave":
        return (kind, ("named",) + e[1], e[2])
    if kind == "issue":
        t = transfers[e[1]]
        return (kind, tuple(tuple(_event(x, stages, transfers) for x in step) for step in t.steps), t.name)
    raise ValueError(f"unknown event {e!r}")


def _shift(e: tuple, by: int, shifts: dict) -> tuple:
    if e[0] == "init" or by == 0:
        return e
    if e[0] == "issue":
        return (e[0], tuple(tuple(_shift(x, by, shifts) for x in step) for step in e[1]), e[2])
    return (e[0], e[1], e[2] + by * shifts.get(e[1], 0)) + e[3:]


def _positions(step) -> list[tuple]:
    found = []
    for e in step:
        if e[0] == "issue":
            found += [x for inner in e[1] for x in _positions(inner)]
        elif e[0] != "init":
            found.append((e[1], e[2]))
    return found


def _shifted_step(step: tuple, by: int, shifts: dict) -> tuple:
    return tuple(_shift(e, by, shifts) for e in step)


def _unmoved(e: tuple, shifts: dict) -> bool:
    if e[0] == "issue":
        return all(_unmoved(x, shifts) for step in e[1] for x in step)
    return e[0] == "init" or shifts.get(e[1], 0) == 0


def _common_prefix(a: list, b: list) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n][0] == b[n][0]:
        n += 1
    return n


def _shifts(pairs: list) -> dict | str:
    """From steps that must be the same up to one copy's shift: the shift of each family."""
    shifts: dict = {}
    for s, t in pairs:
        if len(s) != len(t):
            return "a step changes shape from one trip count to the next"
        for e, f in zip(s, t):
            if e[0] != f[0] or e[0] == "init":
                continue
            if e[0] == "issue":
                found = _shifts(list(zip(e[1], f[1])))
                if isinstance(found, str):
                    return found
                items = found.items()
            else:
                items = [(e[1], f[2] - e[2])]
            for fam, d in items:
                if shifts.setdefault(fam, d) != d:
                    return f"{_family_name(fam)} moves by {shifts[fam]} and by {d} from one trip count to the next"
    return shifts


def _family_name(fam: tuple) -> str:
    return f"barrier '{fam[2]}'" if fam[0] == "bar" else f"{fam[0]} {fam[1:]}"


# ---- building R(t0 + n) -------------------------------------------------------------------------


class _Builder:
    def __init__(self, pumped: Pumped):
        self.p = pumped
        self.agents: list[Agent] = []
        self.labels: dict = {}

    def warp(self, key, name, parts) -> None:
        """A warp with no steps in Y may have steps that no copy moves (a final cluster sync): which
        side of the copies they sit on is not fixed by the pumping, so they float (label None) until
        every_trip_count places each after what it waits for."""
        agent = Agent(key, name, cta=key[1] if len(key) > 1 else 0)
        self.agents.append(agent)
        idle = len(parts) == 2 or not parts[1][0]
        for steps, by, label in parts:
            for step, span in steps:
                events = [self._concrete(_shift(e, by, self.p.shifts), agent, label) for e in step]
                still = idle and all(_unmoved(e, self.p.shifts) for e in step)
                self.labels[(key, len(agent.steps))] = None if still else label
                agent.steps.append(events)
                agent.spans.append(span)

    def _concrete(self, e: tuple, issuer: Agent, label) -> tuple:
        kind = e[0]
        if kind == "init":
            return e
        if kind in ("arrive", "tx", "wait"):
            _, cta, name = e[1]
            stages = self.p.stages[(cta, name)]
            phase, stage = divmod(e[2], stages)
            bar = (cta, name, stage)
            return ("wait", bar, e[3] + (phase & 1), phase) if kind == "wait" else (kind, bar, e[3], phase)
        if kind in ("meet", "leave"):
            _, opid, members = e[1]
            return (kind, (opid, members, e[2]), members)
        if kind == "named":
            return (kind, e[1][1:], e[3], e[2])
        if kind == "named_leave":
            return (kind, e[1][1:], e[2])
        key = ("transfer", sum(a.is_transfer for a in self.agents))
        t = Agent(key, e[2], cta=issuer.cta)
        t.steps = [[self._concrete(x, t, label) for x in step] for step in e[1]]
        t.spans = [None] * len(t.steps)
        self.agents.append(t)
        self.labels.update({(key, p): label for p in range(len(t.steps))})
        return ("issue", key)

    def finish(self) -> tuple[Recording, dict, str | dict]:
        recording = Recording(self.agents, dict(self.p.counts))
        return recording, self.labels, _schedule(recording, self.labels)


def _schedule(recording: Recording, labels: dict) -> str | dict:
    """Gives the steps times: an order the model runs them in, each as soon as it can, the lowest
    copy first. The phases each barrier completed, or why the model could not run them all in
    their phases. Only warps and transfers in flight are candidates (a transfer not yet issued
    cannot run), which keeps each step's choice short."""
    model = Model(recording, symmetric=False)
    state, clock = model.initial(), 0
    live = {i for i, a in enumerate(recording.agents) if not a.is_transfer}
    index = {a.key: i for i, a in enumerate(recording.agents)}
    for a in recording.agents:
        a.times = [None] * len(a.steps)
    while live:
        ready = [i for i in live if model.enabled(state, i)]
        if not ready:
            return f"{model.names[min(live)]} cannot go on: the built run stops short"
        i = min(ready, key=lambda i: (labels[(recording.agents[i].key, _place(model, state, i))] or -1, i))
        p = _place(model, state, i)
        issued = [index[e[1]] for e in model.next_step(state, i) if e[0] == "issue"]
        try:
            state = model.step(state, i)
        except Violation as v:
            return f"{v.code}: {v.message}"
        recording.agents[i].times[p] = clock
        clock += 1
        live.update(issued)
        if model.finished(state, i):
            live.discard(i)
    return {bar: state.bars[k][3] for bar, k in model.bar_index.items()}


def _place(model: Model, state, i: int) -> int:
    return 0 if model.agents[i].is_transfer else state.places[i]

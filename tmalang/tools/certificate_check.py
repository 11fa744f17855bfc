"""An independent checker of `verify` certificates (written by tmalang/verify/certificate.py).

    python -m tmalang.tools.certificate_check CERT.json [--ir KERNEL.ir]    # exit 0 accepted, 1 rejected

`check(certificate, ir_text=None)` returns the reasons for rejecting a certificate (empty: accepted).

It imports only the standard library, and shares no code with the verifier: it works from the
definitions of docs/interpreter.md ("Verification", "Certificates") with its own mbarrier
semantics and its own vector clocks.

What it trusts: that the recording is the interpreter's run of the IR (each warp's steps are what
the IR makes it do at that launch). It does not run the interpreter again.

What it re-derives, from the recording alone:
(a) well-formedness: fields and types, every event's shape, every transfer issued once and
    landing after its issue, times a total order, each agent's steps in increasing time;
(b) a replay in recorded time order under its own barrier semantics, in which every step must be
    able to run at its time and every event must take effect in (or observe) its recorded phase;
    the phases each barrier completed must be the certificate's;
(c) the happens-before order (program order, issue, phase and rendezvous edges) as vector
    clocks, and on it the checks A, B, C, P, I, with the counts the certificate claims;
(d) with an IR text, its sha256 is the certificate's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field

FORMAT, VERSION = "tmalang-certificate", 1
SUBSET_LIMIT = 1 << 16     # P: downward-closed sets of one phase's byte counts searched at most
REASONS_SHOWN = 20


class Rejected(Exception):
    """A certificate that cannot be accepted, and why."""


def check(certificate: dict, ir_text: str | None = None) -> list[str]:
    try:
        run = _read(certificate)
        if ir_text is not None:
            _digest_matches(certificate, ir_text)
        completed = _replay(run)
        _same(completed, run.completed, "the phases each barrier completed")
        clocks = _Clocks(run)
        reasons = _checks(run, clocks, completed, certificate["checks"])
    except Rejected as exc:
        return [str(exc)]
    return reasons[:REASONS_SHOWN]


# ---------------------------------------------------------------- (a) reading, well-formedness

@dataclass
class _Run:
    agents: list[tuple]                  # agent keys, in the certificate's order
    steps: list[list[list[tuple]]]       # per agent: its steps, each a list of events
    times: list[list[int]]
    counts: dict[tuple, int]
    completed: dict[tuple, int]
    timeline: list[tuple] = field(default_factory=list)    # (agent, step) in recorded time order
    issuer: dict[tuple, tuple] = field(default_factory=dict)  # transfer key -> (agent, step)

    def is_transfer(self, a: int) -> bool:
        return self.agents[a][0] == "transfer"


def _frozen(value):
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _field(doc, name: str, kind):
    if not isinstance(doc, dict) or name not in doc:
        raise Rejected(f"missing field '{name}'")
    value = doc[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise Rejected(f"field '{name}' is not {getattr(kind, '__name__', kind)}")
    return value


def _read(doc: dict) -> _Run:
    if _field(doc, "format", str) != FORMAT or _field(doc, "version", int) != VERSION:
        raise Rejected(f"not a {FORMAT} version {VERSION} document")
    for name, kind in (("kernel", str), ("ir_sha256", str), ("launch", dict), ("method", str), ("claim", dict),
                       ("checks", dict)):
        _field(doc, name, kind)
    for name, kind in (("dims", dict), ("target", str)):
        _field(doc["launch"], name, kind)
    if "ctas" not in doc["launch"]:
        raise Rejected("missing field 'ctas'")
    recording = _field(doc, "recording", dict)
    run = _Run([], [], [], _table(_field(recording, "counts", list), "counts"),
               _table(_field(recording, "completed", list), "completed"))
    for agent in _field(recording, "agents", list):
        _read_agent(run, agent)
    _in_time_order(run)
    _transfers_issued(run)
    _barriers_known(run)
    return run


def _table(rows: list, what: str) -> dict[tuple, int]:
    table = {}
    for row in rows:
        if not (isinstance(row, list) and len(row) == 2 and _is_bar(row[0]) and _is_int(row[1])):
            raise Rejected(f"'{what}' holds a row that is not [barrier, number]: {row!r}")
        table[_frozen(row[0])] = row[1]
    return table


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_bar(x) -> bool:
    return isinstance(x, list) and len(x) == 3 and _is_int(x[0]) and isinstance(x[1], str) and _is_int(x[2])


def _is_pair(x) -> bool:
    return isinstance(x, list) and len(x) == 2 and all(_is_int(v) for v in x)


def _is_key(x) -> bool:
    """A rendezvous key: [label, members, pass], members a list of [cta, warp]."""
    return (isinstance(x, list) and len(x) == 3 and _is_int(x[0]) and isinstance(x[1], list)
            and all(_is_pair(m) for m in x[1]) and _is_int(x[2]))


SHAPES = {   # kind -> checks of the fields after it (docs/interpreter.md, "Certificates")
    "init": (_is_bar, lambda c: _is_int(c) and c > 0),
    "arrive": (_is_bar, lambda c: _is_int(c) and c > 0, lambda k: _is_int(k) and k >= 0),
    "tx": (_is_bar, _is_int, lambda k: _is_int(k) and k >= 0),
    "wait": (_is_bar, lambda p: p in (0, 1) and _is_int(p), lambda k: _is_int(k) and k >= -1),
    "meet": (_is_key, lambda m: isinstance(m, list) and all(_is_pair(x) for x in m)),
    "leave": (_is_key, lambda m: isinstance(m, list) and all(_is_pair(x) for x in m)),
    "named": (_is_pair, lambda c: _is_int(c) and c > 0, lambda k: _is_int(k) and k >= 0),
    "named_leave": (_is_pair, lambda k: _is_int(k) and k >= 0),
    "issue": (lambda t: isinstance(t, list) and len(t) == 2 and t[0] == "transfer" and _is_int(t[1]),),
}
BLOCKING = ("wait", "leave", "named_leave")


def _read_agent(run: _Run, agent) -> None:
    key = _frozen(_field(agent, "key", list))
    if not (len(key) == 3 and key[0] == "warp" or len(key) == 2 and key[0] == "transfer"):
        raise Rejected(f"agent key {list(key)} is neither a warp nor a transfer")
    if key in run.agents:
        raise Rejected(f"agent {list(key)} appears twice")
    _field(agent, "name", str)
    steps, times = _field(agent, "steps", list), _field(agent, "times", list)
    if len(steps) != len(times) or not all(_is_int(t) for t in times):
        raise Rejected(f"agent {list(key)}: one integer time per step is needed")
    if key[0] == "transfer" and len(steps) != 1:
        raise Rejected(f"transfer {list(key)} has {len(steps)} steps: a transfer lands in one")
    for p, step in enumerate(steps):
        if not isinstance(step, list) or not step:
            raise Rejected(f"agent {list(key)} step {p} is empty")
        for n, event in enumerate(step):
            _event_shape(key, p, n, event)
    run.agents.append(key)
    run.steps.append([[_frozen(e) for e in step] for step in steps])
    run.times.append(list(times))


def _event_shape(key, p: int, n: int, event) -> None:
    where = f"agent {list(key)} step {p}"
    if not isinstance(event, list) or not event or event[0] not in SHAPES:
        raise Rejected(f"{where}: {event!r} is not an event")
    shape = SHAPES[event[0]]
    if len(event) != 1 + len(shape) or not all(ok(x) for ok, x in zip(shape, event[1:])):
        raise Rejected(f"{where}: malformed {event[0]} event {event!r}")
    if event[0] in BLOCKING and n != 0:
        raise Rejected(f"{where}: a {event[0]} can block, so it must open its step")


def _in_time_order(run: _Run) -> None:
    seen: dict[int, tuple] = {}
    for a, times in enumerate(run.times):
        for p, t in enumerate(times):
            if p and t <= times[p - 1]:
                raise Rejected(f"agent {list(run.agents[a])}: step {p} is not later than step {p - 1}")
            if t in seen:
                raise Rejected(f"time {t} is given to two steps: times must be a total order")
            seen[t] = (a, p)
    run.timeline = [seen[t] for t in sorted(seen)]


def _transfers_issued(run: _Run) -> None:
    for a, steps in enumerate(run.steps):
        for p, step in enumerate(steps):
            for e in step:
                if e[0] != "issue":
                    continue
                if e[1] in run.issuer:
                    raise Rejected(f"transfer {list(e[1])} is issued twice")
                if run.is_transfer(a):
                    raise Rejected(f"transfer {list(run.agents[a])} issues another transfer")
                run.issuer[e[1]] = (a, p)
    index = {k: a for a, k in enumerate(run.agents)}
    for key, (a, p) in run.issuer.items():
        if key not in index:
            raise Rejected(f"step {p} of {list(run.agents[a])} issues transfer {list(key)}, which is not recorded")
        if run.times[index[key]][0] <= run.times[a][p]:
            raise Rejected(f"transfer {list(key)} lands before the step that issues it")
    for a, key in enumerate(run.agents):
        if run.is_transfer(a) and key not in run.issuer:
            raise Rejected(f"transfer {list(key)} is never issued")


def _barriers_known(run: _Run) -> None:
    for steps in run.steps:
        for step in steps:
            for e in step:
                if e[0] in ("init", "arrive", "tx", "wait"):
                    if e[1] not in run.counts:
                        raise Rejected(f"barrier {list(e[1])} has no arrival count in 'counts'")
                    if e[1] not in run.completed:
                        raise Rejected(f"barrier {list(e[1])} is missing from 'completed'")
                if e[0] == "init" and e[2] != run.counts[e[1]]:
                    raise Rejected(f"barrier {list(e[1])} is initialised with count {e[2]}, but 'counts' "
                                   f"says {run.counts[e[1]]}")


def _digest_matches(doc: dict, ir_text: str) -> None:
    digest = hashlib.sha256(ir_text.encode()).hexdigest()
    if digest != doc["ir_sha256"]:
        raise Rejected(f"the IR text's sha256 is {digest}, the certificate's {doc['ir_sha256']}: "
                       "it certifies another kernel")


def _same(derived: dict, claimed: dict, what: str) -> None:
    if derived != claimed:
        diff = sorted(set(derived.items()) ^ set(claimed.items()))[:4]
        raise Rejected(f"{what} differ from the replay's: {diff}")


# ---------------------------------------------------------------- (b) replay

@dataclass
class _Mbar:
    """An mbarrier as PTX defines it: a phase completes when its pending arrivals and its
    transaction bytes are both zero; try_wait.parity p passes once the phase of parity p completed."""

    count: int
    pending: int
    tx: int = 0
    completed: int = 0


@dataclass
class _Named:
    count: int = 0        # threads the phase in progress waits for (0: nobody arrived yet)
    arrived: int = 0
    completed: int = 0


class _Replay:
    def __init__(self, run: _Run):
        self.run = run
        self.bars: dict[tuple, _Mbar] = {}
        self.named: dict[tuple, _Named] = {}
        self.met: dict[tuple, set] = {}
        self.issued: set = set()

    def step(self, a: int, p: int) -> None:
        if self.run.is_transfer(a) and self.run.agents[a] not in self.issued:
            raise Rejected(f"{self._who(a, p)} lands before it is issued")
        for e in self.run.steps[a][p]:
            getattr(self, "_" + e[0])(a, p, *e[1:])

    def _who(self, a: int, p: int) -> str:
        return f"step {p} of {list(self.run.agents[a])} (time {self.run.times[a][p]})"

    def _bar(self, a, p, bar) -> _Mbar:
        if bar not in self.bars:
            raise Rejected(f"{self._who(a, p)} uses barrier {list(bar)} before its initialisation")
        return self.bars[bar]

    def _in_phase(self, a, p, what: str, now: int, recorded: int) -> None:
        if now != recorded:
            raise Rejected(f"{self._who(a, p)}: {what} in phase {now} on replay, the certificate says {recorded}")

    def _init(self, a, p, bar, count) -> None:
        if bar in self.bars:
            raise Rejected(f"{self._who(a, p)} initialises barrier {list(bar)} a second time")
        self.bars[bar] = _Mbar(count, count)

    def _arrive(self, a, p, bar, count, phase) -> None:
        b = self._bar(a, p, bar)
        if count > b.pending:
            raise Rejected(f"{self._who(a, p)}: {count} arrivals on {list(bar)} with {b.pending} pending (E402)")
        self._in_phase(a, p, f"its arrival on {list(bar)}", b.completed, phase)
        b.pending -= count
        self._settle(a, p, bar, b)

    def _tx(self, a, p, bar, delta, phase) -> None:
        b = self._bar(a, p, bar)
        self._in_phase(a, p, f"its byte count {delta} on {list(bar)}", b.completed, phase)
        b.tx += delta
        self._settle(a, p, bar, b)

    def _settle(self, a, p, bar, b: _Mbar) -> None:
        if b.pending == 0 and b.tx < 0:
            raise Rejected(f"{self._who(a, p)}: {list(bar)} has its arrivals with {-b.tx} bytes too many landed (E403)")
        if b.pending == 0 and b.tx == 0:
            b.completed, b.pending = b.completed + 1, b.count

    def _wait(self, a, p, bar, parity, phase) -> None:
        b = self._bar(a, p, bar)
        if (b.completed - 1) & 1 != parity:
            raise Rejected(f"{self._who(a, p)}: its wait on {list(bar)} for parity {parity} cannot pass at its time "
                           f"({b.completed} phases completed)")
        self._in_phase(a, p, f"its wait on {list(bar)} observes", b.completed - 1, phase)

    def _meet(self, a, p, key, members) -> None:
        agent = self.run.agents[a]
        if agent[0] != "warp" or (agent[1], agent[2]) not in members or key[1] != members:
            raise Rejected(f"{self._who(a, p)} meets at a rendezvous it is not a member of")
        met = self.met.setdefault(key, set())
        if a in met:
            raise Rejected(f"{self._who(a, p)} meets at the same rendezvous twice")
        met.add(a)

    def _leave(self, a, p, key, members) -> None:
        met = self.met.get(key, set())
        if a not in met or len(met) != len(members):
            raise Rejected(f"{self._who(a, p)} leaves a rendezvous before all {len(members)} members reached it "
                           f"({len(met)} did)")

    def _named(self, a, p, key, count, phase) -> None:
        b = self.named.setdefault(key, _Named())
        if b.arrived and b.count != count:
            raise Rejected(f"{self._who(a, p)}: named barrier {list(key)} with {count} threads, its phase expects "
                           f"{b.count} (E533)")
        self._in_phase(a, p, f"its arrival on named barrier {list(key)}", b.completed, phase)
        b.count, b.arrived = count, b.arrived + 32
        if b.arrived >= b.count:
            b.count, b.arrived, b.completed = 0, 0, b.completed + 1

    def _named_leave(self, a, p, key, phase) -> None:
        if self.named.get(key, _Named()).completed <= phase:
            raise Rejected(f"{self._who(a, p)} leaves named barrier {list(key)} before its phase {phase} completed")

    def _issue(self, a, p, transfer) -> None:
        self.issued.add(transfer)


def _replay(run: _Run) -> dict[tuple, int]:
    """Every step at its recorded time; the phases each mbarrier completed."""
    replay = _Replay(run)
    for a, p in run.timeline:
        replay.step(a, p)
    return {bar: b.completed for bar, b in replay.bars.items()}


# ---------------------------------------------------------------- (c) happens-before and the checks

class _Clocks:
    """One vector clock per step over the agents: entry a of step v's clock is how many of agent
    a's steps happen before v or are v. Edges: program order; a transfer's issue before its
    landing; every arrival and byte count of phase k of an mbarrier before each wait that observed
    phase k (likewise named barriers and the bar.sync leaving a phase); every member reaching a
    rendezvous before each member leaving it. `base` (waits only): the clock without the wait's
    own phase edges."""

    def __init__(self, run: _Run):
        self.run = run
        self.phases: dict[tuple, dict[int, set]] = {}       # ("mbar", bar) / ("named", key) -> phase -> steps
        self.deltas: dict[tuple, dict[tuple, int]] = {}     # (bar, phase) -> step -> bytes moved
        self.arrivals: dict[tuple, set] = {}                # (bar, phase) -> steps arriving
        self.waits: list[tuple] = []                        # (step, bar, phase)
        self.inits: dict[tuple, tuple] = {}
        self.uses: set = set()                              # (step, bar)
        self.meets: dict[tuple, list] = {}
        self._index()
        self.clock: dict[tuple, list[int]] = {}
        self.base: dict[tuple, list[int]] = {}
        for a, p in run.timeline:
            self._tick(a, p)

    def _index(self) -> None:
        for a, steps in enumerate(self.run.steps):
            for p, step in enumerate(steps):
                for e in step:
                    self._note((a, p), e)

    def _note(self, s: tuple, e: tuple) -> None:
        kind = e[0]
        if kind in ("arrive", "tx"):
            self.phases.setdefault(("mbar", e[1]), {}).setdefault(e[3], set()).add(s)
            self.uses.add((s, e[1]))
            if kind == "tx":
                moved = self.deltas.setdefault((e[1], e[3]), {})
                moved[s] = moved.get(s, 0) + e[2]
            else:
                self.arrivals.setdefault((e[1], e[3]), set()).add(s)
        elif kind == "wait":
            self.waits.append((s, e[1], e[3]))
            self.uses.add((s, e[1]))
        elif kind == "init":
            self.inits[e[1]] = s
        elif kind == "named":
            self.phases.setdefault(("named", e[1]), {}).setdefault(e[3], set()).add(s)
        elif kind == "meet":
            self.meets.setdefault(e[1], []).append(s)

    def _tick(self, a: int, p: int) -> None:
        run = self.run
        vc = list(self.clock[(a, p - 1)]) if p else [0] * len(run.agents)
        preds = [run.issuer[run.agents[a]]] if run.is_transfer(a) else []
        waits = []
        for e in run.steps[a][p]:
            if e[0] == "leave":
                preds += self.meets.get(e[1], [])
            elif e[0] == "named_leave":
                preds += self.phases.get(("named", e[1]), {}).get(e[2], ())
            elif e[0] == "wait" and e[3] >= 0:
                waits += self.phases.get(("mbar", e[1]), {}).get(e[3], ())
        self._join(vc, preds, (a, p))
        vc[a] = p + 1
        if run.steps[a][p][0][0] == "wait":
            self.base[(a, p)] = list(vc)
        self._join(vc, waits, (a, p))
        self.clock[(a, p)] = vc

    def _join(self, vc: list[int], preds, s: tuple) -> None:
        for q in preds:
            if q not in self.clock:
                raise Rejected(f"a happens-before edge runs backwards in time: step {q[1]} of "
                               f"{list(self.run.agents[q[0]])} must come before step {s[1]} of "
                               f"{list(self.run.agents[s[0]])}")
            for k, x in enumerate(self.clock[q]):
                if x > vc[k]:
                    vc[k] = x

    def before(self, u: tuple, v: tuple, clocks=None) -> bool:
        """Step u happens before step v, or is v."""
        return (clocks or self.clock)[v][u[0]] >= u[1] + 1

    def name(self, s: tuple) -> str:
        return f"step {s[1]} of {list(self.run.agents[s[0]])}"


def _checks(run: _Run, hb: _Clocks, completed: dict, claimed: dict) -> list[str]:
    reasons: list[str] = []
    counts = {"A": _check_a(hb, reasons), "B": _check_b(hb, completed, reasons), "C": _check_c(hb, reasons),
              "P": _check_p(hb, completed, reasons), "I": _check_i(hb, reasons)}
    fields = {"A": "events", "B": "waits", "C": "waits", "P": "phases", "I": "uses"}
    for name, count in counts.items():
        claim = claimed.get(name)
        if not isinstance(claim, dict) or claim.get(fields[name]) != count:
            reasons.append(f"check {name}: the certificate claims {fields[name]}="
                           f"{claim.get(fields[name]) if isinstance(claim, dict) else None}, re-derived {count}")
    return reasons


def _check_a(hb: _Clocks, reasons: list) -> int:
    """A: every event of phase k-1 happens before each event of phase k (per barrier)."""
    checked = 0
    for bar, phases in hb.phases.items():
        for k, steps in phases.items():
            checked += len(steps)
            for s in steps:
                late = [q for q in phases.get(k - 1, ()) if not hb.before(q, s)]
                if late:
                    reasons.append(f"check A: {hb.name(s)} (phase {k} of {list(bar[1])}) need not follow "
                                   f"{hb.name(late[0])} (phase {k - 1})")
    return checked


def _check_b(hb: _Clocks, completed: dict, reasons: list) -> int:
    """B: a wait that observed phase k happens before some event of phase k+1, where that completed."""
    checked = 0
    for s, bar, k in hb.waits:
        if completed.get(bar, 0) <= k + 1:
            continue
        checked += 1
        if not any(hb.before(s, q) for q in hb.phases.get(("mbar", bar), {}).get(k + 1, ())):
            reasons.append(f"check B: phase {k + 1} of {list(bar)} can complete before {hb.name(s)} waits")
    return checked


def _check_c(hb: _Clocks, reasons: list) -> int:
    """C: every event of the phase before the one a wait observed happens before the wait is tried."""
    for s, bar, k in hb.waits:
        late = [q for q in hb.phases.get(("mbar", bar), {}).get(k - 1, ()) if not hb.before(q, s, hb.base)]
        if late:
            reasons.append(f"check C: {hb.name(s)} can be tried before {hb.name(late[0])} (phase {k - 1} of "
                           f"{list(bar)}) and pass early")
    return len(hb.waits)


def _check_i(hb: _Clocks, reasons: list) -> int:
    """I: a barrier's initialisation happens before every other use of it."""
    checked = 0
    for s, bar in hb.uses:
        if bar in hb.inits:
            checked += 1
            if not hb.before(hb.inits[bar], s):
                reasons.append(f"check I: {hb.name(s)} can use {list(bar)} before its initialisation")
    return checked


def _check_p(hb: _Clocks, completed: dict, reasons: list) -> int:
    """P: no phase completes short of its byte counts, or with more bytes landed than armed. The
    byte-count steps holding no arrival may run in any order the edges allow: every set of them
    closed under happens-before (with the arrivals) short of all must leave the bytes above 0."""
    checked = 0
    for (bar, k), moved in hb.deltas.items():
        arrivals = hb.arrivals.get((bar, k), set())
        free = sorted((s for s in moved if s not in arrivals), key=lambda s: hb.run.times[s[0]][s[1]])
        if not free or k >= completed.get(bar, 0):
            continue     # no freedom, or a phase that never completes (it cannot complete early)
        checked += 1
        forced = sum(d for s, d in moved.items() if s in arrivals)
        bad = _short_sum(hb, arrivals, free, forced, moved)
        if bad is not None:
            reasons.append(f"check P: phase {k} of {list(bar)} {bad}")
    return checked


def _short_sum(hb: _Clocks, arrivals: set, free: list, forced: int, moved: dict) -> str | None:
    """Why a reachable proper subset of `free` completes the phase, or None."""
    if all(moved[s] < 0 for s in free) and forced + sum(moved[s] for s in free) == 0:
        return None     # every byte count left out holds bytes back: none completes early
    needed = {r for r in free if any(hb.before(r, x) for x in arrivals)}
    seen = 0

    def grow(i: int, taken: list, total: int) -> str | None:
        nonlocal seen
        seen += 1
        if seen > SUBSET_LIMIT:
            return f"has {len(free)} byte counts, too many orders to decide"
        if i == len(free):
            if len(taken) == len(free):
                return None
            if total < 0:
                return f"can complete with {-total} more bytes landed than armed"
            return "can complete before its byte counts are all in" if total == 0 else None
        s = free[i]     # free is in time order: s's predecessors among them came first
        if all(t in taken for t in free[:i] if hb.before(t, s)):
            why = grow(i + 1, taken + [s], total + moved[s])
            if why:
                return why
        return None if s in needed else grow(i + 1, taken, total)

    return grow(0, [], forced)


# ---------------------------------------------------------------- the command line

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tmalang.tools.certificate_check",
                                     description="Re-validate a certificate written by tmalangc verify --certificate.")
    parser.add_argument("certificate", help="the certificate (JSON)")
    parser.add_argument("--ir", help="the kernel's IR text (tmalangc --emit ir): its sha256 must be the certificate's")
    args = parser.parse_args(argv)
    try:
        with open(args.certificate, encoding="utf-8") as f:
            doc = json.load(f)
        ir_text = None
        if args.ir:
            with open(args.ir, encoding="utf-8") as f:
                ir_text = f.read()
    except (OSError, ValueError) as exc:
        print(f"certificate_check: {exc}", file=sys.stderr)
        return 1
    reasons = check(doc, ir_text) if isinstance(doc, dict) else ["the document is not a JSON object"]
    if reasons:
        print(f"{args.certificate}: rejected", file=sys.stderr)
        for reason in reasons:
            print(f"  {reason}", file=sys.stderr)
        return 1
    print(f"{args.certificate}: accepted: {doc['kernel']}, {_launch(doc['launch'])}, checks A B C P I re-derived")
    return 0


def _launch(launch: dict) -> str:
    dims = ", ".join(f"{k}={v}" for k, v in launch["dims"].items())
    return f"{dims}, ctas={launch['ctas']}, {launch['target']}"


if __name__ == "__main__":
    sys.exit(main())

"""The synchronisation model: a state of the recorded agents, and one agent's step from it.

A state is the place of every agent in its sequence of steps, and the state of every barrier:
mbarriers (initialised, pending arrivals, transaction bytes, phases completed), rendezvous
(members arrived and left), named barriers (count, threads arrived, phases completed). Data is
not part of it: the recorded programs do not branch on it (record.py requires that).

The meaning of each event is the interpreter's (interp/machine.py, meet.py, named.py): an
mbarrier phase completes when its pending arrivals and its bytes both reach zero; try_wait.parity
p passes while the phase in progress has the other parity. What the model adds is the check that
makes one interpreted run stand for all schedules: every event must take effect in the phase it
took effect in during the recorded run (E425 otherwise). Once that holds in every reachable state,
the happens-before order the interpreter's race detector builds from phases is the same in every
schedule, so its verdict on races in the recorded run is the verdict for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .record import Recording

NOT_ISSUED, ISSUED = -1, 0      # a transfer's place before its step (then 1: landed)


class Violation(Exception):
    """A step that breaks the protocol: the interpreter's code and words, and the notes."""

    def __init__(self, code: str, message: str, notes: list[str]):
        super().__init__(message)
        self.code, self.message, self.notes = code, message, notes


@dataclass(frozen=True)
class State:
    places: tuple                # per agent: index of its next step (transfers: NOT_ISSUED/ISSUED/1)
    bars: tuple                  # per mbarrier: (initialised, pending, tx, completed)
    meets: frozenset             # (key, arrived, left) of rendezvous under way
    named: tuple                 # per named barrier: (count, threads arrived, phases completed)


class Model:
    def __init__(self, recording: Recording, symmetric: bool = True):
        self.agents = recording.agents
        self.counts = recording.counts
        self.bar_index = {b: i for i, b in enumerate(sorted(self._objects("bar")))}
        self.named_index = {k: i for i, k in enumerate(sorted(self._objects("named")))}
        self.agent_index = {a.key: i for i, a in enumerate(self.agents)}
        self.twins = _twins(self.agents) if symmetric else []
        self.names = [a.name for a in self.agents]
        for group in self.twins:   # which twin took a step is not kept: name them together
            warps = ", ".join(str(self.agents[j].key[2]) for j in group)
            for j in group:
                self.names[j] = self.agents[j].name.rsplit(", warp ", 1)[0] + f", one of warps {warps}"

    def _objects(self, kind: str) -> set:
        found = set()
        for a in self.agents:
            for step in a.steps:
                for e in step:
                    if kind == "bar" and e[0] in ("init", "arrive", "tx", "wait"):
                        found.add(e[1])
                    if kind == "named" and e[0] in ("named", "named_leave"):
                        found.add(e[1])
        return found

    def initial(self) -> State:
        places = tuple(NOT_ISSUED if a.is_transfer else 0 for a in self.agents)
        return State(places, tuple((False, 0, 0, 0) for _ in self.bar_index), frozenset(),
                     tuple((0, 0, 0) for _ in self.named_index))

    def finished(self, state: State, i: int) -> bool:
        a = self.agents[i]
        return state.places[i] == (1 if a.is_transfer else len(a.steps))

    def next_step(self, state: State, i: int) -> list[tuple] | None:
        a, place = self.agents[i], state.places[i]
        if a.is_transfer:
            return a.steps[0] if place == ISSUED else None
        return a.steps[place] if place < len(a.steps) else None

    def enabled(self, state: State, i: int) -> bool:
        """Whether agent i can take its next step now (a blocking event comes first in a step)."""
        step = self.next_step(state, i)
        if step is None:
            return False
        kind = step[0][0]
        if kind == "wait":
            initialised, _, _, completed = state.bars[self.bar_index[step[0][1]]]
            return not initialised or completed & 1 != step[0][2]   # uninitialised: E409 when taken
        if kind == "leave":
            key, members = step[0][1], step[0][2]
            return any(k == key and arrived == len(members) for k, arrived, _ in state.meets)
        if kind == "named_leave":
            return state.named[self.named_index[step[0][1]]][2] > step[0][2]
        return True

    def step(self, state: State, i: int) -> State:
        """Agent i's next step, applied event by event; Violation if one breaks the protocol."""
        run = _Run(self, state)
        for event in self.next_step(state, i):
            run.apply(self.names[i], event)
        places = list(state.places)
        places[i] += 1
        for key in run.issued:
            places[self.agent_index[key]] = ISSUED
        for group in self.twins:      # twins are interchangeable: keep their places in order
            for index, place in zip(group, sorted(places[j] for j in group)):
                places[index] = place
        return State(tuple(places), tuple(run.bars), frozenset(run.meets.values()), tuple(run.named))


def _twins(agents) -> list[list[int]]:
    """Groups of warps with the very same steps (warps of a role that make no elected arrival).
    Swapping the places of two such warps gives a state that behaves the same in every way, so
    the model keeps one order of their places (symmetry reduction). Transfers are left out: the
    step that issues one names it."""
    groups: dict = {}
    for i, a in enumerate(agents):
        if not a.is_transfer:
            groups.setdefault(repr(a.steps), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


class _Run:
    """A step in progress: mutable copies of the parts of the state that events change."""

    def __init__(self, model: Model, state: State):
        self.model = model
        self.bars = list(state.bars)
        self.meets = {m[0]: m for m in state.meets}
        self.named = list(state.named)
        self.issued: list[tuple] = []

    def apply(self, agent: str, event: tuple) -> None:
        """`agent`: the name of who takes the step, for the notes."""
        getattr(self, "_" + event[0])(agent, *event[1:])

    # ---- mbarriers
    def _bar(self, agent, bar: tuple, what: str) -> tuple[int, tuple]:
        i = self.model.bar_index[bar]
        if not self.bars[i][0] and what != "init":
            raise Violation("E409", f"mbarrier '{barrier_name(bar)}' is used before it is initialised", [f"{agent}: {what}"])
        return i, self.bars[i]

    def _init(self, agent, bar, count) -> None:
        i, _ = self._bar(agent, bar, "init")
        self.bars[i] = (True, count, 0, 0)

    def _arrive(self, agent, bar, count, phase) -> None:
        i, (_, pending, tx, completed) = self._bar(agent, bar, "arrive")
        if count > pending:
            raise Violation("E402", f"mbarrier '{barrier_name(bar)}' receives more arrivals than its count allows in one "
                            "phase", [f"{agent} arrives {count} time(s) with {pending} arrival(s) missing in "
                                      f"phase {completed}"])
        _same_phase(agent, bar, "arrives", completed, phase)
        self.bars[i] = self._settled(agent, bar, pending - count, tx, completed)

    def _tx(self, agent, bar, delta, phase) -> None:
        i, (_, pending, tx, completed) = self._bar(agent, bar, "expect_tx" if delta > 0 else "bytes landing")
        _same_phase(agent, bar, f"{'expects' if delta > 0 else 'lands'} {abs(delta)} bytes", completed, phase)
        self.bars[i] = self._settled(agent, bar, pending, tx + delta, completed)

    def _settled(self, agent, bar, pending: int, tx: int, completed: int) -> tuple:
        if pending == 0 and tx < 0:
            raise Violation("E403", f"mbarrier '{barrier_name(bar)}' completes its arrivals with {-tx} more bytes landed "
                            "than expected", [agent])
        if pending == 0 and tx == 0:
            return True, self.model.counts[bar], 0, completed + 1
        return True, pending, tx, completed

    def _wait(self, agent, bar, parity, phase) -> None:
        _, (_, _, _, completed) = self._bar(agent, bar, "wait")
        seen = completed - 1 if (completed - 1) & 1 == parity else completed - 2
        _same_phase(agent, bar, f"passes its wait for parity {parity}", max(seen, -1), phase, observed=True)

    # ---- rendezvous and named barriers
    def _meet(self, agent, key, members) -> None:
        _, arrived, left = self.meets.get(key, (key, 0, 0))
        self.meets[key] = (key, arrived + 1, left)

    def _leave(self, agent, key, members) -> None:
        _, arrived, left = self.meets[key]
        if left + 1 == len(members):
            del self.meets[key]
        else:
            self.meets[key] = (key, arrived, left + 1)

    def _named(self, agent, key, count, phase) -> None:
        i = self.model.named_index[key]
        expected, arrived, completed = self.named[i]
        if arrived and expected != count:
            raise Violation("E533", f"named barrier {key[1]} is used with {count} threads while its phase "
                            f"{completed} already expects {expected}", [agent])
        _same_phase(agent, ("named", key[1]), "arrives", completed, phase)
        arrived += 32
        self.named[i] = (0, 0, completed + 1) if arrived >= count else (count, arrived, completed)

    def _named_leave(self, agent, key, phase) -> None:
        pass   # enabled only once the phase it arrived in completed (Model.enabled)

    def _issue(self, agent, transfer) -> None:
        self.issued.append(transfer)


def _same_phase(agent, bar, what: str, now: int, recorded: int, observed: bool = False) -> None:
    if now != recorded:
        verb = "observes" if observed else "takes effect in"
        raise Violation("E425", f"the phase of mbarrier '{barrier_name(bar)}' that an operation {verb} depends on the "
                        f"schedule", [f"{agent} {what} in phase {now} in this schedule, in phase {recorded} "
                                      "in the recorded one", "its protocol holds for some schedules only"])


def barrier_name(bar: tuple) -> str:
    """`full[2]`, `full[2] of CTA 1`, `named barrier 3`: a barrier as every report names it."""
    if bar[0] == "named":
        return f"named barrier {bar[1]}"
    cta, name, stage = bar
    return f"{name}[{stage}]" + (f" of CTA {cta}" if cta else "")

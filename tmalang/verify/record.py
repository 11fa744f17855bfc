"""Record each agent's synchronisation events in one interpreted run.

Requires: a kernel whose warps take the same path whatever the schedule (no dynamic tile claims,
no cluster launch control: `claims_schedule` says which do), so that a warp's sequence of
events is a property of the program and the launch, not of the run that recorded it.

Guarantees: `Recording.agents` holds, for every warp and every transfer that touches a barrier,
its steps in program order. A step is what the interpreter executes atomically (one op, or one
transfer landing), cut again before every event that can block (a wait, the leaving half of a
rendezvous), since the interpreter yields there and other warps run. Each event carries the phase
it took effect in during the recorded run: the reference the explorer holds every other
schedule to.

Events (tuples, first field the kind):
    ("init", bar, count)              mbarrier.init
    ("arrive", bar, count, phase)     arrivals
    ("tx", bar, delta, phase)         expected (+) or landed (-) bytes
    ("wait", bar, parity, phase)      blocks until the phase of that parity completed
    ("meet", key, members)            reaches a rendezvous (bar.sync, wgmma.wait_group, cluster sync)
    ("leave", key, members)           blocks until every member reached it
    ("named", key, count, phase)      32 threads arrive at a named barrier
    ("named_leave", key, phase)       bar.sync: blocks until that phase completes
    ("issue", transfer)               a transfer that touches a barrier leaves for its engine
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..interp.observe import Observer

BLOCKING = {"wait", "leave", "named_leave"}


@dataclass
class Agent:
    """A warp ("warp", cta, index) or a transfer ("transfer", n), and where its events come from."""

    key: tuple
    name: str                                   # "CTA 0 warp 4 (role 'mma')" / "TMA load issued by ..."
    steps: list[list[tuple]] = field(default_factory=list)
    spans: list = field(default_factory=list)   # the source span of each step's op (None: unknown)
    times: list = field(default_factory=list)   # when each step ran in the recorded run (a total order)
    cta: int = 0

    def where(self, place: int) -> str:
        span = self.spans[place] if place < len(self.spans) else None
        return span.location() if span else "?"

    @property
    def is_transfer(self) -> bool:
        return self.key[0] == "transfer"


@dataclass
class Recording:
    agents: list[Agent]
    counts: dict[tuple, int]                    # barrier -> its arrival count (from its init)


def components(recording: Recording) -> list[Recording]:
    """The recording cut into groups of agents that share no barrier, rendezvous or transfer
    (the clusters of a launch, and often less): each can be explored on its own, since no step of
    one changes or depends on anything another touches."""
    parent = list(range(len(recording.agents)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict = {}
    for i, a in enumerate(recording.agents):
        for obj in {e[1] for step in a.steps for e in step} | {a.key}:
            j = owner.setdefault(obj, i)
            parent[root(i)] = root(j)
    groups: dict[int, list[Agent]] = {}
    for i, a in enumerate(recording.agents):
        groups.setdefault(root(i), []).append(a)
    return [Recording(agents, recording.counts) for agents in groups.values()]


class Recorder(Observer):
    def __init__(self) -> None:
        self.agents: dict[tuple, Agent] = {}
        self.transfers: dict[int, tuple] = {}   # id(Transfer) -> agent key
        self.keep: list = []                    # the Transfer objects, so that no id is reused
        self.counts: dict[tuple, int] = {}
        self.actor: Agent | None = None
        self.source = None                      # the acting Warp or Transfer
        self.clock = 0                          # steps recorded so far, all agents together
        self.fresh = True

    # ---- who acts
    def acting(self, actor: tuple) -> None:
        if actor[0] == "warp":
            cta, warp = actor[1], actor[2]
            key = ("warp", cta.cta, warp.index)
            if key not in self.agents:
                role = warp.role.symbol if warp.role else "-"
                self.agents[key] = Agent(key, f"CTA {cta.cta}, role '{role}', warp {warp.index}", cta=cta.cta)
            self.source = warp            # its op is known once the step runs (warp.current)
        else:
            key = self.transfers[id(actor[1])]
            self.source = actor[1]
        self.actor, self.fresh = self.agents[key], True

    def issued(self, transfer) -> None:
        key = ("transfer", len(self.transfers))
        self.transfers[id(transfer)] = key
        self.keep.append(transfer)
        issuer = self.actor.name if self.actor else "?"
        self.agents[key] = Agent(key, f"the {transfer.kind} issued by {issuer}", cta=self.actor.cta if self.actor else 0)
        self._event(("issue", key))

    # ---- what happens
    def init(self, bar, count) -> None:
        self.counts[bar] = count
        self._event(("init", bar, count))

    def arrive(self, bar, count, phase) -> None:
        self._event(("arrive", bar, count, phase))

    def tx(self, bar, delta, phase) -> None:
        self._event(("tx", bar, delta, phase))

    def wait(self, bar, parity, phase) -> None:
        self._event(("wait", bar, parity, phase))

    def meet(self, key, members, leaving) -> None:
        self._event(("leave" if leaving else "meet", key, members))

    def named(self, key, count, phase, leaving) -> None:
        self._event(("named_leave", key, phase) if leaving else ("named", key, count, phase))

    def _event(self, event: tuple) -> None:
        agent = self.actor
        if self.fresh or event[0] in BLOCKING:
            agent.steps.append([])
            agent.spans.append(self._span())
            agent.times.append(self.clock)
            self.clock += 1
            self.fresh = False
        agent.steps[-1].append(event)

    def _span(self):
        op = getattr(self.source, "current", None)
        return op.span if op is not None else getattr(self.source, "span", None)

    def recording(self) -> Recording:
        """Transfers that touch no barrier (bulk stores) play no part in the protocol: dropped,
        with the events that issued them."""
        touching = {k for k, a in self.agents.items() if a.is_transfer and any(a.steps)}
        agents = []
        for a in self.agents.values():
            if a.is_transfer and a.key not in touching:
                continue
            kept = [([e for e in step if e[0] != "issue" or e[1] in touching], span, time)
                    for step, span, time in zip(a.steps, a.spans, a.times)]
            kept = [k for k in kept if k[0]]
            if kept:
                steps, spans, times = (list(x) for x in zip(*kept))
                agents.append(Agent(a.key, a.name, steps, spans, times, a.cta))
        return Recording(agents, dict(self.counts))

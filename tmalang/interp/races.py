"""Shared-memory race detection from a happens-before relation built out of the protocol.

Agents are warps and individual TMA transfers, each with a vector clock. Order flows only
through what the hardware orders: an mbarrier phase releases every arrival and every TMA load
that completed into it to each warp whose wait observes that phase; `bar.sync` joins its
participants; `cp.async.bulk.wait_group` orders a store's smem read before the waiting thread;
an issued transfer inherits its issuer's clock. Two accesses to the same smem tile stage
conflict when one writes, their parts overlap (TMA touches a whole tile; tile math the warp's
share), and neither happens before the other: then it is a race, reported with both sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .state import ProtocolError

Clock = dict


def join(a: Clock, b: Clock) -> None:
    for agent, t in b.items():
        if a.get(agent, 0) < t:
            a[agent] = t


@dataclass
class Access:
    agent: object
    epoch: int
    write: bool
    share: tuple | None        # None: the whole tile (TMA); else (partition kind, warp) of a warp's share
    span: object
    who: str


@dataclass
class RaceDetector:
    clocks: dict = field(default_factory=dict)       # agent -> its vector clock
    phases: dict = field(default_factory=dict)       # (barrier, stage, phase) -> clock released into it
    syncs: dict = field(default_factory=dict)        # sync key -> clock of the arrivals
    history: dict = field(default_factory=dict)      # (buffer, stage) -> [Access]
    transfers: int = 0

    def clock(self, agent) -> Clock:
        return self.clocks.setdefault(agent, {agent: 1})

    def tick(self, agent) -> None:
        c = self.clock(agent)
        c[agent] = c.get(agent, 0) + 1

    # ---- synchronisation edges
    def issue(self, warp_agent) -> tuple:
        """A new transfer agent that starts from its issuer's knowledge."""
        self.transfers += 1
        agent = ("tma", self.transfers)
        self.clocks[agent] = dict(self.clock(warp_agent))
        self.clocks[agent][agent] = 1
        self.tick(warp_agent)
        return agent

    def release_to_phase(self, agent, key: tuple) -> None:
        join(self.phases.setdefault(key, {}), self.clock(agent))
        self.tick(agent)

    def acquire_phase(self, agent, key: tuple) -> None:
        """A wait observed phase `key`: its releases become the waiter's, and so does the knowledge
        that the phase completed (passed on by later releases, like any other clock entry)."""
        if key in self.phases:
            join(self.clock(agent), self.phases[key])
        self.clock(agent)[("completed",) + key] = 1

    def knows_phase(self, agent, key: tuple) -> bool:
        return self.clock(agent).get(("completed",) + key, 0) >= 1

    def sync_arrive(self, agent, key) -> None:
        join(self.syncs.setdefault(key, {}), self.clock(agent))
        self.tick(agent)

    def sync_leave(self, agent, key) -> None:
        join(self.clock(agent), self.syncs[key])

    def acquire_transfer(self, agent, transfer_agent) -> None:
        join(self.clock(agent), self.clock(transfer_agent))

    # ---- accesses
    def access(self, tile: tuple, agent, write: bool, share: tuple | None, span, who: str) -> None:
        mine = self.clock(agent)
        current = Access(agent, mine[agent], write, share, span, who)
        kept = []
        for old in self.history.get(tile, []):
            ordered = mine.get(old.agent, 0) >= old.epoch
            overlap = old.share is None or share is None or old.share[0] != share[0] or old.share == share
            if not ordered and overlap and (write or old.write) and old.agent != agent:
                raise _race(tile, old, current)
            if not (ordered and write):
                kept.append(old)
        kept.append(current)
        self.history[tile] = kept


def _race(tile: tuple, first: Access, second: Access) -> ProtocolError:
    verb = {True: "writes", False: "reads"}
    where = first.span.location() if first.span else "?"
    return ProtocolError(
        "E405", f"smem race on {tile[0]}[{tile[1]}]: {second.who} {verb[second.write]} it, unordered with "
        f"{first.who}, which {verb[first.write]} it", second.span,
        [f"the other access is at {where}",
         "nothing orders them: no mbarrier phase, bar.sync or bulk wait_group between the two"])

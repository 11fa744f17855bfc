"""Shared-memory race detection from a happens-before relation built out of the protocol.

Agents are warps and individual TMA transfers, each with a vector clock. Order flows only
through what the hardware orders: an mbarrier phase releases every arrival and every TMA load
that completed into it to each warp whose wait observes that phase; `bar.sync` joins its
participants; `cp.async.bulk.wait_group` orders a store's smem read before the waiting thread;
an issued transfer inherits its issuer's clock. Two accesses to the same smem tile stage
conflict when one writes, their parts overlap (interp/shares.py), and neither happens before
the other: then it is a race, reported with both sides.

Proxies: warps write shared memory through the generic proxy, TMA and the tensor cores read it
through the async proxy. An async read of a generic write needs more than order: the writer's
`fence.proxy.async` must come after its write and happen before the read (E406).

Size: every TMA transfer and wgmma is an agent, and every clock that learns of one keeps an entry
for it, so a long run's clocks would grow with the run and copying one per transfer would cost
its square. An entry matters only while some recorded access (this detector's history, or global
memory's, `pinned`) belongs to its agent: `collect` drops the others from every clock, phase and
sync, each time the transfers issued since the last collection outnumber the agents it kept. A
transfer's own clock keeps its own entry, so one in flight still accesses at the right epoch.
Knowing that a phase completed is one entry per barrier stage, the highest phase known + 1
(phases complete in order, so knowing one completed is knowing every earlier one did).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .shares import covers, overlaps
from .state import ProtocolError

Clock = dict


def join(a: Clock, b: Clock) -> None:
    for agent, t in b.items():
        if a.get(agent, 0) < t:
            a[agent] = t


def generic(agent) -> bool:
    """Warps access memory through the generic proxy; transfers and tensor-core ops do not."""
    return agent[0] == "warp"


def in_smem(tile: tuple) -> bool:
    return not tile[0].startswith("tmem:")


@dataclass
class Access:
    agent: object
    epoch: int
    write: bool
    share: tuple | None        # the part of the tile it touches (interp/shares.py); None: all of it
    span: object
    who: str


@dataclass
class RaceDetector:
    clocks: dict = field(default_factory=dict)       # agent -> its vector clock
    phases: dict = field(default_factory=dict)       # (barrier, stage, phase) -> clock released into it
    syncs: dict = field(default_factory=dict)        # sync key -> clock of the arrivals
    history: dict = field(default_factory=dict)      # (buffer, stage) -> [Access]
    fences: dict = field(default_factory=dict)       # warp agent -> epochs of its fence.proxy.async
    transfers: int = 0
    pinned: object = None        # () -> agents that global memory's recorded accesses belong to
    next_collect: int = 256      # collect when `transfers` reaches it
    accessed: set = field(default_factory=set)        # transfer agents that made their accesses

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
        if self.transfers >= self.next_collect:
            self.collect()
        return agent

    def collect(self) -> None:
        """Drop the entries of transfer agents that no recorded access belongs to from every clock
        (a clock's own entry stays), phase and sync: no order check can ask about them again. A
        transfer that made its accesses (all of them land together) and has none recorded any
        more loses its clock too; one still in flight keeps it, for the accesses it will make."""
        live = {a.agent for accesses in self.history.values() for a in accesses}
        live |= set(self.pinned()) if self.pinned else set()
        for agent in self.accessed - live:
            self.clocks.pop(agent, None)
        self.accessed &= live
        for owner, clock in self.clocks.items():
            _prune(clock, live | {owner})
        for clock in (*self.phases.values(), *self.syncs.values()):
            _prune(clock, live)
        self.next_collect = self.transfers + max(256, 2 * len(live))

    def release_to_phase(self, agent, key: tuple) -> None:
        """An arrival or landing in phase key[-1] (in progress): a wait observes one of the two
        latest completed phases, so phase key[-1] - 3 and older are observed no more."""
        join(self.phases.setdefault(key, {}), self.clock(agent))
        self.phases.pop(key[:-1] + (key[-1] - 3,), None)
        self.tick(agent)

    def acquire_phase(self, agent, key: tuple) -> None:
        """A wait observed phase `key`: its releases become the waiter's, and so does the knowledge
        that the phase completed (passed on by later releases, like any other clock entry)."""
        if key in self.phases:
            join(self.clock(agent), self.phases[key])
        join(self.clock(agent), {_completed(key): key[-1] + 1})

    def knows_phase(self, agent, key: tuple) -> bool:
        return self.clock(agent).get(_completed(key), 0) >= key[-1] + 1

    def sync_arrive(self, agent, key) -> None:
        """Reaching a rendezvous; a named barrier's key ends with its phase, and its every syncing
        warp left phase p - 2 before phase p - 1 could complete, so that one is done with."""
        join(self.syncs.setdefault(key, {}), self.clock(agent))
        if key[0] == "named":
            self.syncs.pop(key[:-1] + (key[-1] - 2,), None)
        self.tick(agent)

    def sync_leave(self, agent, key) -> None:
        join(self.clock(agent), self.syncs[key])

    def acquire_transfer(self, agent, transfer_agent, upto: int | None = None) -> None:
        """Learn what a transfer did; with `upto`, only its first `upto` epochs (a store's smem
        reads are epoch 1, its global writes epoch 2: interp/bulk.py)."""
        mine = self.clock(agent)
        before = mine.get(transfer_agent, 0)
        join(mine, self.clock(transfer_agent))
        if upto is not None:
            mine[transfer_agent] = max(before, min(mine[transfer_agent], upto))

    def fence_proxy(self, agent) -> None:
        """fence.proxy.async by every thread of a warp: its generic writes so far reach the async
        proxy for whoever the fence (at a new epoch of the warp) happens before."""
        self.tick(agent)
        self.fences.setdefault(agent, []).append(self.clock(agent)[agent])

    # ---- accesses
    def access(self, tile: tuple, agent, write: bool, share: tuple | None, span, who: str) -> None:
        mine = self.clock(agent)
        if not generic(agent):
            self.accessed.add(agent)
        current = Access(agent, mine[agent], write, share, span, who)
        kept = []
        for old in self.history.get(tile, []):
            if not overlaps(old.share, share):
                kept.append(old)
                continue
            ordered = mine.get(old.agent, 0) >= old.epoch
            if not ordered and (write or old.write) and old.agent != agent:
                raise _race(tile, old, current)
            if old.write and not write and generic(old.agent) and not generic(agent) and in_smem(tile):
                self._check_fenced(tile, old, current, mine)
            # an access that comes after `old` and covers it stands for it in every later check when
            # it writes, or when both read: whatever comes after it comes after `old` too
            if not (ordered and (write or not old.write) and covers(share, old.share)):
                kept.append(old)
        kept.append(current)
        self.history[tile] = kept

    def _check_fenced(self, tile: tuple, write: Access, read: Access, clock: Clock) -> None:
        """The first fence of the writer after its write must happen before the async read."""
        fences = self.fences.get(write.agent, [])
        first = bisect.bisect_right(fences, write.epoch)
        if first == len(fences) or clock.get(write.agent, 0) < fences[first]:
            raise _unfenced(tile, write, read, first < len(fences))


def _completed(key: tuple) -> tuple:
    """The clock entry that says up to which phase of key's barrier stage (key = (.., phase))
    completions are known: the highest known phase + 1."""
    return ("completed",) + key[:-1]


def _prune(clock: Clock, live: set) -> None:
    for agent in [a for a in clock if a[0] != "warp" and a[0] != "completed" and a not in live]:
        del clock[agent]


def _race(tile: tuple, first: Access, second: Access) -> ProtocolError:
    verb = {True: "writes", False: "reads"}
    where = first.span.location() if first.span else "?"
    return ProtocolError(
        "E405", f"smem race on {tile[0]}[{tile[1]}]: {second.who} {verb[second.write]} it, unordered with "
        f"{first.who}, which {verb[first.write]} it", second.span,
        [f"the other access is at {where}",
         "nothing orders them: no mbarrier phase, bar.sync or bulk wait_group between the two"])


def _unfenced(tile: tuple, write: Access, read: Access, fenced_later: bool) -> ProtocolError:
    reader = read.who.removeprefix("the ").split(" issued by ")[0]
    where = write.span.location() if write.span else "?"
    why = ("its writer fences only after the sync or arrive that hands the tile on" if fenced_later
           else "its writer never fences")
    return ProtocolError(
        "E406", f"{reader} reads {tile[0]} written by ordinary stores that no fence.proxy.async has published "
        f"to the async proxy", read.span,
        [f"slot {tile[0]}[{tile[1]}]: written by {write.who} at {where}, read by {read.who}; {why}",
         ("each writing thread needs `fence proxy_async` after its writes and before the sync or arrive that "
          "hands the tile on")])

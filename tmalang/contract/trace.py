"""A timeline in Chrome's trace-event JSON (opens in Perfetto/chrome://tracing): of an interpreted
run, or of a run on the GPU (runtime/timeline.py), in the same shape so the two open side by side.

One process per CTA; one track per warp (named after its role), one for the TMA engine.
With several schedules (`explore=N`), each is its own set of processes ("schedule k (seed s) CTA c"),
so the runs sit one above the other instead of on the same tracks.
Time is the scheduler's step count, written as microseconds (on the GPU: microseconds of
%globaltimer from the first stamp). Ops are complete ("X") slices —
a wait's slice spans the steps it was blocked — TMA transfers span issue to completion, and
each completed mbarrier phase is an instant ("i") event on the engine track.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

ENGINE_TRACK = 1000
SCHEDULE_PIDS = 1_000_000   # process ids of one schedule: far more than any grid's CTAs


@dataclass
class Trace:
    events: list[dict] = field(default_factory=list)
    _first_pid: int = 0
    _label: str = ""

    def begin_schedule(self, index: int, seed: int) -> None:
        """The events that follow belong to the index-th schedule of an exploration (from `seed`)."""
        self._first_pid, self._label = index * SCHEDULE_PIDS, f"schedule {index} (seed {seed}) "

    def name_tracks(self, cta: int, warps) -> None:
        pid = self._first_pid + cta
        self.events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{self._label}CTA {cta}"}})
        for w in warps:
            role = w.role.symbol if w.role else "idle"
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": w.index,
                                "args": {"name": f"warp {w.index} ({role})"}})
        self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": ENGINE_TRACK,
                            "args": {"name": "TMA engine"}})

    def name_warp(self, cta: int, warp: int, role: str) -> None:
        """Name a warp's track (and its CTA's process) without the interpreter's warp objects."""
        pid = self._first_pid + cta
        if not any(e["name"] == "process_name" and e["pid"] == pid for e in self.events):
            self.events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": f"{self._label}CTA {cta}"}})
        self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": warp,
                            "args": {"name": f"warp {warp} ({role})"}})

    def instant(self, cta: int, warp: int, name: str, at: float, where: str) -> None:
        self.events.append({"ph": "i", "s": "t", "name": name, "pid": self._first_pid + cta, "tid": warp, "ts": at,
                            "args": {"at": where}})

    def op(self, cta: int, warp: int, name: str, start: float, end: float, where: str, shortest: float = 1) -> None:
        """A slice; `shortest`: the least duration drawn (the interpreter's one step)."""
        self.events.append({"ph": "X", "name": name, "pid": self._first_pid + cta, "tid": warp, "ts": start,
                            "dur": max(end - start, shortest), "args": {"at": where}})

    def transfer(self, cta: int, kind: str, start: int, end: int, nbytes: int, where: str) -> None:
        self.events.append({"ph": "X", "name": f"tma {kind}", "pid": self._first_pid + cta, "tid": ENGINE_TRACK,
                            "ts": start,
                            "dur": max(end - start, 1), "args": {"bytes": nbytes, "at": where}})

    def phase(self, cta: int, barrier: str, stage: int, phase: int, at: int) -> None:
        self.events.append({"ph": "i", "s": "t", "name": f"{barrier}[{stage}] phase {phase} done",
                            "pid": self._first_pid + cta, "tid": ENGINE_TRACK, "ts": at})

    def to_json(self) -> str:
        return json.dumps({"traceEvents": self.events, "displayTimeUnit": "ns"})

"""A timeline of an interpreted run in Chrome's trace-event JSON (opens in Perfetto/chrome://tracing).

One process per CTA; one track per warp (named after its role), one for the TMA engine.
Time is the scheduler's step count, written as microseconds. Ops are complete ("X") slices —
a wait's slice spans the steps it was blocked — TMA transfers span issue to completion, and
each completed mbarrier phase is an instant ("i") event on the engine track.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

ENGINE_TRACK = 1000


@dataclass
class Trace:
    events: list[dict] = field(default_factory=list)

    def name_tracks(self, cta: int, warps) -> None:
        self.events.append({"ph": "M", "name": "process_name", "pid": cta, "args": {"name": f"CTA {cta}"}})
        for w in warps:
            role = w.role.symbol if w.role else "idle"
            self.events.append({"ph": "M", "name": "thread_name", "pid": cta, "tid": w.index,
                                "args": {"name": f"warp {w.index} ({role})"}})
        self.events.append({"ph": "M", "name": "thread_name", "pid": cta, "tid": ENGINE_TRACK,
                            "args": {"name": "TMA engine"}})

    def op(self, cta: int, warp: int, name: str, start: int, end: int, where: str) -> None:
        self.events.append({"ph": "X", "name": name, "pid": cta, "tid": warp, "ts": start,
                            "dur": max(end - start, 1), "args": {"at": where}})

    def transfer(self, cta: int, kind: str, start: int, end: int, nbytes: int, where: str) -> None:
        self.events.append({"ph": "X", "name": f"tma {kind}", "pid": cta, "tid": ENGINE_TRACK, "ts": start,
                            "dur": max(end - start, 1), "args": {"bytes": nbytes, "at": where}})

    def phase(self, cta: int, barrier: str, stage: int, phase: int, at: int) -> None:
        self.events.append({"ph": "i", "s": "t", "name": f"{barrier}[{stage}] phase {phase} done",
                            "pid": cta, "tid": ENGINE_TRACK, "ts": at})

    def to_json(self) -> str:
        return json.dumps({"traceEvents": self.events, "displayTimeUnit": "ns"})

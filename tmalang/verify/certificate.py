"""What `verify` proved about one launch, as a JSON document an independent checker re-validates.

Requires: a Recording (record.py) of a launch that the happens-before checks (happens_before.py)
found clean: `verify` makes a certificate only for a verified launch of method "order".

Guarantees: `certificate_of` returns a dict that json.dumps writes as is:
- "format" / "version": what this document is (FORMAT, VERSION);
- "kernel", "ir_sha256": the kernel's name and the sha256 of its final IR text
  (tmalang.ir.printer.print_ir, what `tmalangc --emit ir` writes);
- "launch": dims, ctas (null: the interpreter's default grid) and target;
- "recording": every agent (key, name, steps: its events exactly as record.py defines them,
  tuples as lists, and the recorded time of each step), each barrier's arrival count, and the
  phases each barrier completed in the recorded run;
- "claim": the invariant proven and the bounds it holds for;
- "checks": the checks A, B, C, P, I of docs/interpreter.md ("Verification"), each with the count
  of what it checked, so that a checker that re-derives them can say it checked the same.
The one change to the events: a rendezvous key's first field, the Python id of the op the
interpreter met at, becomes a small number in order of first appearance (the same label for the
same rendezvous, so the document does not change from one run to the next).

The checker (tmalang/tools/certificate_check.py) shares none of this code: it reads the document.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..ir.printer import print_ir
from .happens_before import SUBSETS_LIMIT, Order
from .model import Model
from .record import Recording
from .schedule import recorded_phases

FORMAT, VERSION = "tmalang-certificate", 1
CLAIM = ("every schedule of this launch takes every mbarrier and named-barrier event in its recorded "
         "phase, so none deadlocks, arrives or lands bytes beyond a phase, or uses a barrier before its "
         "initialisation, and the recorded run's race and fence verdicts hold for all of them")


def ir_digest(kernel) -> str:
    return hashlib.sha256(print_ir(kernel).encode()).hexdigest()


def certificate_of(kernel, manifest, recording: Recording, dims: dict, ctas: int | None) -> dict:
    order = Order(recording)
    completed = recorded_phases(order, Model(recording, symmetric=False))
    return {
        "format": FORMAT, "version": VERSION,
        "kernel": kernel.symbol, "ir_sha256": ir_digest(kernel),
        "launch": {"dims": {k: int(v) for k, v in dims.items()}, "ctas": ctas, "target": manifest.arch},
        "method": "order",
        "claim": {"invariant": CLAIM, "bounds": "this launch: its dims, scalars and grid; every schedule of it"},
        "recording": _recording(recording, completed),
        "checks": _checks(order, completed),
    }


def _recording(recording: Recording, completed: dict) -> dict:
    labels: dict[int, int] = {}
    agents = [{"key": _json(a.key), "name": a.name, "times": list(a.times),
               "steps": [[_json(_relabelled(e, labels)) for e in step] for step in a.steps]}
              for a in recording.agents]
    return {"agents": agents,
            "counts": [[_json(bar), n] for bar, n in sorted(recording.counts.items())],
            "completed": [[_json(bar), n] for bar, n in sorted(completed.items())]}


def _relabelled(event: tuple, labels: dict) -> tuple:
    if event[0] not in ("meet", "leave"):
        return event
    key = event[1]
    return (event[0], (labels.setdefault(key[0], len(labels)), *key[1:]), *event[2:])


def _json(value):
    """Tuples (nested) as lists: what json.dumps writes and json.loads gives back."""
    if isinstance(value, (tuple, list)):
        return [_json(v) for v in value]
    return value


def _checks(order: Order, completed: dict) -> dict:
    """What each check covered, counted in steps: a step holding two events of one phase counts once."""
    events = {(bar, k, i, p) for bar, phases in order.phases.items() for k, evs in phases.items()
              for i, p, _ in evs}
    waits = {(i, p, bar, k) for i, p, bar, k in order.waits}
    following = {w for w in waits if completed.get(w[2], 0) > w[3] + 1}
    byte_phases = [_free_byte_steps(evs) for bar, phases in order.phases.items() if bar[0] != "named"
                   for k, evs in phases.items() if k < completed.get(bar, 0)]   # one in progress cannot complete early
    byte_phases = [n for n in byte_phases if n]
    uses = {(i, p, bar) for i, p, bar in order.uses if bar in order.inits}
    return {
        "A": {"events": len(events), "what": "each arrival and byte count of phase k after every event of phase k-1"},
        "B": {"waits": len(following), "what": "a wait that observed phase k before some event of phase k+1"},
        "C": {"waits": len(waits), "what": "a wait tried only after every event of the phase before the one it observed"},
        "P": {"phases": len(byte_phases), "beyond_subset_limit": sum(n > SUBSETS_LIMIT for n in byte_phases),
              "what": "no phase completes before its byte counts are all in, nor with more bytes landed than armed"},
        "I": {"uses": len(uses), "what": "each barrier's initialisation before every other use of it"},
    }


def _free_byte_steps(events: list[tuple]) -> int:
    """Byte-count steps of one phase that hold no arrival of it (those P orders freely)."""
    arrivals = {(i, p) for i, p, delta in events if delta is None}
    return len({(i, p) for i, p, delta in events if delta is not None and (i, p) not in arrivals})


def write(certificate: dict, path) -> None:
    """The certificate as JSON, one agent per line (a diff of two certificates reads by agent)."""
    recording = certificate["recording"]
    head = {k: v for k, v in certificate.items() if k != "recording"}
    agents = ",\n".join("    " + json.dumps(a) for a in recording["agents"])
    text = (json.dumps(head, indent=1)[:-2] + ',\n "recording": {\n  "agents": [\n' + agents + "\n  ],\n"
            f'  "counts": {json.dumps(recording["counts"])},\n  "completed": {json.dumps(recording["completed"])}\n'
            " }\n}\n")
    Path(path).write_text(text, encoding="utf-8")

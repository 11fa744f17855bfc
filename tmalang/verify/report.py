"""A counterexample in the interpreter's words, and as a Perfetto trace of its schedule.

The located error points at the step that fails (or, for a deadlock, at the first blocked
warp's wait); its notes give what the interpreter would say, then the schedule that reaches it,
one line per step: who, what, where. The trace draws each warp's steps on its own track and each
transfer's landing on its CTA's engine track, one scheduler step per microsecond.
"""

from __future__ import annotations

from ..contract.trace import Trace
from ..diagnostics import TmalangError
from .explore import Counterexample
from .model import Model, barrier_name

SHOWN_STEPS = 40    # the schedule's last steps in the notes (the trace has all of them)


def counterexample_error(model: Model, cx: Counterexample) -> TmalangError:
    lines = [f"{model.names[i]}: {describe(model.agents[i].steps[place])} at "
             f"{model.agents[i].where(place)}" for i, place in cx.schedule]
    shown = lines[-SHOWN_STEPS:]
    skipped = len(lines) - len(shown)
    header = (f"the shortest schedule that reaches it has {len(lines)} synchronisation steps"
              + (f"; the last {len(shown)}:" if skipped else ":"))
    span = _span(model, cx)
    return TmalangError(cx.violation.code, cx.violation.message, span,
                        [*cx.violation.notes, header, *(f"  {line}" for line in shown)])


def finding_error(model: Model, finding) -> TmalangError:
    """A failed happens-before check that no replayed schedule showed: the steps it names."""
    i, place = finding.targets[-1]
    steps = [f"{model.names[j]}: {describe(model.agents[j].steps[p])} at {model.agents[j].where(p)}"
             for j, p in finding.targets]
    held = [f"{model.names[j]}: {describe(model.agents[j].steps[p])} at {model.agents[j].where(p)}"
            for j, p in finding.held]
    return TmalangError(finding.code, f"the protocol does not order these steps: {finding.why}",
                        model.agents[i].spans[place],
                        ["can run:", *(f"  {s}" for s in steps), *(["while held back:"] if held else []),
                         *(f"  {s}" for s in held), "no schedule was built to show it (docs/interpreter.md, "
                         "\"Verification\")"])


def _span(model: Model, cx: Counterexample):
    if cx.violation.code == "E401":
        blocked = [i for i in range(len(model.agents)) if not model.agents[i].is_transfer
                   and not model.finished(cx.state, i)]
        i = blocked[0] if blocked else None
        return model.agents[i].spans[cx.state.places[i]] if i is not None else None
    i, place = cx.schedule[-1]
    return model.agents[i].spans[place]


def describe(step: list[tuple]) -> str:
    return "; ".join(_event(e) for e in step)


def _event(e: tuple) -> str:
    kind = e[0]
    if kind == "init":
        return f"mbarrier.init {barrier_name(e[1])} count {e[2]}"
    if kind == "arrive":
        return f"{e[2]} arrival(s) on {barrier_name(e[1])}"
    if kind == "tx":
        return f"{'expect_tx' if e[2] > 0 else 'lands'} {abs(e[2])} bytes on {barrier_name(e[1])}"
    if kind == "wait":
        return f"wait {barrier_name(e[1])} parity {e[2]}"
    if kind in ("meet", "leave"):
        return f"{'reaches' if kind == 'meet' else 'leaves'} a rendezvous of {len(e[2])} warps"
    if kind == "named":
        return f"bar.arrive named barrier {e[1][1]} ({e[2]} threads)"
    if kind == "named_leave":
        return f"leaves named barrier {e[1][1]}"
    return f"issues transfer {e[1][1]}"


def counterexample_trace(model: Model, cx: Counterexample) -> Trace:
    trace = Trace()
    named = set()
    for t, (i, place) in enumerate(cx.schedule):
        agent = model.agents[i]
        where = agent.where(place)
        if agent.is_transfer:
            trace.transfer(agent.cta, agent.name, t, t + 1, 0, where)
            continue
        if agent.key not in named:
            trace.name_warp(agent.cta, agent.key[2], agent.name)
            named.add(agent.key)
        trace.op(agent.cta, agent.key[2], describe(agent.steps[place]), t, t + 1, where)
    return trace

"""A schedule that shows a finding of happens_before.py: replayed on the model to the violation.

Requires: an Order and a Model (without symmetry reduction: the schedule names each agent) of
the same recording. Guarantees: `witness` returns a Counterexample whose schedule runs, in the
recorded order, just what must happen before the finding's targets (leaving out its held steps
and all that follows them), then the targets, then whatever can run, first recorded first,
until the model reports the violation or every live agent is blocked (E401).
None if the replay ends cleanly (the finding did not hold: not expected).
"""

from __future__ import annotations

from .explore import Counterexample, deadlock_violation
from .happens_before import Finding, Order
from .model import Model, Violation


def witness(order: Order, model: Model, finding: Finding) -> Counterexample | None:
    targets, held = set(finding.targets), finding.held

    def past(target: tuple) -> set[tuple]:
        clocks = order.base if finding.early_wait and _is_wait(order, target) else order.clock
        return {(i, p) for _, i, p in order.steps if order.before((i, p), target, clocks)}

    wanted = set().union(*(past(t) for t in targets))
    wanted = {s for s in wanted if not any(order.before(h, s) for h in held)}
    last = finding.targets[-1]          # the step that shows it: after all the others
    prefix = [(i, p) for _, i, p in order.steps if (i, p) in wanted and (i, p) != last]
    return _replay(order, model, prefix + [last])


def _is_wait(order: Order, step: tuple) -> bool:
    i, p = step
    return order.agents[i].steps[p][0][0] == "wait"


def recorded_phases(order: Order, model: Model) -> dict[tuple, int]:
    """Replays the recorded order on the model: the phases each barrier completed. The model and
    the interpreter must agree on that run; a disagreement is a bug of tmalang's (RuntimeError)."""
    state = model.initial()
    for _, i, p in order.steps:
        if not model.enabled(state, i):
            raise RuntimeError(f"verify: the model cannot take the recorded step {p} of {model.names[i]}")
        try:
            state = model.step(state, i)
        except Violation as v:
            raise RuntimeError(f"verify: the model disagrees with the interpreter's run: {v.code} {v.message}")
    return {bar: state.bars[k][3] for bar, k in model.bar_index.items()}


def _replay(order: Order, model: Model, prefix: list[tuple]) -> Counterexample | None:
    """The prefix first, each step as soon as it can run (earliest listed first), the others held
    back; then every step, earliest recorded first."""
    state, done = model.initial(), []
    first = list(prefix)
    rest = [(i, p) for _, i, p in order.steps if (i, p) not in set(prefix)]
    while True:
        runnable = _first_runnable(model, state, first)
        if runnable is None:
            first, rest = [], first + rest
            runnable = _first_runnable(model, state, rest)
        if runnable is None:
            stuck = [i for i in range(len(model.agents)) if not model.finished(state, i)]
            if not stuck:
                return None
            return Counterexample(done, deadlock_violation(model, state, stuck), state)
        (first if runnable in first else rest).remove(runnable)
        try:
            after = model.step(state, runnable[0])
        except Violation as v:
            return Counterexample(done + [runnable], v, state)
        done.append(runnable)
        state = after


def _first_runnable(model: Model, state, steps: list[tuple]) -> tuple | None:
    return next((s for s in steps if state.places[s[0]] == _place_of(model, s) and model.enabled(state, s[0])), None)


def _place_of(model: Model, step: tuple) -> int:
    """The place an agent is at when its step `step` is next (a transfer's one step: issued)."""
    i, p = step
    return 0 if model.agents[i].is_transfer else p

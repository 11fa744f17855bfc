"""One launch verified: record one interpreted run, check its happens-before order, and show a
failed check by a schedule (or search the model's states, method="explore").

Requires: the kernel's final IR, its manifest and the launch's arrays. Guarantees: a Verdict that
is `verified` only when every schedule of the launch keeps the protocol (docs/interpreter.md,
"Verification"); otherwise its `error` and `trace` show a schedule that does not, or
`not_covered` says what was checked instead.
"""


from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..contract.binding import bind
from ..diagnostics import TmalangError
from ..interp import grid_size, interpret
from ..interp.observe import NO_OBSERVER
from ..ir import ops
from .explore import DEFAULT_STATE_LIMIT, Explored, explore
from .model import Model
from .happens_before import Order, findings
from .launches import claims_tiles
from .record import Recorder, components
from .schedule import recorded_phases, witness
from .report import counterexample_error, counterexample_trace, finding_error
from .certificate import certificate_of

METHODS = ("order", "explore")
CLOCK_ENTRIES = 20_000_000      # steps x agents the order method holds clocks for (two lists each)
SCHEDULE_DEPENDENT = (ops.TileClaim, ops.ClcTryCancel, ops.ClcQuery, ops.TileTake)


@dataclass
class Verdict:
    """What `verify` established for one launch (its dims and grid)."""

    verified: bool
    states: int = 0
    agents: int = 0
    dims: dict = field(default_factory=dict)
    ctas: int | None = None
    error: TmalangError | None = None      # the counterexample, in the interpreter's words
    trace: object = field(default=None, repr=False)       # contract.trace.Trace of that schedule
    not_covered: str | None = None         # why only the recorded schedule was checked
    method: str = "order"
    certificate: dict | None = field(default=None, repr=False)   # what was proved (certificate.py)
    recording: object = field(default=None, repr=False)   # the recorded run the order method checked

    def summary(self) -> str:
        launch = ", ".join(f"{k}={v}" for k, v in self.dims.items())
        if self.error is not None:
            return f"protocol violation ({self.error.code}) with {launch}"
        if self.not_covered:
            return f"checked one schedule only with {launch}: {self.not_covered}"
        what = (f"{self.states} steps, happens-before checks" if self.method == "order"
                else f"{self.states} states explored")
        return f"verified: every schedule of {self.agents} agents ({what}) with {launch}"


def verify(kernel: ops.KernelOp, manifest, *args, dims=None, ctas: int | None = None, reduce: bool = True,
           limit: int = DEFAULT_STATE_LIMIT, method: str = "order", certificate: bool = False) -> Verdict:
    """method "order": the happens-before checks (happens_before.py), which cover every schedule
    at the cost of one pass over the recorded steps; "explore": the search over the model's
    states (explore.py), exponential, kept to check the first against on small launches.
    certificate=True: a verified launch's Verdict.certificate says what was proved (certificate.py;
    method "order" only, whose happens-before checks it records)."""
    if certificate and method != "order":
        raise ValueError("a certificate records the happens-before checks: method='order'")
    binding = bind(manifest, args, dims) if args else None
    dims = dict(binding.symbols) if binding else dict(dims or {})
    recorder = Recorder()
    dynamic = _schedule_dependent(kernel, manifest, binding, ctas)
    try:
        interpret(kernel, manifest, *_copies(args), dims=dims, ctas=ctas,
                  observer=recorder if dynamic is None else NO_OBSERVER)
    except TmalangError as exc:   # the recorded run itself fails: the default schedule is the counterexample
        return Verdict(False, dims=dims, ctas=ctas, error=exc)
    if dynamic is not None:
        return Verdict(False, dims=dims, ctas=ctas, not_covered=f"its warps' paths depend on the schedule "
                       f"({dynamic.name} at {dynamic.span.location() if dynamic.span else '?'})")
    recording = recorder.recording()
    verdict = Verdict(True, 0, len(recording.agents), dims, ctas, method=method, recording=recording)
    if method == "order":
        verdict = _by_order(recording, verdict)
        if certificate and verdict.verified:
            verdict.certificate = certificate_of(kernel, manifest, recording, dims, ctas)
        return verdict
    for part in components(recording):
        model = Model(part)
        explored: Explored = explore(model, reduce=reduce, limit=limit)
        verdict.states += explored.states
        if explored.counterexample is not None:
            verdict.verified = False
            verdict.error = counterexample_error(model, explored.counterexample)
            verdict.trace = counterexample_trace(model, explored.counterexample)
            return verdict
        if not explored.complete:
            verdict.verified = False
            verdict.not_covered = f"the search stopped at its limit of {limit} states"
    return verdict


def _schedule_dependent(kernel: ops.KernelOp, manifest, binding, ctas: int | None):
    """The first op whose outcome depends on the schedule, or None. A dynamic walk's claims on a
    grid of one CTA do not: its claimer alone steps the counter, so the claims are the tiles in
    order in every schedule, and each take reads the claim that a recorded, race-checked
    full/empty protocol hands it (the ops of cluster launch control depend on the grid's CTAs)."""
    if claims_tiles(kernel) and binding is not None and grid_size(kernel, manifest, binding.tile_count(), ctas) == 1:
        return None
    return next((o for o in ops.walk(kernel.body) if isinstance(o, SCHEDULE_DEPENDENT)), None)


def _by_order(recording, verdict: Verdict, witnesses: int = 16) -> Verdict:
    """The happens-before checks; a finding is shown by the shortest schedule among the first
    `witnesses` findings' (schedule.py). Each step's clocks hold an entry per agent: a launch
    whose steps times agents pass CLOCK_ENTRIES is not checked (its memory would grow with that
    product), and the verdict says so."""
    steps = sum(len(a.steps) for a in recording.agents)
    if steps * len(recording.agents) > CLOCK_ENTRIES:
        verdict.verified = False
        verdict.not_covered = (f"its recorded run has {steps} steps of {len(recording.agents)} agents, past the "
                               f"{CLOCK_ENTRIES} clock entries the checks hold; a smaller launch checks the same "
                               "protocol")
        return verdict
    order = Order(recording)
    model = Model(recording, symmetric=False)
    verdict.states = len(order.steps)
    found = findings(order, recorded_phases(order, model))
    shown = [cx for cx in (witness(order, model, f) for f in found[:witnesses]) if cx is not None]
    if found and not shown:   # the checks are sufficient conditions: say which failed, and where
        verdict.verified = False
        verdict.error = finding_error(model, found[0])
        return verdict
    if shown:
        cx = min(shown, key=lambda c: len(c.schedule))
        verdict.verified = False
        verdict.error = counterexample_error(model, cx)
        verdict.trace = counterexample_trace(model, cx)
    return verdict


def _copies(args) -> list:
    """The caller's arrays stay as they were: the recorded run writes copies, laid out as the
    originals (a padded row stays padded: TMA checks strides)."""
    return [_copy_of(a) if isinstance(a, np.ndarray) else a for a in args]


def _copy_of(a: np.ndarray) -> np.ndarray:
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    if not base.flags.c_contiguous:
        return np.array(a, copy=True)
    offset = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return np.ndarray(a.shape, a.dtype, buffer=base.copy(), offset=offset, strides=a.strides)

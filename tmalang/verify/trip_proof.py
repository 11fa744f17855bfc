"""Every trip count of the loops over one dim: the runs, the premise, the pumping and the cutoff.

Requires: a kernel's final IR and manifest. Guarantees: `prove_every_trip_count` returns a
TripProof: the launches it interpreted and verified (trip counts 1, 2, …, the other dims at one
partial box, the scalars of the first launch kept), and either `shown` (every trip count >= 1:
loop_shape.py's premise holds, the runs pump from t0 on in each residue class, and the cutoff
argument of every_trip_count.py holds), or `why` not (the runs' trip counts are then the bound),
or the first launch that does not verify (`failed`).

Trips per launch. When a persistent grid deals tiles to P CTAs, one more tile per CTA takes P more
trips: the launches then go P trips at a time, in P residue classes (t = r, r + P, r + 2P, …),
each pumped and cut off on its own.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..contract.assumptions import evaluate
from ..contract.binding import bind, tile_units
from ..contract.random_inputs import random_inputs
from ..diagnostics import TmalangError
from ..interp import grid_size
from ..ir import ops
from .check import verify
from .every_trip_count import Cutoff, aligned, cutoff
from .launches import Launch, _tail, trip_counts, units
from .loop_shape import Broken, Premise, premise
from .pumping import pump

BIG = 10 ** 5          # a trip count past every grid change
SMALL = 5              # the other dims: one partial box of at most this many elements
BUDGET = 180.0         # seconds of interpreted runs per dim before the proof gives up (says so)


@dataclass
class TripProof:
    """For one dim: every trip count of the loops over it, or the bound the runs checked and why
    the argument did not apply (docs/interpreter.md, "Every trip count")."""

    dim: str
    runs: dict = field(default_factory=dict)      # trip count -> Verdict of each interpreted launch
    period: int = 1
    t0: dict = field(default_factory=dict)        # residue -> first trip count pumped from
    shown: list = field(default_factory=list)     # Cutoff per residue
    why: str = ""

    @property
    def failed(self):
        return next(((t, v) for t, v in sorted(self.runs.items()) if not v.verified), None)

    @property
    def failed_launch(self):
        t, verdict = self.failed
        return Launch(verdict.dims, None, self.dim, t), verdict

    @property
    def every_trip_count(self) -> bool:
        return not self.why and self.failed is None and len(self.shown) == self.period

    def summary(self) -> str:
        checked = sorted(self.runs)
        if self.failed:
            return f"{self.dim}: fails at trip count {self.failed[0]}"
        if self.every_trip_count:
            per = f", {self.period} trips per tile of each CTA" if self.period > 1 else ""
            return (f"{self.dim}: every trip count >= 1 (runs at {checked[0]}..{checked[-1]}; pumped from "
                    f"{min(self.t0.values())}{per}; {max(c.copies for c in self.shown)} built copies cover windows "
                    f"of {max(c.w for c in self.shown)})")
        return f"{self.dim}: the sweep's trip counts only ({len(checked)} more run here): {self.why}"


def prove_every_trip_count(kernel: ops.KernelOp, manifest, dim: str, seed: int = 0, copies: int = 0,
                           budget: float = BUDGET) -> TripProof:
    proof = TripProof(dim)
    if dim in dict(_defined(manifest)):
        proof.why = f"an assumption defines {dim} from other dims: it grows with them, shown or bounded there"
        return proof
    runner = _Runner(kernel, manifest, dim, seed, proof, budget)
    if runner.run(1) is None:
        return proof
    shape = runner.premise()
    depth = max(trip_counts(kernel))
    if isinstance(shape, str):           # the bound is then the sweep's launches (sweep.py)
        proof.why = shape
        return proof
    for r in range(1, proof.period + 1):
        start = r + proof.period * shape[r].from_trips
        for t in range(1, start):                     # below the premise's reach: each run verified
            if runner.run(t) is None:
                return proof
        if not _pumped(runner, proof, r, start, depth, copies):
            return proof
    return proof


def _pumped(runner, proof: TripProof, r: int, start: int, depth: int, copies: int) -> bool:
    """The first t0 = start, start + P, … from which four runs pump and the cutoff holds."""
    p = proof.period
    for t0 in range(start, start + p * (2 * depth + 4), p):
        if runner.over_budget():
            proof.why = f"stopped at trip count {t0}: over its budget of {runner.budget:.0f} s"
            return False
        runs = [runner.run(t0 + j * p) for j in range(4)]
        if any(run is None for run in runs):
            return False
        pumped = pump(*runs[:3], t0, runs[3])
        if isinstance(pumped, str):
            proof.why = pumped
            continue
        ordered = aligned(pumped)
        if ordered is None:
            proof.why = "the warps' copies cannot be ordered (no rotation of their blocks orders every edge)"
            continue
        shown = cutoff(ordered, copies or 2 * depth + 4)
        if isinstance(shown, Cutoff):
            proof.t0[r], proof.why = t0, ""
            proof.shown.append(shown)
            return True
        proof.why = shown
    return False


class _Runner:
    """Interprets and verifies launches by trip count, once each."""

    def __init__(self, kernel, manifest, dim, seed, proof, budget: float = BUDGET):
        self.kernel, self.manifest, self.dim, self.seed, self.proof = kernel, manifest, dim, seed, proof
        self.unit = units(kernel)
        self.scalars = None
        self.recordings: dict = {}
        self.started, self.budget, self.last = time.monotonic(), budget, 0.0

    def over_budget(self) -> bool:
        return time.monotonic() - self.started > self.budget

    def dims(self, t: int) -> dict:
        """The launch at trip count t; a dim an assumption makes a multiple of c (`assume C % 64 ==
        0`) takes whole boxes; a dim an assumption defines (`assume RSC == 9 * C`) is computed."""
        whole = _multiples(self.manifest)
        unit = {d: math.lcm(u, whole.get(d, 1)) for d, u in self.unit.items()}
        tail = {d: u if d in whole else _tail(u) for d, u in unit.items()}
        small = {d: v if d in whole else min(v, SMALL) for d, v in tail.items()}    # one partial box, cheap
        dims = small | {self.dim: (t - 1) * unit[self.dim] + tail[self.dim]}
        for name, expr in _defined(self.manifest):
            dims[name] = evaluate(expr, dims, [])
        return dims

    def run(self, t: int):
        """The recording at trip count t, or None (refused: `why`; not verified: `failed`)."""
        if t in self.recordings:
            return self.recordings[t]
        spent = time.monotonic() - self.started
        if spent + 2 * self.last > self.budget:       # the next run takes at least as long as the last
            self.proof.why = f"stopped before trip count {t}: its runs would pass their budget of {self.budget:.0f} s"
            return None
        dims = self.dims(t)
        began = time.monotonic()
        try:
            inputs, self.scalars = _inputs(self.manifest, dims, self.seed, self.scalars)
            verdict = verify(self.kernel, self.manifest, *inputs, dims=dims)
        except TmalangError as exc:
            if exc.code.startswith("E4"):
                raise
            self.proof.why = f"the kernel refuses the launch with {self.dim} at trip count {t} ({exc.code})"
            return None
        self.last = time.monotonic() - began
        if verdict.not_covered:
            self.proof.why = f"at trip count {t}: {verdict.not_covered}"
            return None
        self.proof.runs[t] = verdict
        self.recordings[t] = verdict.recording if verdict.verified else None
        return self.recordings[t]

    def premise(self) -> dict | str:
        """Residue -> loop_shape's Premise, on the grid large trip counts get (the interpreter's: a
        CTA per tile, or at most two, whole clusters, for a persistent grid)."""
        grid_at = lambda t: _grid(self.kernel, self.manifest, self.dims(t), self.scalars)   # noqa: E731
        grid = grid_at(BIG)
        if grid != grid_at(2 * BIG):
            return f"{self.dim} grows the grid (more CTAs, each with its own tiles)"
        settled = next(t for t in range(1, BIG + 1) if grid_at(t) == grid)
        fixed = _launch_values(self.manifest, self.dims(1), self.scalars, self.dim)
        unit, tail = self.dims(2)[self.dim] - self.dims(1)[self.dim], self.dims(1)[self.dim]
        for name, _ in _defined(self.manifest):
            fixed.pop(name, None)             # defined from the dim: the premise derives it
        first = None
        for period in (1, 2, 3, 4):         # trips per launch: tiles dealt to `period` CTAs, or rows paired
            shapes = {r: premise(self.kernel, self.dim, period * unit, (r - 1) * unit + tail, fixed, grid,
                                 _defined(self.manifest))
                      for r in range(1, period + 1)}
            broken = next((s for s in shapes.values() if isinstance(s, Broken)), None)
            if broken is None:
                self.proof.period = period
                for r, s in shapes.items():
                    s.from_trips = max(s.from_trips, -(-(settled - r) // period))
                return shapes
            if first is None or first.period == period:
                first = broken                   # reported: at one trip per launch, or as many as tiles are dealt
        return f"the loops over {self.dim} do not meet the premise: {first}"


def _multiples(manifest) -> dict:
    """Dims an assumption makes whole multiples: `assume C % 64 == 0` -> {"C": 64}."""
    return {a.lhs[1]: a.lhs[2] for a in manifest.assumptions if a.compare == "==" and a.rhs == 0 and
            isinstance(a.lhs, tuple) and a.lhs[0] == "%" and isinstance(a.lhs[1], str) and isinstance(a.lhs[2], int)}


def _defined(manifest) -> list[tuple[str, object]]:
    """Dims an assumption defines from others, `assume X == expr`, in the order written: (X, the
    expression as contract/manifest.py's tree)."""
    return [(a.lhs, a.rhs) for a in manifest.assumptions if a.compare == "==" and isinstance(a.lhs, str)
            and a.rhs != 0]


def _grid(kernel, manifest, dims: dict, scalars) -> int:
    values = {a.name: v for a, v in zip(manifest.args, scalars or []) if not isinstance(v, np.ndarray)}
    return grid_size(kernel, manifest, tile_units(manifest, dims, values))


def _launch_values(manifest, dims: dict, inputs: list, dim: str) -> dict:
    """The values the premise reads as fixed: the other dims and the integer scalars."""
    scalars = {a.name: int(v) for a, v in zip(manifest.args, inputs) if not isinstance(v, np.ndarray)
               and float(v).is_integer()}
    return {d: v for d, v in dims.items() if d != dim} | scalars


def _inputs(manifest, dims: dict, seed: int, scalars: list | None) -> tuple[list, list]:
    """Random inputs, with the scalars of the first trip count kept for the others (a scalar can
    change the loops); the first draw that the kernel's assumptions accept, of a few seeds."""
    for attempt in range(16):
        inputs = random_inputs(manifest, dict(dims), np.random.default_rng(seed + attempt))
        if scalars is not None:
            return [s if not isinstance(v, np.ndarray) else v for v, s in zip(inputs, scalars)], scalars
        try:
            bind(manifest, inputs, dims)
        except TmalangError as exc:
            if exc.code == "E219" and attempt < 15:
                continue
            raise
        return inputs, inputs
    raise AssertionError("unreachable")

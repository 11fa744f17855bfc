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

from dataclasses import dataclass, field

import numpy as np

from ..contract.binding import _units, bind
from ..contract.random_inputs import random_inputs
from ..diagnostics import TmalangError
from ..interp import DEFAULT_PERSISTENT_CTAS
from ..ir import ops
from .check import verify
from .every_trip_count import Cutoff, aligned, cutoff
from .launches import Launch, _tail, trip_counts, units
from .loop_shape import Broken, Premise, premise
from .pumping import pump

BIG = 10 ** 5          # a trip count past every grid change


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
        bound = f"trip counts {checked[0]}..{checked[-1]} only" if checked else "no launch"
        return f"{self.dim}: {bound}: {self.why}"


def prove_every_trip_count(kernel: ops.KernelOp, manifest, dim: str, seed: int = 0, copies: int = 0) -> TripProof:
    proof = TripProof(dim)
    runner = _Runner(kernel, manifest, dim, seed, proof)
    if runner.run(1) is None:
        return proof
    shape = runner.premise()
    depth = max(trip_counts(kernel))
    if isinstance(shape, str):           # the bound instead: every trip count up to 2S + 1, run
        for t in range(2, 2 * depth + 2):
            if runner.run(t) is None or runner.proof.failed:
                break
        proof.why = proof.why if proof.failed or proof.why.startswith("the kernel refuses") else shape
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
        runs = [runner.run(t0 + j * p) for j in range(4)]
        if any(run is None for run in runs):
            return False
        pumped = pump(*runs[:3], t0, runs[3])
        if isinstance(pumped, str):
            proof.why = pumped
            continue
        repaired = aligned(pumped)
        for candidate in ([repaired] if repaired else []) + pumped.alignments():
            shown = cutoff(candidate, copies or 2 * depth + 4)
            if isinstance(shown, Cutoff):
                proof.t0[r], proof.why = t0, ""
                proof.shown.append(shown)
                return True
            proof.why = shown
    return False


class _Runner:
    """Interprets and verifies launches by trip count, once each."""

    def __init__(self, kernel, manifest, dim, seed, proof):
        self.kernel, self.manifest, self.dim, self.seed, self.proof = kernel, manifest, dim, seed, proof
        self.unit = units(kernel)
        self.scalars = None
        self.recordings: dict = {}

    def dims(self, t: int) -> dict:
        return {d: _tail(u) for d, u in self.unit.items()} | {self.dim: (t - 1) * self.unit[self.dim] +
                                                                _tail(self.unit[self.dim])}

    def run(self, t: int):
        """The recording at trip count t, or None (refused: `why`; not verified: `failed`)."""
        if t in self.recordings:
            return self.recordings[t]
        dims = self.dims(t)
        try:
            inputs, self.scalars = _inputs(self.manifest, dims, self.seed, self.scalars)
            verdict = verify(self.kernel, self.manifest, *inputs, dims=dims)
        except TmalangError as exc:
            if exc.code.startswith("E4"):
                raise
            self.proof.why = f"the kernel refuses the launch with {self.dim} at trip count {t} ({exc.code})"
            return None
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
        unit, tail = self.unit[self.dim], _tail(self.unit[self.dim])
        first = None
        for period in (1, 2, 3, 4):         # trips per launch: tiles dealt to `period` CTAs, or rows paired
            shapes = {r: premise(self.kernel, self.dim, period * unit, (r - 1) * unit + tail, fixed, grid)
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


def _grid(kernel, manifest, dims: dict, scalars) -> int:
    values = {a.name: v for a, v in zip(manifest.args, scalars or []) if not isinstance(v, np.ndarray)}
    tiles = _units(manifest, dims, values)
    count = tiles if manifest.grid.kind == "tiles" else min(tiles, DEFAULT_PERSISTENT_CTAS)
    return -(-count // kernel.cluster) * kernel.cluster


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

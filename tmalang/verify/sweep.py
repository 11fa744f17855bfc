"""A set of launches verified: launches.py's sweep, each on random inputs.

Requires: the kernel's final IR and manifest. Guarantees: a Sweep with each launch's Verdict,
stopping at the first that does not verify, and the launches the kernel refused; and
verify_base_launches, what compile(verify=True) runs: it raises a violation's located error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..contract.random_inputs import random_inputs
from ..diagnostics import TmalangError
from ..contract.binding import bind
from ..ir import ops
from .check import verify
from .explore import DEFAULT_STATE_LIMIT
from .every_trip_count import Cutoff, cutoff
from .launches import Launch, sweep, trip_counts, units, _tail
from .pumping import pump


@dataclass
class Sweep:
    """What a sweep verified: each launch's verdict, and the launches the kernel refused."""

    trip_counts: list[int]
    verdicts: list = field(default_factory=list)      # (Launch, Verdict)
    skipped: list = field(default_factory=list)       # (Launch, the refusal's code)
    proofs: list = field(default_factory=list)        # TripProof per dim (every trip count, or why not)

    @property
    def failed(self):
        found = next(((launch, v) for launch, v in self.verdicts if not v.verified), None)
        return found or next((p.failed_launch for p in self.proofs if p.failed), None)

    def summary(self) -> str:
        grids = sorted({launch.ctas or 1 for launch, _ in self.verdicts})
        lines = [f"{len(self.verdicts)} launches verified: trip counts {self.trip_counts} of the loops over each dim "
                 f"(partial last boxes), grids of {grids} CTAs" +
                 (f"; {len(self.skipped)} launches refused by the kernel's assumptions or binding" if self.skipped else "")]
        return "\n  ".join(lines + [p.summary() for p in self.proofs])


def verify_sweep(kernel: ops.KernelOp, manifest, states: int = DEFAULT_STATE_LIMIT, seed: int = 0,
                 base_only: bool = False) -> Sweep:
    """verify over `sweep`'s launches (only the base ones with `base_only`), on random inputs,
    stopping at the first launch that does not verify."""
    report = Sweep(trip_counts(kernel))
    for launch in sweep(kernel, manifest.grid.kind != "tiles"):
        if base_only and launch.varied:
            continue
        try:
            inputs = random_inputs(manifest, dict(launch.dims), np.random.default_rng(seed))
            verdict = verify(kernel, manifest, *inputs, dims=dict(launch.dims), ctas=launch.ctas, limit=states)
        except TmalangError as exc:
            if exc.code.startswith("E4"):
                raise
            report.skipped.append((launch, exc.code))
            continue
        report.verdicts.append((launch, verdict))
        if not verdict.verified:
            return report
    if not base_only:
        for dim in sorted(units(kernel)):
            report.proofs.append(prove_every_trip_count(kernel, manifest, dim, seed))
            if report.proofs[-1].failed:
                break
    return report


@dataclass
class TripProof:
    """For one dim: every trip count of the loops over it, or the bound the runs checked and why
    the argument did not apply (docs/interpreter.md, "Every trip count")."""

    dim: str
    runs: list = field(default_factory=list)     # (trip count, Verdict) of each interpreted launch
    t0: int = 0
    shown: Cutoff | None = None
    why: str = ""

    @property
    def failed(self):
        return next(((t, v) for t, v in self.runs if not v.verified), None)

    @property
    def failed_launch(self):
        t, verdict = self.failed
        return Launch(verdict.dims, None, self.dim, t), verdict

    def summary(self) -> str:
        checked = [t for t, _ in self.runs]
        if not checked:
            return f"{self.dim}: {self.why}"
        if self.failed:
            return f"{self.dim}: fails at trip count {self.failed[0]}"
        if self.shown:
            return (f"{self.dim}: every trip count >= 1 (runs at {checked[0]}..{checked[-1]}; from {self.t0} on one more "
                    f"iteration is one more copy of a block, and {self.shown.copies} built copies cover windows of "
                    f"{self.shown.w})")
        return f"{self.dim}: trip counts {checked[0]}..{checked[-1]} only: {self.why}"


def prove_every_trip_count(kernel: ops.KernelOp, manifest, dim: str, seed: int = 0, copies: int = 0) -> TripProof:
    """Runs the kernel at trip counts 1, 2, … of the loops over `dim` (the other dims at one partial
    box: one tile per CTA), until three in a row pump (pumping.py), then the cutoff argument
    (every_trip_count.py) on the built runs. Stops at the first run that does not verify."""
    unit = units(kernel)
    depth = max(trip_counts(kernel))
    proof = TripProof(dim)
    recordings, scalars = [], None
    for t in range(1, 2 * depth + 5):
        dims = {d: _tail(u) for d, u in unit.items()} | {dim: (t - 1) * unit[dim] + _tail(unit[dim])}
        try:
            inputs, scalars = _inputs(kernel, manifest, dims, seed, scalars if t > 1 else None)
            verdict = verify(kernel, manifest, *inputs, dims=dims)
        except TmalangError as exc:
            if exc.code.startswith("E4"):
                raise
            proof.why = f"the kernel refuses the launch with {dim} at trip count {t} ({exc.code})"
            return proof
        proof.runs.append((t, verdict))
        if not verdict.verified:
            return proof
        recordings.append(verdict.recording)
        if t >= 4:
            pumped = pump(*recordings[-4:-1], t - 3, recordings[-1])
            if isinstance(pumped, str):
                proof.why = pumped
                continue
            for aligned in pumped.alignments():
                shown = cutoff(aligned, copies or 2 * depth + 4)
                if isinstance(shown, Cutoff):
                    proof.t0, proof.shown = t - 3, shown
                    return proof
                proof.why = shown      # perhaps a head not yet run through (a prologue of min(S, t) trips)
    return proof


def _inputs(kernel, manifest, dims: dict, seed: int, scalars: list | None) -> tuple[list, list]:
    """Random inputs, with the scalars of the first trip count kept for the others (a scalar can
    change the loops); the first draw that the kernel's assumptions accept, of a few seeds."""
    for attempt in range(16):
        inputs = random_inputs(manifest, dict(dims), np.random.default_rng(seed + attempt))
        if scalars is not None:
            inputs = [s if not isinstance(v, np.ndarray) else v for v, s in zip(inputs, scalars)]
            return inputs, scalars
        try:
            bind(manifest, inputs, dims)
        except TmalangError as exc:
            if exc.code == "E219" and attempt < 15:
                continue
            raise
        return inputs, inputs
    raise AssertionError("unreachable")


def verify_base_launches(kernel: ops.KernelOp, manifest) -> None:
    """What compile(verify=True) and `tmalangc --verify` run: the sweep's base launches (two boxes
    and a tail per dim, 1..3 CTAs); a violation raises its located error."""
    failed = verify_sweep(kernel, manifest, base_only=True).failed
    if failed is not None and failed[1].error is not None:
        raise failed[1].error

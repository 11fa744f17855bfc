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
from ..ir import ops
from .check import verify
from .explore import DEFAULT_STATE_LIMIT
from .launches import claims_tiles, sweep, trip_counts, units
from .trip_proof import prove_every_trip_count


@dataclass
class Sweep:
    """What a sweep verified: each launch's verdict, and the launches the kernel refused."""

    trip_counts: list[int]
    verdicts: list = field(default_factory=list)      # (Launch, Verdict)
    skipped: list = field(default_factory=list)       # (Launch, the refusal's code)
    proofs: list = field(default_factory=list)        # TripProof per dim (every trip count, or why not)
    claiming: bool = False                            # a dynamic walk: grids of one CTA only

    @property
    def failed(self):
        found = next(((launch, v) for launch, v in self.verdicts if not v.verified), None)
        return found or next((p.failed_launch for p in self.proofs if p.failed), None)

    def summary(self) -> str:
        grids = sorted({launch.ctas or 1 for launch, _ in self.verdicts})
        lines = [f"{len(self.verdicts)} launches verified: trip counts {self.trip_counts} of the loops over each dim "
                 f"(partial last boxes), grids of {grids} CTAs" +
                 (" (a dynamic walk: on more CTAs its claims depend on the schedule)" if self.claiming else "") +
                 (f"; {len(self.skipped)} launches refused by the kernel's assumptions or binding" if self.skipped else "")]
        return "\n  ".join(lines + [p.summary() for p in self.proofs])


def verify_sweep(kernel: ops.KernelOp, manifest, states: int = DEFAULT_STATE_LIMIT, seed: int = 0,
                 base_only: bool = False) -> Sweep:
    """verify over `sweep`'s launches (only the base ones with `base_only`), on random inputs,
    stopping at the first launch that does not verify."""
    report = Sweep(trip_counts(kernel), claiming=claims_tiles(kernel))
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


def verify_base_launches(kernel: ops.KernelOp, manifest) -> None:
    """What compile(verify=True) and `tmalangc --verify` run: the sweep's base launches (two boxes
    and a tail per dim, 1..3 CTAs); a violation raises its located error."""
    failed = verify_sweep(kernel, manifest, base_only=True).failed
    if failed is not None and failed[1].error is not None:
        raise failed[1].error

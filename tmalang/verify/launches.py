"""The launches a sweep verifies: every loop's trip count through a stated set, grids of 1..3 CTAs.

Requires: a kernel IR and its manifest. Guarantees: `sweep` yields launches (dims, ctas) such that,
for each symbolic dim d and each trip count t in `trip_counts(kernel)`, some launch makes the
loops walking d run t times with a partial last box (d = (t - 1) * unit + tail, unit the largest
box extent along d, 0 < tail <= unit), the other dims at two units and a tail; each on 1, 2 and 3
CTAs where the grid is persistent (tiles per CTA then vary too), on 1 where its walk claims its
tiles (`dynamic`: on more CTAs the claims depend on the schedule, which verify does not cover). A launch the kernel's assumptions
or the binding refuse is reported as skipped, not verified. The set of trip counts is the bound
a sweep states: {1, 2, 3, S, S + 1, 2S, 2S + 1} with S the deepest ring, where a ring's stage and
parity first repeat together (stage i mod S, parity (i / S) & 1 has period 2S).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import ops


@dataclass(frozen=True)
class Launch:
    dims: dict
    ctas: int | None
    varied: str          # the dim whose trip count this launch sets ("" for the base launch)
    trips: int


def trip_counts(kernel: ops.KernelOp) -> list[int]:
    depth = max((d.stages for d in ops.decls(kernel, ops.MbarrierDecl).values()), default=1)
    return sorted({1, 2, 3, depth, depth + 1, 2 * depth, 2 * depth + 1})


def units(kernel: ops.KernelOp) -> dict[str, int]:
    """Per symbolic dim, the largest box extent along an axis of that dim (a box's trip unit)."""
    tensors = ops.decls(kernel, ops.TensorDecl)
    found: dict[str, int] = {}
    for box in ops.decls(kernel, ops.BoxDecl).values():
        shape = tensors[box.tensor].shape
        for axis, dim in enumerate(shape):
            if isinstance(dim, str) and axis < len(box.shape):
                found[dim] = max(found.get(dim, 1), box.shape[axis])
    for tensor in tensors.values():
        for dim in tensor.shape:
            if isinstance(dim, str):
                found.setdefault(dim, 1)
    return found


def claims_tiles(kernel: ops.KernelOp) -> bool:
    """A dynamic walk on a persistent grid: verify covers every schedule of it on one CTA only
    (on more, which CTA claims which tile depends on the schedule: verify/check.py)."""
    body = list(ops.walk(kernel.body))
    return any(isinstance(o, ops.TileClaim) for o in body) and not any(isinstance(o, ops.ClcTryCancel) for o in body)


def sweep(kernel: ops.KernelOp, persistent: bool) -> list[Launch]:
    unit = units(kernel)
    base = {d: 2 * u + _tail(u) for d, u in unit.items()}
    grids = ((1,) if claims_tiles(kernel) else (1, 2, 3)) if persistent else (None,)
    launches = [Launch(dict(base), c, "", 0) for c in grids]
    for d, u in sorted(unit.items()):
        for t in trip_counts(kernel):
            dims = dict(base, **{d: (t - 1) * u + _tail(u)})
            launches += [Launch(dims, c, d, t) for c in grids]
    return launches


def _tail(unit: int) -> int:
    """A partial last box: an odd count short of the unit (the whole unit when it is 1)."""
    return unit if unit == 1 else unit // 2 + 1

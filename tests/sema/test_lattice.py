"""The small exact integer solver of global_races (tmalang/sema/lattice.py), against enumeration,
and on the systems E580 builds: box offsets against tile steps, element strides, tile indices of
two tiles, quotients."""

from __future__ import annotations

import itertools
import random

import pytest

from tmalang.sema.lattice import SAT, UNKNOWN, UNSAT, System, solve

INF = None


@pytest.mark.parametrize("name,system,want", [
    # tiles x and x + 1 + s of one 64-row step: 64-row boxes never meet, 128-row boxes do
    ("box_equals_step", System({"x": (0, INF), "s": (0, INF), "ja": (0, 63), "jb": (0, 63)},
                               [({"ja": 1, "jb": -1, "s": -64}, 64)]), UNSAT),
    ("box_larger_than_step", System({"x": (0, INF), "s": (0, INF), "ja": (0, 127), "jb": (0, 127)},
                                    [({"ja": 1, "jb": -1, "s": -64}, 64)]), SAT),
    # rows 2j and 1 + 2j' of one tile: even and odd never meet
    ("interleaved_rows", System({"ja": (0, 31), "jb": (0, 31)}, [({"ja": 2, "jb": -2}, 1)]), UNSAT),
    # steps 64 and 128 of two unbounded indices reach every multiple of 64 (one residue class)
    ("two_steps", System({"x": (0, INF), "y": (0, INF), "j": (0, 63)}, [({"x": 64, "y": -128, "j": 1}, 5)]), SAT),
    ("two_steps_off_class", System({"x": (0, INF), "y": (0, INF), "j": (0, 3)}, [({"x": 64, "y": -128, "j": 2}, 5)]),
     UNSAT),
    # n / 2 of tiles n and n + 1 + s: n = 2q + r, the same q for both
    ("quotient", System({"n": (0, INF), "s": (0, INF), "q": (0, INF), "r": (0, 1), "r2": (0, 1)},
                        [({"n": 1, "q": -2, "r": -1}, 0), ({"n": 1, "s": 1, "q": -2, "r2": -1}, -1)]), SAT),
])
def test_systems_of_the_analysis(name, system, want):
    found = solve(system)
    assert found.status == want, name
    if found.model is not None:
        assert _holds(system, found.model)


def _holds(system: System, model: dict) -> bool:
    value = lambda coeffs: sum(a * model[v] for v, a in coeffs.items())   # noqa: E731
    in_bounds = all((lo is None or lo <= model[v]) and (hi is None or model[v] <= hi)
                    for v, (lo, hi) in system.bounds.items())
    return (in_bounds and all(value(c) == k for c, k in system.eqs)
            and all(value(c) <= k for c, k in system.les))


def _random_system(rng: random.Random, unbounded: bool) -> System:
    names = [f"v{i}" for i in range(rng.randint(2, 4))]
    bounds = {}
    for v in names:
        lo = rng.randint(-3, 3)
        hi = lo + rng.randint(0, 6)
        if unbounded and rng.random() < 0.4:
            lo, hi = (lo, None) if rng.random() < 0.7 else (None, None)
        bounds[v] = (lo, hi)
    pick = lambda: {v: rng.choice([-6, -4, -3, -2, -1, 1, 2, 3, 4, 8]) for v in rng.sample(names, rng.randint(1, len(names)))}  # noqa: E731,E501
    eqs = [(pick(), rng.randint(-12, 12)) for _ in range(rng.randint(1, 2))]
    les = [(pick(), rng.randint(-6, 12)) for _ in range(rng.randint(0, 1))]
    return System(bounds, eqs, les)


def _enumerate(system: System, window: int = 24) -> bool:
    names = sorted(system.bounds)
    ranges = []
    for v in names:
        lo, hi = system.bounds[v]
        ranges.append(range(-window if lo is None else lo, (window if hi is None else hi) + 1))
    return any(_holds(system, dict(zip(names, values))) for values in itertools.product(*ranges))


@pytest.mark.slow   # an enumeration sweep
@pytest.mark.parametrize("unbounded", [False, True], ids=["bounded", "unbounded"])
def test_solver_agrees_with_enumeration(unbounded):
    """Bounded systems: the solver's answer is enumeration's. With unbounded variables an
    enumeration over a window can only show solutions, so a found one must be SAT and an UNSAT
    answer must leave the window empty; UNKNOWN (several equations sharing unbounded variables
    with no unit coefficient, which kernels do not produce) stays rare. Every model the solver
    gives satisfies the system."""
    rng = random.Random(2027 + unbounded)
    unknown = 0
    for _ in range(300):
        system = _random_system(rng, unbounded)
        found = solve(system)
        if found.status == UNKNOWN:
            assert unbounded, system
            unknown += 1
            continue
        if found.model is not None:
            assert found.status == SAT and _holds(system, found.model), (system, found)
        exists = _enumerate(system)
        if not unbounded:
            assert (found.status == SAT) == exists, system
        elif exists:
            assert found.status == SAT, system
    assert unknown <= 9, unknown

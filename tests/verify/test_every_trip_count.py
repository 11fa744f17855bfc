"""Every trip count from finitely many (verify/pumping.py, verify/every_trip_count.py, issue 28).

- a ring's K loop (gemm_sm90, blocksum) and a persistent tile loop (gemm_sm90's N) are shown
  for every trip count; the run that pumping builds at a trip count never interpreted is the
  interpreter's run at that trip count, event for event;
- pumping refuses what does not pump (a dim that grows the grid, a dim no loop walks), and the
  cutoff refuses copies that are not ordered or an order that crosses the loop without a warp
  running through it;
- a protocol bug fails at the trip count the runs reach it;
- `tmalangc verify --sweep` says, per dim, which it showed.
"""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.verify.check import verify
from tmalang.verify.every_trip_count import Cutoff, cutoff
from tmalang.verify.launches import _tail, units
from tmalang.verify.pumping import Pumped, _canonical, pump
from tmalang.verify.trip_proof import _inputs, prove_every_trip_count
from tmalang.cli.verify import verify_main

EXAMPLES = ROOT / "examples"


def _kernel(name: str):
    k = tmalang.compile_file(EXAMPLES / name)
    return k._c.ir, k.manifest


def _recordings(name: str, dim: str, trips) -> list:
    ir, manifest = _kernel(name)
    unit = units(ir)
    runs, scalars = [], None
    for t in trips:
        dims = {d: _tail(u) for d, u in unit.items()} | {dim: (t - 1) * unit[dim] + _tail(unit[dim])}
        inputs, scalars = _inputs(manifest, dims, 0, scalars)
        verdict = verify(ir, manifest, *inputs, dims=dims)
        assert verdict.verified, verdict.summary()
        runs.append(verdict.recording)
    return runs


@pytest.mark.parametrize("name, dim, period", [("gemm_sm90.tma", "K", 1), ("blocksum.tma", "K", 1),
                                               pytest.param("gemm_sm90.tma", "N", 1, marks=pytest.mark.slow),
                                               ("multistage_sm90.tma", "K", 1), ("tma_copy.tma", "M", 2)])
def test_a_ring_loop_is_shown_for_every_trip_count(name, dim, period):
    ir, manifest = _kernel(name)
    proof = prove_every_trip_count(ir, manifest, dim)
    assert proof.every_trip_count, proof.summary()
    assert proof.period == period and len(proof.shown) == period
    assert all(c.copies >= c.a + c.b + c.w + 2 for c in proof.shown)
    assert set(proof.runs) >= set(range(1, max(proof.runs) + 1))     # every trip count below was run
    assert "every trip count" in proof.summary()


def test_the_built_run_is_the_interpreted_run_at_a_trip_count_never_used_to_build_it():
    runs = _recordings("gemm_sm90.tma", "K", [2, 3, 4, 5, 9])
    pumped = pump(*runs[:3], 2, runs[3])
    assert isinstance(pumped, Pumped), pumped
    built, _, completed = pumped.recording(7)
    assert isinstance(completed, dict)
    stages = pumped.stages
    seen, made = _canonical(runs[4], stages), _canonical(built, stages)
    assert set(seen) == set(made)
    for key in seen:
        assert [s for s, _ in seen[key][1]] == [s for s, _ in made[key][1]], key


def test_runs_that_are_not_one_block_longer_each_time_do_not_pump():
    runs = _recordings("gemm_sm90.tma", "K", [2, 3, 4, 6])
    found = pump(*runs[:3], 2, runs[3])          # the fourth is two trip counts on, not one
    assert isinstance(found, str) and "not those at" in found


def test_a_dim_that_grows_the_grid_falls_back_to_the_runs_with_its_reason():
    ir, manifest = _kernel("copy_explicit.tma")
    proof = prove_every_trip_count(ir, manifest, "M")
    assert not proof.every_trip_count and proof.failed is None
    assert "grows the grid" in proof.summary()


def test_too_few_copies_are_made_enough():
    runs = _recordings("blocksum.tma", "K", [1, 2, 3, 4])
    pumped = pump(*runs[:3], 1, runs[3])
    shown = cutoff(pumped, 3)               # 3 copies cannot hold the windows: cutoff builds more
    assert isinstance(shown, Cutoff) and shown.copies > 3


def test_copies_out_of_order_are_refused():
    """Labelling one warp's copies one iteration late makes an edge run back across copies."""
    runs = _recordings("gemm_sm90.tma", "K", [3, 4, 5, 6])
    pumped = pump(*runs[:3], 3, runs[3])
    producer = next(k for k, (_, xs, ys, zs) in pumped.warps.items() if ys and k[2] == 0)
    name, xs, ys, zs = pumped.warps[producer]
    n = len(ys)
    late = {**pumped.warps, producer: (name, xs + ys, [(tuple(_moved(e, pumped)), s) for e, s in ys],
                                       [(tuple(_moved(e, pumped)), s) for e, s in zs])}
    found = cutoff(Pumped(pumped.t0, late, pumped.shifts, pumped.stages, pumped.counts), 12)
    assert isinstance(found, str), found
    assert n > 0


def _moved(step, pumped):
    from tmalang.verify.pumping import _shift
    return [_shift(e, 1, pumped.shifts) for e in step]


def test_a_protocol_bug_fails_at_the_trip_count_it_needs():
    k = tmalang.compile_file(ROOT / "tests" / "verify_bugs" / "ring_lagging_waiter.tma")
    proof = prove_every_trip_count(k._c.ir, k.manifest, "M")
    assert proof.failed is not None and proof.failed[1].error.code.startswith("E4")
    assert "fails at trip count" in proof.summary()


def test_the_cli_sweep_says_which_dims_it_showed(capsys):
    code = verify_main([str(EXAMPLES / "blocksum.tma"), "--sweep"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "K: every trip count >= 1" in out and "M: every trip count >= 1" in out

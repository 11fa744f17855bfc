"""tmalang.verify: every schedule of a launch, against random exploration and against itself.

- tests/verify_bugs/: protocol bugs that `explore=64` misses under several seeds (the schedule
  that shows each is too rare for a random scheduler), and that `verify` finds, with a located
  error in the interpreter's words, its schedule and a trace;
- the two methods (the happens-before checks and the state search) agree on each of them;
- every example verifies, at odd shapes, on 1 and 3 CTAs: no false positive.
"""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

import tmalang
from conftest import EXAMPLES, ROOT, example_arch, example_archs
from references import CASES
from tmalang.verify import verify

BUGS = ROOT / "tests" / "verify_bugs"
MISSED_BY_EXPLORE = {"lagging_waiter": "E425", "ring_lagging_waiter": "E425", "lagging_group": "E425",
                     "early_completion": "E425", "bytes_before_arming": ("E425", "E403")}
SEEDS = (0, 1000, 2000)


def _copy_launch(rng, shape=(96, 128)):
    src = rng.standard_normal(shape).astype(np.float32)
    return src, np.full(shape, np.nan, np.float32)


def _bug(name):
    return tmalang.compile_file(BUGS / f"{name}.tma")


@pytest.mark.parametrize("name", sorted(MISSED_BY_EXPLORE))
def test_random_exploration_misses_the_bug(name):
    kernel = _bug(name)
    src, dst = _copy_launch(np.random.default_rng(1))
    for seed in SEEDS:
        kernel.interpret(src, dst, ctas=1, seed=seed, explore=64)   # raises if a schedule showed it


@pytest.mark.parametrize("method", ["order", "explore"])
@pytest.mark.parametrize("name", sorted(MISSED_BY_EXPLORE))
def test_verify_finds_the_bug(name, method):
    kernel = _bug(name)
    src, dst = _copy_launch(np.random.default_rng(1))
    before = dst.copy()
    verdict = verify(kernel._c.ir, kernel.manifest, src, dst, ctas=1, method=method)
    assert not verdict.verified and verdict.error is not None
    assert verdict.error.code in np.atleast_1d(MISSED_BY_EXPLORE[name])
    report = verdict.error.render()
    assert f"{name}.tma:" in report and "^" in report            # located, with a caret
    assert "synchronisation steps" in report and "role '" in report
    trace = json.loads(verdict.trace.to_json())["traceEvents"]
    assert sum(e["ph"] == "X" for e in trace) >= 10               # the schedule, drawn
    np.testing.assert_array_equal(np.isnan(dst), np.isnan(before))  # the caller's arrays untouched


def test_a_wait_on_every_other_phase_is_found_with_a_short_schedule():
    kernel = _bug("every_other_phase")
    src, dst = _copy_launch(np.random.default_rng(2))
    verdict = kernel.verify(src, dst, ctas=1)
    assert verdict.error.code == "E425" and "passes its wait for parity 1" in verdict.error.notes[0]
    assert len([n for n in verdict.error.notes if n.startswith("  ")]) <= 20


def _claiming(name):
    """A verify_bugs kernel whose tile loops claim their tiles (`dynamic`, persistent grid)."""
    text = (BUGS / f"{name}.tma").read_text()
    assert "grid persistent" in text
    return tmalang.compile(re.sub(r"tiles\((\w+), (\w+)\) as (\w+) \{", r"tiles(\1, \2) dynamic as \3 {", text),
                           name=f"{name}_claiming.tma")


@pytest.mark.parametrize("name", ["lagging_waiter", "ring_lagging_waiter", "lagging_group"])
def test_a_claiming_walk_on_one_cta_is_verified_for_every_schedule(name):
    """On one CTA a dynamic walk's claims are the tiles in order whatever the schedule, so verify
    covers every schedule: it finds the bug random schedules miss. On three CTAs the claims
    depend on the schedule, and verify says it checked the recorded one only."""
    kernel = _claiming(name)
    src, dst = _copy_launch(np.random.default_rng(1))
    for seed in SEEDS:
        kernel.interpret(src, dst, ctas=1, seed=seed, explore=64)   # raises if a schedule showed it
    verdict = kernel.verify(src, dst, ctas=1)
    assert verdict.error is not None and verdict.error.code == "E425", verdict.summary()
    many = kernel.verify(src, dst, ctas=3)
    assert many.error is not None or "tile_claim" in many.not_covered


def test_a_verdict_prints_what_was_established_not_its_recording():
    """The recording, trace and certificate stay reachable as fields but out of the repr, which a
    REPL prints: a verified launch of a few dozen agents is one line, not thousands of steps."""
    kernel = tmalang.compile((ROOT / "examples" / "tma_copy.tma").read_text())
    src = np.random.default_rng(1).standard_normal((70, 100)).astype(np.float32)
    verdict = kernel.verify(src, np.zeros_like(src))
    assert verdict.verified and verdict.recording is not None
    assert len(repr(verdict)) < 300 and "recording" not in repr(verdict)


def test_the_cli_reports_the_counterexample_and_writes_its_trace(tmp_path, capsys):
    from tmalang.cli.main import main
    trace = tmp_path / "cx.json"
    code = main(["verify", str(BUGS / "lagging_waiter.tma"), "--dims", "M=96,N=128", "--ctas", "1",
                 "--trace", str(trace)])
    err = capsys.readouterr().err
    assert code == 1 and "error[E425]" in err and "lagging_waiter.tma:" in err
    assert json.loads(trace.read_text())["traceEvents"]


def test_the_cli_says_verified_for_a_correct_kernel(capsys):
    from tmalang.cli.main import main
    assert main(["verify", str(ROOT / "examples" / "tma_copy.tma"), "--dims", "M=300,N=200"]) == 0
    assert "verified: every schedule" in capsys.readouterr().out


SMALL = ["tma_copy", "copy_explicit", "blocksum", "blocksum_prefetch", "saxpy"]


@pytest.mark.parametrize("name", SMALL)
def test_both_methods_verify_small_examples(name):
    path = ROOT / "examples" / f"{name}.tma"
    kernel = tmalang.compile_file(path, arch=example_arch(path))
    args, _ = CASES[kernel.name](np.random.default_rng(3), (70, 130))
    for method in ("order", "explore"):
        verdict = verify(kernel._c.ir, kernel.manifest, *args, ctas=2, method=method)
        assert verdict.verified, (method, verdict.summary(), verdict.error)


EXAMPLE_TARGETS = [(p, arch) for p in EXAMPLES for arch in example_archs(p)]


@pytest.mark.slow   # every example on 1 and 3 CTAs (tests/interp/test_invariant.py verifies each at small dims)
@pytest.mark.parametrize("ctas", [1, 3])
@pytest.mark.parametrize("path,arch", EXAMPLE_TARGETS, ids=[f"{p.stem}-{a}" for p, a in EXAMPLE_TARGETS])
def test_every_example_verifies(path, arch, ctas):
    """For every target the example compiles for."""
    kernel = tmalang.compile_file(path, arch=arch)
    args, _ = CASES[kernel.name](np.random.default_rng(5), (200, 260))
    start = time.perf_counter()
    verdict = kernel.verify(*args, ctas=ctas)
    print(f"{path.stem}: {verdict.summary()} in {time.perf_counter() - start:.2f}s")
    assert verdict.error is None, verdict.error.render()
    assert verdict.verified or "depend on the schedule" in verdict.not_covered


# ---- sweeps: every loop's trip count through a stated set, grids of 1..3 CTAs ------------------

def test_a_sweep_states_its_bound_and_varies_each_dim():
    from tmalang.verify.launches import sweep, trip_counts
    kernel = tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma")
    depth = 4                                   # gemm_sm90's ring
    assert trip_counts(kernel._c.ir) == [1, 2, 3, depth, depth + 1, 2 * depth, 2 * depth + 1]
    launches = sweep(kernel._c.ir, persistent=True)
    for dim, unit in (("M", 128), ("N", 256), ("K", 64)):
        trips = {-(-launch.dims[dim] // unit) for launch in launches if launch.varied == dim}
        assert trips == set(trip_counts(kernel._c.ir))
        assert all(launch.dims[dim] % unit for launch in launches if launch.varied == dim)   # partial boxes
    assert {launch.ctas for launch in launches} == {1, 2, 3}


@pytest.mark.parametrize("name", ["tma_copy", "copy_explicit", "saxpy"])
def test_the_sweep_verifies_small_examples(name, capsys):
    from tmalang.cli.main import main
    path = ROOT / "examples" / f"{name}.tma"
    assert main(["verify", str(path), "--sweep", "--arch", example_arch(path)]) == 0
    assert "launches verified: trip counts" in capsys.readouterr().out


def test_the_sweep_finds_the_lagging_waiter_and_names_its_launch(capsys):
    from tmalang.cli.main import main
    assert main(["verify", str(BUGS / "lagging_waiter.tma"), "--sweep"]) == 1
    err = capsys.readouterr().err
    assert "does not verify" in err and "error[E425]" in err and "ctas=" in err


# ---- one switch away: compile(verify=True), tmalangc --verify, TMALANG_VERIFY=1 -------------------

def test_compile_with_verify_refuses_a_protocol_that_fails_in_some_schedule(monkeypatch):
    with pytest.raises(tmalang.TmalangError) as caught:
        tmalang.compile_file(BUGS / "lagging_waiter.tma", verify=True)
    assert caught.value.code == "E425"
    tmalang.compile_file(BUGS / "lagging_waiter.tma")                     # off by default
    monkeypatch.setenv("TMALANG_VERIFY", "1")
    with pytest.raises(tmalang.TmalangError):
        tmalang.compile_file(BUGS / "lagging_waiter.tma")
    tmalang.compile_file(BUGS / "lagging_waiter.tma", verify=False)       # the argument wins


def test_tmalangc_verify_switch(tmp_path, capsys):
    from tmalang.cli.main import main
    out = tmp_path / "k.ptx"
    assert main([str(ROOT / "examples" / "tma_copy.tma"), "--verify", "-o", str(out)]) == 0 and out.exists()
    assert main([str(BUGS / "lagging_waiter.tma"), "--verify", "-o", str(tmp_path / "bug.ptx")]) == 1
    assert "error[E425]" in capsys.readouterr().err
    assert not (tmp_path / "bug.ptx").exists()


def test_the_cli_runs_either_method_and_refuses_another(capsys):
    from tmalang.cli.main import main
    for method in ("order", "explore"):
        assert main(["verify", str(BUGS / "lagging_waiter.tma"), "--dims", "M=96,N=128", "--ctas", "1",
                     "--method", method]) == 1
        assert "error[E425]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["verify", str(BUGS / "lagging_waiter.tma"), "--method", "sample"])
    kernel = _bug("lagging_waiter")
    with pytest.raises(tmalang.TmalangError) as caught:
        kernel.verify(*_copy_launch(np.random.default_rng(1)), method="sample")
    assert caught.value.code == "E212"


def test_a_certificate_of_the_state_search_is_refused_with_a_diagnostic(tmp_path):
    kernel = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma")
    args, _ = CASES[kernel.name](np.random.default_rng(3), (70, 130))
    with pytest.raises(tmalang.TmalangError) as caught:
        kernel.verify(*args, method="explore", certificate=tmp_path / "c.json")
    assert caught.value.code == "E212" and not (tmp_path / "c.json").exists()


def test_a_launch_too_large_for_the_clocks_is_said_to_be_unchecked(monkeypatch):
    """The order method holds a clock entry per agent for every step: past CLOCK_ENTRIES it checks
    nothing and says why, rather than run out of memory (a 133-head backward did, in the fuzzer)."""
    from tmalang.verify import check
    kernel = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma")
    src, dst = _copy_launch(np.random.default_rng(3))
    assert kernel.verify(src, dst, ctas=1).verified
    monkeypatch.setattr(check, "CLOCK_ENTRIES", 10)
    verdict = kernel.verify(src, dst, ctas=1)
    assert not verdict.verified and verdict.error is None
    assert "clock entries the checks hold" in verdict.not_covered and "a smaller launch" in verdict.not_covered

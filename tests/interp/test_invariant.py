"""The soundness contract as a standing test, over the examples and mutants of them.

1. A program of the high-level layer (no hand-written barriers) that the compiler accepts runs
   clean under every schedule of its launch (`tmalang.verify`; random schedules where its warps'
   paths depend on the schedule): a protocol diagnostic there is a compiler bug, not the user's.
2. Whatever the input, the compiler answers with a located diagnostic or with PTX that ptxas
   accepts, never with a traceback.

The mutants are those of the fuzzer (bench/fuzz.py, which runs thousands of them in parallel
with a time limit); here hypothesis draws 150 (about 15 s), derandomized so that CI is stable. The
fuzzer's findings stand below as regression tests: each was a protocol error, a traceback or a
ptxas rejection on an accepted program before its fix.
`fuzz.check` names the outcome; the failing ones are listed in `fuzz.FAILURES`.
"""

from __future__ import annotations

import importlib.util
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EXAMPLES, ROOT, example_arch
from tmalang.backend import ptxas


def _load_fuzz():
    # loaded by path: putting bench/ on sys.path would let bench/copy.py shadow the `copy` module
    spec = importlib.util.spec_from_file_location("tmalang_fuzz", ROOT / "bench" / "fuzz.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()
SOURCES = {p.name: p.read_text() for p in EXAMPLES}
HAVE_PTXAS = ptxas.find_ptxas() is not None


# the examples whose warps' paths depend on the schedule: a dynamic walk's claims on a persistent
# grid (verified on one CTA, random schedules of two) and cluster launch control's cancels (verify
# checks one schedule, the fuzzer then random ones)
CLAIMING = {name for name, text in SOURCES.items() if " dynamic {" in text and "sm100" not in name}
SCHEDULE_DEPENDENT = {"gemm_dynamic_sm100.tma"}


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_example_verifies_at_small_dims(name, seed):
    outcome, detail, verdict = fuzz.examine(SOURCES[name], example_arch(ROOT / "examples" / name), SOURCES[name],
                                            seed=seed, assemble=False)
    assert outcome == "interp_clean", detail
    if name in SCHEDULE_DEPENDENT:
        assert verdict == "not_covered" and "random schedules" in detail, detail
    elif name in CLAIMING:   # a grid of one CTA verified outright; a larger one on one CTA, and sampled
        assert verdict == "verified" and "verified: every schedule" in detail, detail
        assert ("random schedules" in detail) == ("on one CTA" in detail), detail
    else:
        assert verdict == "verified" and "verified: every schedule" in detail, detail


@pytest.mark.parametrize("bug", ["early_completion", "every_other_phase", "bytes_before_arming"])
def test_the_fuzzer_finds_what_only_verify_finds(bug):
    """Each of these hand-written protocols breaks under a schedule too rare for random ones
    (tests/verify/test_verify.py): the fuzzer reports verify's E425, and as the user's protocol."""
    text = (ROOT / "tests" / "verify_bugs" / f"{bug}.tma").read_text()
    outcome, detail, verdict = fuzz.examine(text, "sm_90a", seed=0, assemble=False)
    assert (outcome, verdict) == ("explicit_protocol", "violation"), detail
    assert "error[E425]" in detail, detail


def test_a_protocol_error_counts_against_the_compiler_only_in_the_high_level():
    from tmalang.diagnostics import TmalangError

    dims = {"M": 3}
    for code in ("E401", "E421", "E425", "E533"):
        error = TmalangError(code, "a protocol error")
        assert fuzz._judge(error, SOURCES["tma_copy.tma"], SOURCES["tma_copy.tma"], dims)[0] == "protocol_error"
        assert fuzz._judge(error, SOURCES["copy_explicit.tma"], None, dims)[0] == "explicit_protocol"
        assert fuzz._verdict_of(error) == "violation"
    for code in ("E206", "E488"):     # the launch's data: a partial bulk chunk, an im2col start outside its box
        error = TmalangError(code, "a launch error")
        assert fuzz._judge(error, SOURCES["tma_copy.tma"], SOURCES["tma_copy.tma"], dims)[0] == "interp_refused"
        assert fuzz._verdict_of(error) == "refused"


def test_the_fuzzer_classifies_what_it_finds():
    """The classification itself: a protocol error counts against the compiler only in the high level."""
    copy = SOURCES["tma_copy.tma"]
    assert not fuzz.is_explicit(copy) and fuzz.is_explicit(SOURCES["copy_explicit.tma"])
    explicit = SOURCES["copy_explicit.tma"]     # the one example that orders its buffer itself
    assert not fuzz.ordering_edited(explicit, explicit)
    assert fuzz.ordering_edited(explicit.replace("wait_group read 0", "wait_group read 1", 1), explicit)
    assert fuzz.ordering_edited(explicit.replace("store Out[m, n] <- buf", "store Out[m, n] <- buf\n store Out[m, n] <- buf"),
                                explicit)
    assert not fuzz.ordering_edited(copy + "\n", copy)
    assert fuzz.check("kernel k(", "sm_90a")[0] == "diagnostic"
    assert fuzz.mutant(7, 3) == fuzz.mutant(7, 3)        # mutants are reproducible from (seed, index)


@pytest.mark.slow   # a hypothesis sweep of mutants
@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(SOURCES)), seed=st.integers(0, 2**32 - 1))
def test_mutants_get_a_diagnostic_or_assembled_code_that_runs_clean(name, seed):
    text = fuzz.mutate(SOURCES[name], random.Random(seed))
    outcome, detail = fuzz.check(text, example_arch(ROOT / "examples" / name), SOURCES[name], seed=seed % 1000,
                                 assemble=HAVE_PTXAS)
    assert outcome not in fuzz.FAILURES, f"{outcome} on this mutant of {name}:\n{text}\n{detail}"


def test_a_launch_of_too_many_tiles_is_not_interpreted():
    """A persistent grid walks every tile: a literal dim edited from 4 to 1024 made 3328 tiles of
    stencil_sm90, whose race clocks passed a worker's 4 GiB (seed 28, mutant 723)."""
    import tmalang

    wide = tmalang.compile(_edit("stencil_sm90.tma", "out: f32[M, N, 4]", "out: f32[M, N, 1024]"))
    plain = tmalang.compile(SOURCES["stencil_sm90.tma"])
    for seed in range(5):
        assert fuzz._small_dims(wide.manifest, random.Random(seed)) is None
        assert fuzz._small_dims(plain.manifest, random.Random(seed)) is not None


def test_assumptions_no_launch_can_meet_are_a_refusal_not_a_traceback():
    """Mutant 702 of attention_bwd_sm90 (the sweep above): `assume causal >= 3` beside `assume
    causal <= 1`. No inputs meet both, so the launch is refused (E219): the harness's outcome is
    interp_refused; it reported the refusal as an escaped traceback before."""
    text = _edit("attention_bwd_sm90.tma", "assume causal >= 0", "assume causal >= 3")
    outcome, detail = fuzz.check(text, example_arch(ROOT / "examples" / "attention_bwd_sm90.tma"),
                                 SOURCES["attention_bwd_sm90.tma"], seed=2, assemble=False)
    assert outcome == "interp_refused" and "E219" in detail, detail


# --- findings of bench/fuzz.py (seeds 2026, 2027): each was a compiler bug until its fix ----------

def _edit(name: str, old: str, new: str) -> str:
    assert old in SOURCES[name], old
    return SOURCES[name].replace(old, new, 1)


def _interpret_clean(text: str, arch: str, dims: dict, seeds: list[int]) -> None:
    import numpy as np
    import tmalang
    from tmalang.cli.run import _random_inputs

    from tmalang.diagnostics import TmalangError

    try:
        kernel = tmalang.compile(text, arch=arch)
    except TmalangError:
        return   # refused with a diagnostic: that fixes it too
    for seed in seeds:
        kernel.interpret(*_random_inputs(kernel.manifest, dict(dims), np.random.default_rng(0)), dims=dims, seed=seed)


_FINDINGS = {
    # a slot field loaded twice in one produce block compiled; the loads raced (E405): now E070
    "F1_slot_loaded_twice": (lambda: _edit("saxpy.tma", "load Y[m, n] -> s.ys",
                                           "load Y[m, n] -> s.ys\n load Y[m, n] -> s.ys"),
                             "sm_90a", {"M": 130, "N": 130}, [1, 2, 3, 4]),
    # an smem tile accumulated only inside consume/steps got no proxy fence before its store (E406)
    "F2_accumulated_tile_unfenced": (lambda: _edit("blocksum.tma", "            acc = 0.0\n", ""),
                                     "sm_90a", {"M": 130, "K": 130}, [1]),
    # a generic write to the staging tile from another role raced with the store: now E104
    "F2b_tile_written_by_other_role": (lambda: _edit("blocksum.tma", "            for k in steps(K, 64) {\n",
                                                     "            acc = 0.0\n            for k in steps(K, 64) {\n"),
                                       "sm_90a", {"M": 130, "K": 130}, [1]),
    # issue item 3: a one-stage ring consumed by wgmma deadlocked (E401)
    "F3_one_stage_wgmma_ring": (lambda: _edit("gemm_chain_sm90.tma", "pipeline ring[4]", "pipeline ring[1]"),
                                "sm_90a", {"M": 131, "K": 133, "H": 64, "N": 127}, [1]),
    # issue item 2: a strided box crashed the interpreter: now E025 (innermost stride) / E064
    "F5_strided_box": (lambda: _edit("tma_copy.tma", "box In  = src[64, 128]", "box In  = src[64, 128] strides [1, 2]"),
                       "sm_90a", {"M": 64, "N": 130}, [1]),
    # a slot stored with TMA, then overwritten by tile math with no wait_group read between (E405)
    "F8_slot_stored_then_rewritten": (lambda: _edit("saxpy.tma", "s.ys = a * s.xs + s.ys",
                                                    "store O[m, n] <- s.ys\n s.ys = a * s.xs + s.ys"),
                                      "sm_90a", {"M": 130, "N": 130}, [1, 2, 3, 4]),
    # the same tile stored twice in one consume block: the second store raced the first's writes (E421)
    "F9_tile_stored_twice": (lambda: _edit("saxpy.tma", "store O[m, n] <- s.ys",
                                           "store O[m, n] <- s.ys\n store O[m, n] <- s.ys"),
                             "sm_90a", {"M": 63, "N": 1}, [356992357, 1, 2]),
    # a store that ignores a tile index whose tiles are several: CTAs raced on one tile (E421): now E105
    "F10_store_ignores_tile_index": (lambda: _edit("attention_sm100.tma", "o: bf16[S, 64]", "o: bf16[S, 256]"),
                                     "sm_100a", {"S": 130, "T": 70}, [611582927]),
    # an unmodified example raced on Tensor Memory under one schedule (E405, tcgen05.mma vs tcgen05.ld)
    "F7_tmem_race_gemm_sm100": (lambda: SOURCES["gemm_sm100.tma"], "sm_100a", {"M": 261, "K": 133, "N": 259},
                                [299096471]),
}


@pytest.mark.parametrize("finding", sorted(_FINDINGS))
def test_fuzz_finding(finding):
    make, arch, dims, seeds = _FINDINGS[finding]
    _interpret_clean(make(), arch, dims, seeds)


@pytest.mark.skipif(not HAVE_PTXAS, reason="needs ptxas")
def test_fuzz_finding_F6_high_mma_warp_without_regs():
    from tmalang.compiler import Options, compile_source
    from tmalang.diagnostics import TmalangError

    text = _edit("gemm_sm100.tma", "role mma: warp 1 {", "role mma: warp 24 {")
    try:
        c = compile_source(text, "f6.tma", Options(arch="sm_100a"))
    except TmalangError:
        return   # refused with a diagnostic: fixed
    ptxas.assemble(c.ptx, "sm_100a")

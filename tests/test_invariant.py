"""The soundness contract as a standing test, over the examples and mutants of them.

1. A program of the high-level layer (no hand-written barriers) that the compiler accepts runs
   clean on the interpreter under random schedules: a protocol diagnostic there is a compiler
   bug, not the user's.
2. Whatever the input, the compiler answers with a located diagnostic or with PTX that ptxas
   accepts, never with a traceback.

The mutants are those of the fuzzer (bench/fuzz.py, which runs thousands of them in parallel
with a time limit); here hypothesis draws a few hundred, derandomized so that CI is stable.
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


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_example_runs_clean_at_small_dims_and_random_schedules(name, seed):
    outcome, detail = fuzz.check(SOURCES[name], example_arch(ROOT / name), SOURCES[name], seed=seed,
                                 assemble=False)
    assert outcome == "interp_clean", detail


def test_the_fuzzer_classifies_what_it_finds():
    """The classification itself: a protocol error counts against the compiler only in the high level."""
    copy = SOURCES["tma_copy.tma"]
    assert not fuzz.is_explicit(copy) and fuzz.is_explicit(SOURCES["copy_explicit.tma"])
    gemm = SOURCES["gemm_sm90.tma"]
    assert not fuzz.ordering_edited(gemm, gemm)
    assert fuzz.ordering_edited(gemm.replace("wait_group read 1", "wait_group read 2", 1), gemm)
    assert fuzz.ordering_edited(gemm.replace("cs1 = bf16(acc[0, 3])", "cs1 = bf16(acc[0, 3])\n cs1 = bf16(acc[0, 3])"), gemm)
    assert not fuzz.ordering_edited(copy + "\n", copy)
    assert fuzz.check("kernel k(", "sm_90a")[0] == "diagnostic"
    assert fuzz.mutant(7, 3) == fuzz.mutant(7, 3)        # mutants are reproducible from (seed, index)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(SOURCES)), seed=st.integers(0, 2**32 - 1))
def test_mutants_get_a_diagnostic_or_assembled_code_that_runs_clean(name, seed):
    text = fuzz.mutate(SOURCES[name], random.Random(seed))
    outcome, detail = fuzz.check(text, example_arch(ROOT / name), SOURCES[name], seed=seed % 1000,
                                 assemble=HAVE_PTXAS)
    assert outcome not in fuzz.FAILURES, f"{outcome} on this mutant of {name}:\n{text}\n{detail}"

"""Every example, every kernel, every symbolic dim: `prove_every_trip_count` (issue 28's acceptance).

Each dim either is shown for every trip count >= 1, or the trip counts that were run verified and
the summary says why the argument did not apply or where the CI budget stopped it (a stated
bound; test_verify.py verifies every example at 200 x 260 on 1 and 3 CTAs besides, and
bench/verify_trip_counts.py runs every dim with a longer budget). No run may fail: no false positive. The
time of each is listed at the end of the test run (conftest.py's terminal summary).

The dims the argument is known to cover are pinned, so that a change that loses one fails here.
"""

from __future__ import annotations

import re
import time

import pytest

import tmalang
from conftest import EXAMPLES, example_arch
from tmalang.verify.launches import units
from tmalang.verify.trip_proof import prove_every_trip_count

pytestmark = pytest.mark.slow   # every example's every dim through the proof: ~6 minutes on 2 cores

BUDGET = 10.0          # seconds of runs per dim in CI; bench/verify_trip_counts.py gives them longer
SHOWN = {("gemm_sm90", "gemm", "K"), ("multistage_sm90", "multistage", "K"),
         ("tma_copy", "tma_copy", "M"), ("blocksum", "blocksum", "K"), ("attention_sm100", "attention", "T"),
         ("gemm_sm100", "gemm", "K"), ("saxpy", "saxpy", "M")}


def _cases():
    found = []
    for path in EXAMPLES:
        for name in re.findall(r"^\s*kernel (\w+)", path.read_text(), re.M):
            ir = tmalang.compile_file(path, arch=example_arch(path), kernel=name)._c.ir
            found += [(path, name, dim) for dim in sorted(units(ir))]
    return found


CASES = _cases()


def test_the_pinned_dims_exist():
    known = {(p.stem, k, d) for p, k, d in CASES}
    assert SHOWN <= known, SHOWN - known


@pytest.mark.parametrize("path, name, dim", CASES, ids=[f"{p.stem}-{k}-{d}" for p, k, d in CASES])
def test_every_dim_is_shown_or_bounded(path, name, dim, record_property):
    kernel = tmalang.compile_file(path, arch=example_arch(path), kernel=name)
    start = time.perf_counter()
    proof = prove_every_trip_count(kernel._c.ir, kernel.manifest, dim, budget=BUDGET)
    seconds = time.perf_counter() - start
    record_property("verify_report", f"{seconds:6.1f} s  {path.stem}/{name} {proof.summary()}")
    assert proof.failed is None, proof.failed[1].error.render() if proof.failed[1].error else proof.summary()
    assert proof.every_trip_count or proof.why, proof.summary()
    if (path.stem, name, dim) in SHOWN:
        assert proof.every_trip_count, proof.summary()

"""A kernel written from docs/language.md alone (tests/user_kernels/keys_by_queries.tma): weights
held keys by queries, as attention's backward holds Pᵀ. A stored [K, M] read MN-major (`km`), a
column vector v, `mask_below` with `mask_cols`, and row sums reduced into a row vector that every
column tile adds into (`reduce add`).

Against float64 at shapes that are not multiples of the boxes, causal offsets d of both signs: on
the interpreter over several schedules and CTA counts, through ptxas, and on the GPU.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "keys_by_queries.tma"
CASES = [(77, 150, 100, 0), (130, 70, 64, -30), (200, 129, 33, 45)]   # M, N, K, d
C = np.float32(0.125)


def inputs(m, n, k, seed):
    """Aᵀ [K, M], B [N, K] (bf16) and v [N], rows 16-byte aligned: views into padded arrays."""
    rng = np.random.default_rng(seed)
    at = rng.standard_normal((k, -(-m // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :m]
    b = rng.standard_normal((n, -(-k // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :k]
    v = rng.standard_normal(-(-n // 4) * 4).astype(np.float32)[:n]
    return at, b, v


def reference(at, b, v, d):
    s = at.astype(np.float64).T @ b.astype(np.float64).T
    rows, cols = np.indices(s.shape)
    w = np.where(cols >= rows + d, np.exp2(s * float(C) - v[None, :]), 0.0)
    return w, w.sum(axis=1)


def outputs(m, n):
    w = np.full((m, -(-n // 4) * 4), np.nan, np.float32)[:, :n]
    return w, np.zeros(-(-m // 4) * 4, np.float32)[:m]


def test_ptxas_assembles_it_without_spills():
    _, stats = ptxas.assemble(tmalang.compile_file(KERNEL).ptx, "sm_90a")
    assert stats.spill_stores == 0


@pytest.mark.parametrize("m,n,k,d", CASES, ids=str)
def test_the_interpreter_matches_float64_across_schedules(m, n, k, d):
    kernel = tmalang.compile_file(KERNEL)
    at, b, v = inputs(m, n, k, m + n + k)
    want_w, want_rows = reference(at, b, v, d)
    for seed, ctas in ((1, 1), (2, 3)):
        w, rows = outputs(m, n)
        kernel.interpret(at, b, v, C, np.int32(d), w, rows, seed=seed, explore=3, ctas=ctas)
        np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-30)
        np.testing.assert_allclose(rows, want_rows, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,d", CASES + [(1000, 4099, 130, 3)], ids=str)
def test_the_gpu_matches_float64(m, n, k, d):
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile_file(KERNEL)
    at, b, v = inputs(m, n, k, m + n + k)
    want_w, want_rows = reference(at, b, v, d)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x.base).view(np.int16)).cuda().view(torch.bfloat16)[:, :x.shape[1]]

    w = torch.full((m, -(-n // 4) * 4), float("nan"), device="cuda")[:, :n]
    rows = torch.zeros(-(-m // 4) * 4, device="cuda")[:m]
    kernel(device(at), device(b), torch.from_numpy(np.ascontiguousarray(v.base)).cuda()[:n], float(C), d, w, rows)
    torch.cuda.synchronize()
    np.testing.assert_allclose(w.cpu().numpy(), want_w, rtol=2e-5, atol=1e-30)
    np.testing.assert_allclose(rows.cpu().numpy(), want_rows, rtol=2e-5, atol=1e-5)

"""A kernel written from docs/language.md alone (tests/user_kernels/window_rowmax.tma): for each
row of S = A·Bᵀ, the max over the columns of its own window [lo[r], hi[r]), the windows read from
smem row vectors into row registers and applied as per-row mask limits (`mask_left`, `mask_cols`
with `l - 64 * j`), nested with the tensor's own end.

Against float64 at shapes that are not multiples of the boxes, windows that start before column 0,
end past N or hold no column (-inf): on the interpreter over schedules and CTA counts, through
ptxas, and on the GPU. Its first draft forgot the end at N (B's zero fill then entered the max):
the interpreter showed it, and the docs' attention examples mask T the same way.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "window_rowmax.tma"
CASES = [(77, 150, 100), (130, 70, 64), (200, 129, 33)]


def inputs(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, -(-k // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :k]
    b = rng.standard_normal((n, -(-k // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :k]
    lo = rng.integers(-5, n, m).astype(np.float32)
    hi = (lo + rng.integers(0, 80, m)).astype(np.float32)
    hi[0], lo[1], lo[2], hi[2] = lo[0], -5, n - 10, n + 20     # an empty window, one before 0, one past N
    return a, b, lo, hi


def reference(a, b, lo, hi):
    s = a.astype(np.float64) @ b.astype(np.float64).T
    cols = np.arange(s.shape[1])[None, :]
    return np.where((cols >= lo[:, None]) & (cols < hi[:, None]), s, -np.inf).max(axis=1)


def test_ptxas_assembles_it_without_spills():
    assert ptxas.assemble(tmalang.compile_file(KERNEL).ptx, "sm_90a")[1].spill_stores == 0


@pytest.mark.parametrize("m,n,k", CASES, ids=str)
def test_the_interpreter_matches_float64_across_schedules(m, n, k):
    kernel = tmalang.compile_file(KERNEL)
    a, b, lo, hi = inputs(m, n, k, m + n)
    want = reference(a, b, lo, hi)
    assert np.isinf(want).any() and np.isfinite(want).any()
    for seed, ctas in ((0, 1), (1, 2)):
        out = np.full(m, np.nan, np.float32)
        kernel.interpret(a, b, lo, hi, out, seed=seed, explore=2, ctas=ctas)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", CASES + [(1000, 4099, 130)], ids=str)
def test_the_gpu_matches_float64(m, n, k):
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile_file(KERNEL)
    a, b, lo, hi = inputs(m, n, k, m + n)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x.base).view(np.int16)).cuda().view(torch.bfloat16)[:, :x.shape[1]]
    out = torch.full((m,), float("nan"), device="cuda")
    kernel(device(a), device(b), torch.from_numpy(lo).cuda(), torch.from_numpy(hi).cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), reference(a, b, lo, hi), rtol=1e-5, atol=1e-5)

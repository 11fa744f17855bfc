"""A kernel written from the docs (tests/user_kernels/scores_softmax.tma): a row softmax of
scale · A·Bᵀ over at most 256 keys on wgmma fragments (§15d), with a shifted causal mask and each
row's log2-sum-exp2, at shapes that are not tile multiples: interpreter and H100 against float64,
and against each other."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "scores_softmax.tma"
BF16 = ml_dtypes.bfloat16
SHAPES = [(77, 37, 100, 0), (300, 200, 64, 5), (1000, 256, 130, 1 << 20), (129, 9, 1, -3)]


@pytest.fixture(scope="module")
def kernel():
    return tmalang.compile_file(KERNEL)


def padded(rng, rows, cols, dtype):
    """A matrix whose rows are 16-byte aligned (a view into padded rows), random (never zeros)."""
    step = 16 // np.dtype(dtype).itemsize
    return rng.standard_normal((rows, -(-cols // step) * step)).astype(dtype)[:, :cols]


def inputs(m, n, k, seed):
    rng = np.random.default_rng(seed)
    return padded(rng, m, k, BF16), padded(rng, n, k, BF16)


def reference(a, b, scale, shift):
    s = (a.astype(np.float64) @ b.astype(np.float64).T) * scale
    rows, cols = np.arange(s.shape[0])[:, None], np.arange(s.shape[1])[None, :]
    s = np.where(cols > rows + shift, -np.inf, s)
    top = s.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):          # a row masked whole (shift < 0) is NaN, as on the GPU
        e = np.exp(s - top)
    total = e.sum(axis=1, keepdims=True)
    return e / total, (top[:, 0] + np.log(total[:, 0])) / np.log(2)


def check(p, lse, a, b, scale, shift):
    expected, expected_lse = reference(a, b, scale, shift)
    np.testing.assert_allclose(np.asarray(p, np.float64), expected, rtol=2e-2, atol=4e-3)
    np.testing.assert_allclose(lse, expected_lse, rtol=0, atol=2e-4)


@pytest.mark.parametrize("m,n,k,shift", SHAPES[:2] + SHAPES[3:], ids=lambda v: str(v))
def test_interpreter_matches_float64(kernel, m, n, k, shift):
    a, b = inputs(m, n, k, m + n)
    p, lse = np.full((m, -(-n // 8) * 8), np.nan, BF16)[:, :n], np.full(m, np.nan, np.float32)
    kernel.interpret(a, b, np.float32(0.3), np.int32(shift), p, lse, seed=m, explore=2)
    check(p, lse, a, b, 0.3, shift)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k,shift", SHAPES, ids=lambda v: str(v))
def test_h100_matches_float64_and_interpreter(kernel, m, n, k, shift):
    torch = pytest.importorskip("torch")
    a, b = inputs(m, n, k, 3 * m + n)

    def cuda(x):
        base = x.base if x.base is not None else x
        return torch.from_numpy(np.ascontiguousarray(base).view(np.int16)).cuda().view(torch.bfloat16)[:, :x.shape[1]]
    p = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    lse = torch.full((m,), float("nan"), device="cuda")
    kernel(cuda(a), cuda(b), np.float32(0.3), np.int32(shift), p, lse)
    torch.cuda.synchronize()
    gpu_p, gpu_lse = p.float().cpu().numpy(), lse.cpu().numpy()
    check(gpu_p, gpu_lse, a, b, 0.3, shift)
    if m <= 300:
        interp_p, interp_lse = np.full((m, -(-n // 8) * 8), np.nan, BF16)[:, :n], np.full(m, np.nan, np.float32)
        kernel.interpret(a, b, np.float32(0.3), np.int32(shift), interp_p, interp_lse, seed=1)
        np.testing.assert_allclose(gpu_p, interp_p.astype(np.float32), rtol=2e-2, atol=2e-3)
        np.testing.assert_allclose(gpu_lse, interp_lse, rtol=0, atol=1e-4)

"""examples/gemv_sm90.tma, a decode GEMM written from language.md §15's short accumulators: y = x · Wᵀ
for 1..16 rows of x (and more in tiles of 16), against float64 at shapes that are not multiples
of the 16 x 64 tile, on the interpreter and on the GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT

EXAMPLE = ROOT / "examples" / "gemv_sm90.tma"
BF16 = ml_dtypes.bfloat16


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@pytest.mark.parametrize("m", [1, 3, 16, 19])      # 19: a second tile of x, 13 rows past its end
def test_gemv_matches_float64_on_the_interpreter(m):
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 328)).astype(BF16)
    w = rng.standard_normal((200, 328)).astype(BF16)
    y = np.full((m, 200), np.nan, BF16)
    got = tmalang.compile_file(EXAMPLE).interpret(x, w, y)[-1]
    assert relative_error(got, x.astype(np.float64) @ w.astype(np.float64).T) < 1e-2


def test_gemv_protocol_is_verified():
    x, w, y = np.ones((5, 136), BF16), np.ones((72, 136), BF16), np.zeros((5, 72), BF16)
    assert tmalang.compile_file(EXAMPLE).verify(x, w, y).verified


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 4100, 4104), (13, 1000, 2056), (16, 8192, 8192), (29, 520, 264)])
def test_gemv_matches_float64_on_the_h100(shape):
    torch = pytest.importorskip("torch")
    m, n, k = shape
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    tmalang.compile_file(EXAMPLE)(x, w, y)
    torch.cuda.synchronize()
    reference = x.double() @ w.double().t()
    assert ((y.double() - reference).norm() / reference.norm()).item() < 1e-2

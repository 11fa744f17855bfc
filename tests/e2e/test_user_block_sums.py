"""A kernel pair written from the docs alone (tests/user_kernels/block_sums.tma): `dynamic` and
`stream` tile loops with a dtype constant, on the interpreter and the H100, against float64."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT

SOURCE = (ROOT / "tests" / "user_kernels" / "block_sums.tma").read_text()
SHAPES = [(77, 1000), (1, 64), (300, 4104), (1000, 136)]
DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _case(m, k, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal((m, k)).astype(DTYPES[dtype])
    padded = np.zeros((m, -(-k // 64) * 64))
    padded[:, :k] = x.astype(np.float64)
    return x, padded.reshape(m, -1, 64).sum(1)


@pytest.mark.parametrize("kernel", ["fold_claimed", "fold_streamed"])
@pytest.mark.parametrize("shape", SHAPES)
def test_interpreter_matches_float64(kernel, shape):
    k = tmalang.compile(SOURCE, kernel=kernel, constants={"T": "bf16"})
    x, reference = _case(*shape, "bf16")
    for seed in (1, 2):
        out = k.interpret(x, np.zeros((shape[0], 64), np.float32), seed=seed, ctas=3)[0]
        assert np.abs(out - reference).max() <= 1e-5 * max(1.0, np.abs(reference).max())


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["fold_claimed", "fold_streamed"])
@pytest.mark.parametrize("shape", SHAPES)
def test_h100_matches_float64_and_the_interpreter(kernel, shape):
    torch = pytest.importorskip("torch")
    k = tmalang.compile(SOURCE, kernel=kernel, constants={"T": "f16"})
    x, reference = _case(*shape, "f16", seed=7)
    device_out = torch.zeros(shape[0], 64, device="cuda")
    for _ in range(2):     # twice: the dynamic kernel's tile counter must be back at 0
        device_out.zero_()
        k(torch.from_numpy(x).cuda(), device_out)
        got = device_out.cpu().numpy()
        assert np.abs(got - reference).max() <= 1e-5 * max(1.0, np.abs(reference).max())
    interpreted = k.interpret(x, np.zeros((shape[0], 64), np.float32), seed=3)[0]
    if kernel == "fold_claimed":     # one CTA sums each tile, in k order: the same bits
        assert np.array_equal(got, interpreted)
    else:                            # partial sums land in any order
        assert np.allclose(got, interpreted, rtol=1e-6, atol=1e-5)

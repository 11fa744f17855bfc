"""A kernel written from docs/language.md alone (tests/user_kernels/maxfold3.tma): a two-field,
three-deep ring folded by max into an smem tile, 32-row tiles, on a persistent grid.

Against float64 at shapes that are not multiples of the box (TMA's zero fill counted in the
fold), on the interpreter on 3 CTAs and on the GPU; and its protocol for every trip count of
the loops over K and M (verify/trip_proof.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.verify.trip_proof import prove_every_trip_count

KERNEL = ROOT / "tests" / "user_kernels" / "maxfold3.tma"
SHAPES = [(97, 133), (33, 31), (130, 201)]


def _inputs(rng, m: int, k: int):
    padded = -(-k // 4) * 4                     # rows of 16 bytes, as TMA needs
    x, y = (rng.standard_normal((m, padded)).astype(np.float32)[:, :k] for _ in range(2))
    return x, y


def _reference(x, y) -> np.ndarray:
    m, k = x.shape
    full = np.zeros((m, -(-k // 32) * 32))
    full[:, :k] = x.astype(np.float64) + y
    return full.reshape(m, -1, 32).max(axis=1)


@pytest.mark.parametrize("m, k", SHAPES)
def test_the_interpreter_folds_as_numpy(m, k):
    kernel = tmalang.compile_file(KERNEL)
    x, y = _inputs(np.random.default_rng(m * k), m, k)
    out = kernel.interpret(x, y, np.zeros((m, 32), np.float32), ctas=3)[-1]
    np.testing.assert_allclose(out, _reference(x, y), rtol=0, atol=1e-6)


@pytest.mark.parametrize("dim", ["K", "M"])
def test_its_protocol_holds_for_every_trip_count(dim):
    kernel = tmalang.compile_file(KERNEL)
    proof = prove_every_trip_count(kernel._c.ir, kernel.manifest, dim)
    assert proof.every_trip_count, proof.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("m, k", SHAPES + [(1000, 4099)])
def test_the_gpu_folds_as_numpy_and_the_interpreter(m, k):
    import torch
    kernel = tmalang.compile_file(KERNEL)
    x, y = _inputs(np.random.default_rng(m * k), m, k)
    out = torch.zeros((m, 32), dtype=torch.float32, device="cuda")
    kernel(*(torch.from_numpy(np.ascontiguousarray(a.base)).cuda()[:, :k] for a in (x, y)), out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), _reference(x, y), rtol=0, atol=1e-6)
    if m * k < 300_000:
        np.testing.assert_array_equal(out.cpu().numpy(),
                                      kernel.interpret(x, y, np.zeros((m, 32), np.float32), ctas=3)[-1])

"""Two kernels written from docs/language.md alone (§9 `split`, §16 `cluster 2x2` and
`multicast(m)`), as a user would, at shapes that are not multiples of any box or cluster block:
the interpreter and the H100 against NumPy (float64 for the sum, exact for the broadcast add)."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import padded

KERNELS = ROOT / "tests" / "user_kernels"


def f32(rng, shape, fill=None) -> np.ndarray:
    """A float32 array whose rows are 16-byte aligned (any rank)."""
    if len(shape) == 2:
        return padded(rng, shape, fill)
    base = np.empty((*shape[:-1], -(-shape[-1] // 4) * 4), np.float32)
    base[...] = rng.standard_normal(base.shape) if fill is None else fill
    return base[..., :shape[-1]]


def slabsum_case(rng, slabs, m, n, parts):
    x, y = f32(rng, (slabs, m, n)), f32(rng, (1, m, n))
    want = y.astype(np.float64) + x[:parts].astype(np.float64).sum(axis=0)
    return x, y, want


def bcast_case(rng, m, n):
    x, b, out = f32(rng, (m, n)), f32(rng, (64, n)), f32(rng, (m, n), np.nan)
    rows = np.arange(m) % 64
    return x, b, out, x + b[rows]


@pytest.mark.parametrize("slabs,m,n,parts", [(3, 33, 70, 3), (5, 100, 65, 4), (2, 1, 1, 2)])
def test_slab_sum_in_the_interpreter(slabs, m, n, parts):
    x, y, want = slabsum_case(np.random.default_rng(m * n), slabs, m, n, parts)
    tmalang.compile((KERNELS / "slabsum.tma").read_text()).interpret(np.int32(parts), x, y, seed=2, explore=2)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,n", [(130, 200), (64, 64), (1, 8), (257, 129)])
def test_broadcast_add_in_2x2_clusters_in_the_interpreter(m, n):
    x, b, out, want = bcast_case(np.random.default_rng(m + n), m, n)
    tmalang.compile((KERNELS / "bcast2x2.tma").read_text()).interpret(x, b, out, seed=3, explore=2)
    np.testing.assert_array_equal(out, want)


@pytest.mark.gpu
@pytest.mark.parametrize("slabs,m,n,parts", [(3, 33, 70, 3), (7, 1000, 777, 6), (16, 129, 4097, 16)])
def test_h100_slab_sum(slabs, m, n, parts):
    x, y, want = slabsum_case(np.random.default_rng(m * n), slabs, m, n, parts)
    tmalang.compile((KERNELS / "slabsum.tma").read_text())(np.int32(parts), x, y)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(130, 200), (1000, 1001), (4099, 257)])
def test_h100_broadcast_add_in_2x2_clusters(m, n):
    x, b, out, want = bcast_case(np.random.default_rng(m + n), m, n)
    kernel = tmalang.compile((KERNELS / "bcast2x2.tma").read_text())
    kernel(x, b, out)
    np.testing.assert_array_equal(out, want)
    if m * n <= 1 << 18:
        interp = np.full_like(out, np.nan)
        kernel.interpret(x, b, interp)
        np.testing.assert_array_equal(interp, out)

"""A kernel written from docs §13a/§13b alone: each tile of x is copied to `copy` and folded into
`peak` with `reduce max`, while the loader prefetches the next tile row into L2 through an
evict_first box. At odd shapes the last slab's rows past x's end are zero-filled by the load and,
as §13a says, reduced into `peak` too; the NumPy reference follows that rule independently."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas

SOURCE = """
kernel copy_and_peak(x: i32[M, N], copy: i32[M, N], peak: i32[P, N]) {
    grid tiles
    box In   = x[64, 32] cache evict_first
    box Next = x[64, 32]
    box Out  = copy[64, 32]
    box Peak = peak[64, 32]
    pipeline ring[3] { t: In }

    role loader: warp 0 {
        for tile (m, n) in tiles(x, In) {
            elect { prefetch Next[m + 1, n] }
            produce ring as s { load In[m, n] -> s.t }
        }
    }
    role writer: warp 1 {
        for tile (m, n) in tiles(x, In) {
            consume ring as s {
                store Out[m, n] <- s.t
                reduce max Peak[0, n] <- s.t
            }
        }
    }
}
"""


def _inputs(m: int, n: int, p: int):
    rng = np.random.default_rng(m * 7 + n)
    x = rng.integers(-2**31, 2**31 - 1, (m, n), dtype=np.int32)
    peak = rng.integers(-2**31, 2**31 - 1, (p, n), dtype=np.int32)
    return x, np.zeros_like(x), peak


def _expected_peak(x: np.ndarray, peak: np.ndarray) -> np.ndarray:
    want = peak.copy()
    rows = min(64, peak.shape[0])
    for start in range(0, x.shape[0], 64):
        slab = np.zeros((64, x.shape[1]), np.int32)          # rows past x's end load as zeros
        part = x[start:start + 64]
        slab[: part.shape[0]] = part
        want[:rows] = np.maximum(want[:rows], slab[:rows])
    return want


@pytest.mark.parametrize("m,n,p", [(203, 100, 50), (64, 36, 64), (17, 132, 9)])
def test_interpreter_copies_and_folds_the_peak(m, n, p):
    kernel = tmalang.compile(SOURCE)
    x, copy, peak = _inputs(m, n, p)
    want = _expected_peak(x, peak)
    kernel.interpret(x, copy, peak, seed=5, explore=3)
    np.testing.assert_array_equal(copy, x)
    np.testing.assert_array_equal(peak, want)


def test_ptx_has_the_reduce_the_prefetch_and_the_policy():
    kernel = tmalang.compile(SOURCE)
    assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.max.tile.bulk_group" in kernel.ptx
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile" in kernel.ptx
    assert "createpolicy.fractional.L2::evict_first" in kernel.ptx
    cubin, _ = ptxas.assemble(kernel.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,p", [(203, 100, 50), (4099, 260, 64), (17, 132, 9)])
def test_gpu_equals_numpy_and_the_interpreter(m, n, p):
    kernel = tmalang.compile(SOURCE)
    x, copy, peak = _inputs(m, n, p)
    want = _expected_peak(x, peak)
    interp = [x.copy(), copy.copy(), peak.copy()]
    kernel(x, copy, peak)
    np.testing.assert_array_equal(copy, x)
    np.testing.assert_array_equal(peak, want)
    kernel.interpret(*interp)
    np.testing.assert_array_equal(interp[2], peak)

"""The wgmma accumulator's register fragment (ISA 9.7.15.5.1.1.1, Figure 149): which (row, col) of
the 64xN result each of a warpgroup's 128 threads holds in each accumulator register
(`accumulator_coord`, `accumulator_layout`), its inverse (`accumulator_owner`), and the NumPy
helpers that gather per-thread fragments into the matrix and scatter it back, for the
interpreter and the tests (NumPy is imported only when they are called)."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# ---------------------------------------------------------------------------------------------
# Accumulator fragment (ISA 9.7.15.5.1.1.1, Figure 149 "WGMMA .m64nNk16 register fragment layout
# for accumulator matrix D"; the m64nNk8 and m64nNk32 figures 151 and 153 are the same picture)
#
# Derivation. Figure 149 draws the 64xN tile as four 16-row bands, one per warp of the
# warpgroup (warp w = thread // 32 owns rows 16w..16w+15), and each band as N/8 blocks of 8
# columns. Inside a band the picture is the mma.m16n8 accumulator layout repeated along N:
# lane l sits in row group g = l // 4 and column pair q = l % 4 ("T0: d0,d1 | T1: d0,d1 | ..."
# across a row, T0, T4, T8, .. down the rows), holding, in block j,
#     d[4j+0] = (16w + g,     8j + 2q)      d[4j+1] = (16w + g,     8j + 2q + 1)
#     d[4j+2] = (16w + g + 8, 8j + 2q)      d[4j+3] = (16w + g + 8, 8j + 2q + 1)
# So thread 0 holds (0,0), (0,1), (8,0), (8,1), then (0,8), ...; thread 1 starts at (0,2);
# thread 4 at (1,0); thread 32 at (16,0). Index i counts accumulator *elements* d0, d1, ...: for
# f32 that is the register number; for an f16 accumulator, register r packs d[2r] (low half) and
# d[2r+1] (high half). The GPU test in tests/targets/test_wgmma_encoding.py checks this on hardware.
# ---------------------------------------------------------------------------------------------

WARPGROUP_THREADS = 128


def accumulator_coord(thread: int, index: int) -> tuple[int, int]:
    """(row, col) in the 64xN tile of accumulator element `index` of warpgroup thread `thread`."""
    if not 0 <= thread < WARPGROUP_THREADS:
        raise ValueError(f"thread {thread} is not in a warpgroup (0..127)")
    if index < 0:
        raise ValueError(f"accumulator index {index} is negative")
    warp, lane = divmod(thread, 32)
    block, within = divmod(index, 4)
    row = 16 * warp + lane // 4 + 8 * (within // 2)
    col = 8 * block + 2 * (lane % 4) + within % 2
    return row, col


def accumulator_layout(n: int) -> np.ndarray:
    """int array [128, N/2, 2]: [t, i] = (row, col) of accumulator element i of thread t."""
    import numpy as np

    if not isinstance(n, numbers.Integral) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in 8..256, got n = {n}")
    t = np.arange(WARPGROUP_THREADS)[:, None]
    i = np.arange(n // 2)[None, :]
    warp, lane = t // 32, t % 32
    block, within = i // 4, i % 4
    row = 16 * warp + lane // 4 + 8 * (within // 2)
    col = 8 * block + 2 * (lane % 4) + within % 2
    return np.stack(np.broadcast_arrays(row, col), axis=-1).astype(np.int64)


def accumulator_owner(row: int, col: int) -> tuple[int, int]:
    """(thread, index) holding element (row, col) of the 64xN accumulator tile; inverse of
    `accumulator_coord`."""
    if not 0 <= row < 64 or col < 0:
        raise ValueError(f"({row}, {col}) is outside a 64xN accumulator tile")
    warp, r = divmod(row, 16)
    half, g = divmod(r, 8)
    block, c = divmod(col, 8)
    q, low = divmod(c, 2)
    return 32 * warp + 4 * g + q, 4 * block + 2 * half + low


def gather_accumulators(fragments: np.ndarray) -> np.ndarray:
    """The 64xN matrix from per-thread accumulators `fragments` [128, N/2]."""
    import numpy as np

    fragments = np.asarray(fragments)
    n = 2 * fragments.shape[1]
    layout = accumulator_layout(n)
    out = np.empty((64, n), dtype=fragments.dtype)
    out[layout[..., 0], layout[..., 1]] = fragments
    return out


def scatter_accumulators(matrix: np.ndarray) -> np.ndarray:
    """Per-thread accumulators [128, N/2] of a 64xN matrix (inverse of `gather_accumulators`)."""
    import numpy as np

    matrix = np.asarray(matrix)
    layout = accumulator_layout(matrix.shape[1])
    return matrix[layout[..., 0], layout[..., 1]]

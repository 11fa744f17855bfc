"""NumPy references for every example: inputs for a shape, and the expected output.

Shared by the interpreter tests (CPU) and the GPU tests, so both check the same meaning.
Float sums accumulate in float32 in the kernel's order, so the comparison is exact.
"""

from __future__ import annotations

import numpy as np


def padded(rng, shape, fill=None, xp=np):
    """A float32 matrix whose rows are 16-byte aligned (a view into padded rows when needed)."""
    rows, cols = shape
    base = np.empty((rows, -(-cols // 4) * 4), dtype=np.float32)
    base[...] = rng.standard_normal(base.shape) if fill is None else fill
    return base[:, :cols]


def copy_case(rng, shape):
    src = padded(rng, shape)
    return [src, padded(rng, shape, np.nan)], src.copy()


def saxpy_case(rng, shape):
    a, x, y = np.float32(rng.standard_normal()), padded(rng, shape), padded(rng, shape)
    return [a, x, y, padded(rng, shape, np.nan)], a * x + y


def blocksum_case(rng, shape):
    rows, k = shape
    x = padded(rng, (rows, k))
    expected = np.zeros((rows, 64), dtype=np.float32)
    for start in range(0, k, 64):
        chunk = np.zeros((rows, 64), dtype=np.float32)
        part = x[:, start:start + 64]
        chunk[:, : part.shape[1]] = part
        expected = expected + chunk
    return [x, padded(rng, (rows, 64), np.nan)], expected


CASES = {"tma_copy": copy_case, "copy_explicit": copy_case, "saxpy": saxpy_case, "blocksum": blocksum_case}

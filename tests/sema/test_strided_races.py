"""The interpreter's global-memory race check honours element strides (interp/globalmem.py,
interp/shares.py): a box with strides [s, 1] touches every s-th row of its range, so two boxes
that interleave (even and odd rows) share no element and do not race, while boxes whose rows
meet still do (E421)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import tmalang
from tmalang.diagnostics import TmalangError
from tmalang.interp.shares import covers, overlaps

# One role of the explicit layer stores every other row of each tile twice, from two buffers: the
# even rows, then rows from OFF on (two boxes of `ROWS` rows, stride 2), with no wait between.
# OFF = 1 interleaves (odd rows); OFF = 2 meets the even rows from row 2 on. Each box stays in
# its tile, so only the two stores of one tile can meet.
TWO_STORES = """
kernel rows(x: f32[M, N], y: f32[M, N]) {{
    grid persistent
    box T = x[64, 64]
    box Ev = x[64, 64] strides [2, 1]
    box Od = x[{rows}, 64] strides [2, 1]
    box YEv = y[64, 64] strides [2, 1]
    box YOd = y[{rows}, 64] strides [2, 1]
    smem ev: Ev
    smem od: Od
    mbarrier loaded(1)
    role main: warp 0 {{
        for tile (m, n) in tiles(x, T) as i {{
            elect {{
                expect_tx loaded, {nbytes}
                load Ev@[m*64, n*64] -> ev, loaded
                load Od@[m*64 + {off}, n*64] -> od, loaded
                arrive loaded
            }}
            wait loaded, i & 1
            elect {{
                store YEv@[m*64, n*64] <- ev
                store YOd@[m*64 + {off}, n*64] <- od
                commit_group
                wait_group 0
            }}
        }}
    }}
}}
"""


def _kernel(off: int):
    rows = 64 if off == 1 else 62
    nbytes = (32 + -(-rows // 2)) * 64 * 4
    return tmalang.compile(TWO_STORES.format(off=off, rows=rows, nbytes=nbytes))


def test_interleaved_strided_stores_do_not_race():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((130, 196)).astype(np.float32)
    y = np.zeros_like(x)
    for seed in (None, 1, 2):
        _kernel(1).interpret(x, y, seed=seed)
        np.testing.assert_array_equal(y, x)


def test_strided_stores_that_meet_race():
    x = np.ones((130, 196), np.float32)
    with pytest.raises(TmalangError) as caught:
        _kernel(2).interpret(x, np.zeros_like(x))
    assert caught.value.code == "E421" and "y[2:63:2, " in caught.value.message


def _elements(region: tuple) -> set:
    dims = [range(d[0], d[1], d[2] if len(d) > 2 else 1) for d in region]
    return set(itertools.product(*dims))


def _region(rng: random.Random) -> tuple:
    out = []
    for _ in range(2):
        start, step = rng.randrange(0, 12), rng.choice([1, 1, 2, 3, 4])
        stop = start + rng.randrange(1, 14)
        out.append((start, stop) if step == 1 else (start, stop, step))
    return ("region", tuple(out))


def test_stepped_regions_meet_and_cover_as_their_elements_do():
    """overlaps and covers of regions with steps against the sets of elements they name."""
    rng = random.Random(5)
    for _ in range(2000):
        a, b = _region(rng), _region(rng)
        ea, eb = _elements(a[1]), _elements(b[1])
        assert overlaps(a, b) == bool(ea & eb), (a, b)
        if covers(a, b):        # covers may be conservative (False), never wrong
            assert eb <= ea, (a, b)

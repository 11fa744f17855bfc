"""The soundness contract, construct by construct: what the compiler accepts runs clean on the
interpreter under random schedules (a protocol diagnostic there is a compiler bug)."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from test_interp_vs_h100 import copy_source


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_warps_that_only_wait_cannot_fall_a_phase_behind(stages):
    """Four consumer warps of which only the elected one stores and releases: the others must not
    wait on `full` (they could be overtaken by two phases and wait forever: E401)."""
    k = tmalang.compile(copy_source("f32", [2, 3, 4, 8], stages=stages))
    rng = np.random.default_rng(stages)
    src = rng.standard_normal((3, 5, 7, 12)).astype(np.float32)
    dst = rng.standard_normal((8, 10, 12, 16)).astype(np.float32)
    k.interpret(src, dst, seed=3, explore=6)
    np.testing.assert_array_equal(dst[:3, :5, :7, :12], src)
    lines = k.ir.splitlines()
    waits = [i for i, line in enumerate(lines) if "mbar_wait barrier=@ring.full" in line]
    assert waits and all("elect scope=role" in lines[i - 1] for i in waits), "only the elected thread waits"

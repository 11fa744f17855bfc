"""Tile math between a [1, R, C] slab of a 3-D box and an [R, C] tile (docs/language.md, operand
layout rules): the same elements in the same order, so they mix; other shapes stay E067."""

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas

SLAB_SUM = """
kernel slab_sum(S: i32, w: f32[P, M, N], c: bf16[M, N]) {
    grid persistent
    box W = w[1, 32, 64]
    box C = c[SLAB]
    smem sum: W
    smem out: C
    pipeline ring[3] { part: W }

    role producer: warp 0 {
        for tile (m, n) in tiles(c, C) {
            for p in steps(S, 1) {
                produce ring as s { load W[p, m, n] -> s.part }
            }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(c, C) {
            sum = 0.0
            for p in steps(S, 1) {
                consume ring as s { sum = sum + s.part }
            }
            elect { wait_group read 0 }
            sync
            out = bf16(sum * 0.5)
            elect { store C[m, n] <- out  commit_group }
        }
        elect { wait_group 0 }
    }
}
"""


def test_slab_joins_matrix_tile_math_on_the_interpreter():
    kernel = tmalang.compile(SLAB_SUM.replace("SLAB", "32, 64"))
    rng = np.random.default_rng(7)
    w = rng.standard_normal((3, 77, 136)).astype(np.float32)
    out = kernel.interpret(3, w, np.zeros((77, 136), ml_dtypes.bfloat16), seed=3)[0]
    expected = (((w[0] + w[1]) + w[2]) * np.float32(0.5)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(out, expected)      # the order of the sum is fixed: bit-exact


@pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas not found")
def test_slab_tile_math_assembles():
    ptxas.assemble(tmalang.compile(SLAB_SUM.replace("SLAB", "32, 64")).ptx, "sm_90a")


def test_other_shapes_still_differ():
    with pytest.raises(tmalang.TmalangError, match="E067"):
        tmalang.compile(SLAB_SUM.replace("SLAB", "64, 32"))

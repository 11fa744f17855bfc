"""A compile-time `if` (language.md §2a): `if A op B { ... } else { ... }` among a kernel's items
or a block's statements, both sides literals and constants; the chosen branch's contents stand
in its place before sema, so nothing after the parser sees the choice. The other branch is
parsed, not checked (a pipeline it would declare without a producer is no error until chosen).
"""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from tmalang.diagnostics import TmalangError

SCALE = """
kernel scale<DOUBLE = 0, STAGES = 2>(x: f32[M, N], y: f32[M, N]) {
    grid persistent
    box X = x[64, 64]
    box Y = y[64, 64]
    if STAGES > 2 {
        pipeline ring[STAGES] { t: X }
    } else {
        pipeline ring[2] { t: X }
    }
    role producer: warp 0 {
        for tile (m, n) in tiles(x, X) {
            produce ring as s { load X[m, n] -> s.t }
        }
    }
    role consumer: warp 1 {
        for tile (m, n) in tiles(x, X) {
            consume ring as s {
                if DOUBLE == 1 {
                    s.t = s.t * 2.0
                } else {
                    if DOUBLE == 2 { s.t = s.t * 3.0 }
                }
                store Y[m, n] <- s.t
            }
        }
    }
}
"""


@pytest.mark.parametrize("double,factor", [(0, 1.0), (1, 2.0), (2, 3.0)])
def test_the_chosen_branch_is_the_kernel(double, factor):
    kernel = tmalang.compile(SCALE, name="scale.tma", constants={"DOUBLE": double})
    x = np.empty((100, 132), np.float32)[:, :130]      # rows padded to 16 bytes, as TMA needs
    x[...] = np.random.default_rng(double).standard_normal((100, 130))
    y = np.full((100, 132), np.nan, np.float32)[:, :130]
    kernel.interpret(x, y)
    np.testing.assert_array_equal(y, x * np.float32(factor))
    assert ("tile_assign" in str(kernel.ir)) == (factor != 1.0)      # no trace of the branches not taken


def test_a_declaration_chosen_by_a_constant():
    for stages in (2, 4):
        ir = str(tmalang.compile(SCALE, name="scale.tma", constants={"STAGES": stages}).ir)
        assert f"buffer @ring.t box=X stages={stages}" in ir, ir[:400]


def test_the_branch_not_taken_is_not_checked():
    source = SCALE.replace("pipeline ring[STAGES] { t: X }", "pipeline ring[STAGES] { t: X }\n        pipeline spare[2] { t: X }")
    tmalang.compile(source, name="scale.tma")                       # STAGES = 2: the else branch
    with pytest.raises(TmalangError, match="E068"):
        tmalang.compile(source, name="scale.tma", constants={"STAGES": 3})


def test_a_condition_that_is_not_a_constant_is_refused_at_its_name():
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(SCALE.replace("if DOUBLE == 1 {", "if M == 1 {"), name="scale.tma")
    text = str(caught.value)
    assert "E544" in text and "'M' is not a compile-time constant" in text and "`if` chooses at compile time" in text
    assert "scale.tma:19:20:" in text

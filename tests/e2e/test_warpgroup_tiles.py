"""Tile loops `by warpgroup` (§15f): each warpgroup walks every n-th tile alone, on the
interpreter (many schedules, several CTAs) and the H100, against float64 at shapes that are not
multiples of the tile; and the ring positions the warpgroups keep."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tmalang

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "tests" / "user_kernels" / "warpgroup_tiles.tma").read_text()
SHAPES = [(200, 296, 136), (64, 128, 64), (333, 520, 72), (1, 8, 8)]


def _operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64).T


def _error(got, reference) -> float:
    return np.abs(got.astype(np.float64) - reference).max() / max(1.0, np.abs(reference).max())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("ctas", [1, 2, 5])
def test_three_warpgroups_take_every_third_tile(shape, ctas):
    k = tmalang.compile(SOURCE, kernel="three")
    a, b, product = _operands(*shape, seed=ctas)
    got = k.interpret(0.75, a, b, np.zeros(shape[:2], ml_dtypes.bfloat16), ctas=ctas, explore=2)[0]
    assert _error(got, 0.75 * product) < 8e-3


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ping_pong_turns_match_float64(shape):
    k = tmalang.compile(SOURCE, kernel="turns")
    a, b, product = _operands(*shape, seed=9)
    got = k.interpret(a, b, np.full(shape[:2], np.nan, np.float32), ctas=3, explore=3)[0]
    assert _error(got, product) < 1e-5


def test_each_warpgroup_is_a_role_with_its_own_buffers():
    ir = tmalang.compile(SOURCE, kernel="three").ir
    for g in range(3):
        assert f"role @consumer.wg{g} first_warp={4 + 4 * g} last_warp={7 + 4 * g}" in ir
        assert f"buffer @cs_wg{g} box=C stages=2" in ir
    assert "mbarrier @ring.empty stages=3 count=1" in ir      # one warpgroup releases each slot


def test_explain_names_the_chain_of_warpgroup_roles():
    text = tmalang.compile(SOURCE, kernel="turns").explain()
    assert "consumer (by warpgroup: consumer.wg0, consumer.wg1): 2 warpgroups issue each turn" in text
    assert "consumer.wg1 arrives on" in text


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["three", "turns"])
@pytest.mark.parametrize("shape", [(1000, 1032, 264), (4097, 2056, 520), (64, 128, 64)], ids=lambda s: "x".join(map(str, s)))
def test_h100_matches_float64_and_the_interpreter(kernel, shape):
    torch = pytest.importorskip("torch")
    k = tmalang.compile(SOURCE, kernel=kernel)
    a, b, product = _operands(*shape, seed=4)
    out_dtype = torch.bfloat16 if kernel == "three" else torch.float32
    c = torch.full(shape[:2], float("nan"), dtype=out_dtype, device="cuda")
    args = [torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda() for x in (a, b)]
    scale = [0.5] if kernel == "three" else []
    for _ in range(2):    # twice: ring positions and turns start over at every launch
        k(*scale, *args, c)
        got = c.float().cpu().numpy()
        assert _error(got, (0.5 if scale else 1.0) * product) < (8e-3 if scale else 1e-5)
    if shape[0] <= 1000:
        host = np.zeros(shape[:2], ml_dtypes.bfloat16 if scale else np.float32)
        interpreted = k.interpret(*scale, a, b, host, ctas=4)[0].astype(np.float64)
        assert _error(got, interpreted) < (8e-3 if scale else 1e-5)

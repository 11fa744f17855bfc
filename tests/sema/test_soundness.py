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


STORE_THEN_REWRITE = """
kernel twice(a: f32, x: f32[M, N], out: f32[M, N], first: f32[M, N]) {
    grid persistent
    box X = x[64, 64]
    box O = out[64, 64]
    box F = first[64, 64]
    pipeline ring[2] { xs: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(out, O) {
            produce ring as s { load X[m, n] -> s.xs }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(out, O) {
            consume ring as s {
                store F[m, n] <- s.xs
                s.xs = a * s.xs
                store O[m, n] <- s.xs
            }
        }
    }
}
"""


def _store_then_rewrite(run):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((150, 200)).astype(np.float32)
    out, first = np.zeros_like(x), np.zeros_like(x)
    run(np.float32(3), x, out, first)
    np.testing.assert_array_equal(first, x)
    np.testing.assert_array_equal(out, np.float32(3) * x)


def test_a_slot_is_rewritten_only_after_its_store_read_it():
    """Fuzz finding F8: tile math rewrote a slot that a TMA store was still reading (E405)."""
    k = tmalang.compile(STORE_THEN_REWRITE)
    _store_then_rewrite(lambda *args: k.interpret(*args, seed=2, explore=6))
    lines = k.ir.splitlines()
    rewrite = next(i for i, line in enumerate(lines) if "tile_assign" in line)
    # a full wait: the rewritten slot is stored again to the same tile, and overlapping stores are
    # ordered only by the first one's completion (E421), not by its read of the slot
    assert "sync scope=role" in lines[rewrite - 1] and "bulk_wait pending=0 read=false" in lines[rewrite - 3]


@pytest.mark.gpu
def test_h100_rewrites_a_slot_after_its_store_read_it():
    _store_then_rewrite(tmalang.compile(STORE_THEN_REWRITE))


def test_the_ir_verifier_refuses_an_innermost_element_stride():
    """Sema refuses it (E025); IR written by hand must not reach the interpreter with it either,
    since the interpreter could only model a stride the hardware does not apply."""
    from tmalang.diagnostics import TmalangError
    from tmalang.ir.parser import parse_ir
    from tmalang.ir.verifier import verify
    from tmalang.passes import PASS_NAMES

    text = tmalang.compile(copy_source("f32", [64, 32])).ir
    [kernel] = parse_ir(text.replace("shape=[64, 32] strides=[1, 1]", "shape=[64, 32] strides=[1, 2]", 1))
    with pytest.raises(TmalangError, match="E999.*innermost element stride 2"):
        verify(kernel, "dispatch_roles", ["lower", *PASS_NAMES])


# Kernels written from the docs alone, at odd shapes: a two-warp producer on a one-stage ring
# (its idle warp must not wait), and two rings feeding one smem accumulator with a NaN fill.
SCALE = """
kernel scale(a: f32, x: f32[M, N], out: f32[M, N]) {
    grid persistent
    box X = x[32, 64]
    box O = out[32, 64]
    pipeline ring[1] { xs: X }
    role producer: warps 0..1 {
        for tile (m, n) in tiles(out, O) {
            produce ring as s { load X[m, n] -> s.xs }
        }
    }
    role consumer: warps 4..11 {
        for tile (m, n) in tiles(out, O) {
            consume ring as s {
                s.xs = a * s.xs + 1.0
                store O[m, n] <- s.xs
            }
        }
    }
}
"""

ROW_DIFF = """
kernel row_diff(x: f32[M, K], y: f32[M, K], out: f32[M, 32]) {
    box X = x[16, 32]
    box Y = y[16, 32] oob nan
    box O = out[16, 32]
    smem acc: O
    pipeline rx[3] { t: X }
    pipeline ry[2] { t: Y }
    role loader: warp 0 {
        for tile (m, n) in tiles(out, O) {
            for k in steps(K, 32) {
                produce rx as s { load X[m, k] -> s.t }
                produce ry as s { load Y[m, k] -> s.t }
            }
        }
    }
    role math: warps 1..2 {
        for tile (m, n) in tiles(out, O) {
            acc = 0.0
            for k in steps(K, 32) {
                consume rx as s { acc = acc + s.t }
                consume ry as q { acc = acc - q.t }
            }
            elect { store O[m, n] <- acc  commit_group  wait_group read 0 }
            sync
        }
    }
}
"""


def _scale_case(run):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((77, 132)).astype(np.float32)
    out = np.full_like(x, 5.0)
    run(np.float32(-1.5), x, out)
    np.testing.assert_array_equal(out, np.float32(-1.5) * x + np.float32(1))


def _row_diff_case(run):
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((77, 100)).astype(np.float32) for _ in range(2))
    out = np.zeros((77, 32), np.float32)
    run(x, y, out)
    expected = np.zeros((77, 32), np.float32)
    for k in range(0, 128, 32):       # chunk by chunk, in the kernel's order; the tail chunk of y is NaN
        xs, ys = np.zeros((77, 32), np.float32), np.full((77, 32), np.nan, np.float32)
        xs[:, : x[:, k:k + 32].shape[1]] = x[:, k:k + 32]
        ys[:, : y[:, k:k + 32].shape[1]] = y[:, k:k + 32]
        expected = expected + xs - ys
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("source,case", [(SCALE, _scale_case), (ROW_DIFF, _row_diff_case)], ids=["scale", "row_diff"])
def test_user_kernels_run_clean_and_match_numpy(source, case):
    k = tmalang.compile(source)
    case(lambda *args: k.interpret(*args, seed=5, explore=6))


@pytest.mark.gpu
@pytest.mark.parametrize("source,case", [(SCALE, _scale_case), (ROW_DIFF, _row_diff_case)], ids=["scale", "row_diff"])
def test_h100_user_kernels_match_numpy(source, case):
    case(tmalang.compile(source))


# Written from docs/language.md alone (§4 strides, §11 one role on both sides, §6 smem, §13 store):
# the even rows of x, summed over K in 32-column chunks, by one role that loads ahead of itself.
EVEN_ROW_SUMS = """
kernel even_row_sums(x: f32[M, K], out: f32[P, 32]) {
    grid persistent
    box X = x[32, 32] strides [2, 1]
    box O = out[16, 32]
    smem acc: O
    pipeline ring[2] { t: X }
    role worker: warps 0..3 {
        for tile (m, n) in tiles(out, O) {
            acc = 0.0
            for k in steps(K, 32) {
                produce ring as s { load X[m, k] -> s.t }
                consume ring as s { acc = acc + s.t }
            }
            elect { store O[m, n] <- acc  commit_group  wait_group read 0 }
            sync
        }
    }
}
"""


def _even_row_sums_case(run):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((203, 100)).astype(np.float32)
    out = np.full((102, 32), 7.0, np.float32)
    run(x, out)
    expected = np.zeros((102, 32), np.float32)
    for k in range(0, 100, 32):          # chunk by chunk in f32, as the kernel adds; the tail is zero-filled
        chunk = np.zeros((102, 32), np.float32)
        chunk[:, : x[::2, k:k + 32].shape[1]] = x[::2, k:k + 32]
        expected = expected + chunk
    np.testing.assert_array_equal(out, expected)


def test_even_row_sums_run_clean_and_match_numpy():
    k = tmalang.compile(EVEN_ROW_SUMS)
    _even_row_sums_case(lambda *args: k.interpret(*args, seed=3, explore=6))


@pytest.mark.gpu
def test_h100_even_row_sums_match_numpy_and_the_interpreter():
    k = tmalang.compile(EVEN_ROW_SUMS)
    _even_row_sums_case(k)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((77, 68)).astype(np.float32)   # rows of 272 B: 16-byte aligned, not whole boxes
    gpu, interp = np.zeros((39, 32), np.float32), np.zeros((39, 32), np.float32)
    k(x, gpu)
    k.interpret(x, interp)
    np.testing.assert_array_equal(gpu, interp)


TWO_BOXES = """
kernel twobox(x: f32[M, N], out: f32[M, N]) {
    grid tiles
    box X = x[64, 64]
    box O = out[64, 64]
    box O2 = out[BOX2]
    pipeline ring[2] { xs: X, ys: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(out, O) {
            produce ring as s { load X[m, n] -> s.xs
                                load X[m, n] -> s.ys }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(out, O) {
            consume ring as s {
                store O[m, n] <- s.xs
                store O2[COORDS] <- s.ys
            }
        }
    }
}
"""


@pytest.mark.parametrize("box2,coords", [("64, 64", "m, n")], ids=["same_shape"])
def test_two_stores_of_one_tile_through_two_boxes_are_ordered(box2, coords):
    """Two stores through different boxes of one tensor may write the same elements: the second
    waits for the first's writes (order_slot_release compares tensors and box geometry, not box
    names; before, this program was accepted and raced, E421)."""
    src = TWO_BOXES.replace("BOX2", box2).replace("COORDS", coords)
    kernel = tmalang.compile(src)
    consumer = kernel.ir[kernel.ir.index("role @consumer"):]
    between = consumer[consumer.index("tma_store box=O "):consumer.index("tma_store box=O2")]
    assert "bulk_wait pending=0 read=false" in between
    x = np.random.default_rng(3).standard_normal((70, 100)).astype(np.float32)
    out = np.zeros_like(x)
    kernel.interpret(x, out, seed=2, explore=4)
    np.testing.assert_array_equal(out, x)


def test_stores_through_boxes_of_another_geometry_are_taken_to_overlap():
    from tmalang.passes.order_slot_release import _may_overlap

    tile = ("out", (64, 64), (1, 1), ("%m", "%n"))
    assert _may_overlap(tile, ("out", (64, 64), (1, 1), ("%m", "%n")))
    assert not _may_overlap(tile, ("out", (64, 64), (1, 1), ("%m", "(%n + 1)")))
    assert _may_overlap(tile, ("out", (128, 64), (2, 1), ("%m", "(%n + 1)")))
    assert not _may_overlap(tile, ("other", (64, 64), (1, 1), ("%m", "%n")))

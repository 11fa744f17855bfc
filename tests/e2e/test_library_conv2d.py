"""`tmalang.conv2d` against a float64 convolution: odd channels, filters, images, strides,
paddings and dilations, with and without bias and ReLU, K whole or split into parts, on the
interpreter (NumPy, CI) and the H100 (torch, channels_last and contiguous inputs); and its
refusals.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import pytest

import tmalang
from tmalang.contract.errors import LaunchError
from tmalang.library import conv2d_kernels as library
from tmalang.library import conv2d_repeat as repeats
from tmalang.library.conv2d_fold import fold_of

# (N, C, H, W, K, R, S, stride, padding, dilation, bias, relu)
CASES = [
    (1, 16, 5, 6, 24, 3, 3, 1, 1, 1, False, False),        # the example's 3x3, a ragged image
    (2, 3, 7, 5, 10, 3, 3, 2, 1, 1, True, True),           # C = 3 padded to 16, K = 10 padded to 16
    (1, 32, 6, 7, 8, 1, 1, 1, 0, 1, True, False),          # 1x1: a GEMM over pixels
    (1, 16, 9, 8, 16, 5, 5, 1, (2, 1), (1, 2), False, True),
    (1, 24, 11, 9, 12, 7, 7, 2, 3, 1, True, False),        # a 7x7 stem, C = 24 padded to 32
    (1, 64, 4, 4, 72, 3, 3, (1, 2), 1, 1, False, False),   # two channel blocks of 64, K past a tile of 64
    (3, 16, 5, 4, 8, 3, 3, 1, 1, 1, False, False),         # one tile over three images
    (2, 16, 10, 9, 8, 3, 3, 1, 1, 1, True, False),         # 180 pixels: the second tile starts mid-image
    (2, 16, 9, 7, 8, 1, 1, 2, 0, 1, False, False),         # 1x1 stride 2 over two images
    (3, 40, 5, 7, 72, 1, 1, 1, 0, 1, False, False),        # 1x1 stride 1, no epilogue: tmalang.gemm's rows
    (2, 3, 23, 21, 24, 7, 7, 2, 3, 1, True, False),        # a 7x7 stride-2 stem over 3 channels: folded 4x4 over 12
    (1, 3, 13, 14, 16, 4, 4, 4, 0, 1, False, False),       # patchify, a row and two columns unread: folded 1x1
    (1, 2, 9, 10, 8, 5, 5, (2, 3), (2, 1), 1, False, True),  # folded 3x2 over 12 channels
]
IDS = [f"n{c[0]}c{c[1]}h{c[2]}w{c[3]}k{c[4]}-{c[5]}x{c[6]}-s{c[7]}p{c[8]}d{c[9]}{'-bias' if c[10] else ''}"
       f"{'-relu' if c[11] else ''}" for c in CASES]


def pair(v):
    return (v, v) if isinstance(v, int) else v


def reference(x, w, stride, padding, dilation, bias, relu) -> np.ndarray:
    x, w = x.astype(np.float64), w.astype(np.float64)
    (n, c, h, wd), (k, _, r, s) = x.shape, w.shape
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    p, q = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    padded = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    padded[:, :, ph:ph + h, pw:pw + wd] = x
    y = np.zeros((n, k, p, q))
    for i in range(r):
        for j in range(s):
            taps = padded[:, :, i * dh:i * dh + sh * (p - 1) + 1:sh, j * dw:j * dw + sw * (q - 1) + 1:sw]
            y += np.einsum("ncpq,kc->nkpq", taps, w[:, :, i, j])
    if bias is not None:
        y += np.asarray(bias, np.float64)[None, :, None, None]
    return np.maximum(y, 0.0) if relu else y


def inputs(case, dtype, seed):
    n, c, h, wd, k, r, s, *_, bias, _ = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, wd)).astype(dtype)
    w = (rng.standard_normal((k, c, r, s)) / np.sqrt(c * r * s)).astype(dtype)
    return x, w, rng.standard_normal(k).astype(np.float32) if bias else None


def relative_error(got, expected) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - expected) / np.linalg.norm(expected))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_interpreter_matches_float64(case):
    x, w, bias = inputs(case, ml_dtypes.bfloat16, 1)
    stride, padding, dilation, _, relu = case[7:]
    y = tmalang.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, bias=bias,
                       activation="relu" if relu else None)
    expected = reference(x, w, stride, padding, dilation, bias, relu)
    assert y.shape == expected.shape and y.dtype == x.dtype
    assert relative_error(y, expected) < 1e-2


@pytest.mark.parametrize("split", [2, 3])
@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[7]], ids=[IDS[1], IDS[4], IDS[7]])
def test_split_k_on_the_interpreter(case, split):
    """K split into parts (f32 slabs summed in order by conv2d_sum, with the bias and ReLU)."""
    x, w, bias = inputs(case, ml_dtypes.bfloat16, 6)
    stride, padding, dilation, _, relu = case[7:]
    y = tmalang.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, bias=bias,
                       activation="relu" if relu else None, split=split)
    assert relative_error(y, reference(x, w, stride, padding, dilation, bias, relu)) < 1e-2


@pytest.mark.parametrize("tile", [(64, 64), (64, 128), (128, 256)], ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[5], CASES[7]], ids=[IDS[0], IDS[1], IDS[5], IDS[7]])
def test_every_tile_on_the_interpreter(case, tile, monkeypatch):
    """The template's 64-pixel tiles (one consumer warpgroup) and 256-channel ones, split or not."""
    monkeypatch.setattr(library, "tile_of", lambda g, sms=132: tile)
    x, w, bias = inputs(case, ml_dtypes.bfloat16, 4)
    stride, padding, dilation, _, relu = case[7:]
    for split in (None, 2):
        y = tmalang.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, bias=bias,
                           activation="relu" if relu else None, split=split)
        assert relative_error(y, reference(x, w, stride, padding, dilation, bias, relu)) < 1e-2


def test_the_split_rule_fills_idle_multiprocessors_only():
    deep = library.Geometry(32, 512, 7, 7, 512, 3, 3, (1, 1), (1, 1), (1, 1))      # 13 x 4 tiles, 72 K steps
    small = library.Geometry(8, 512, 7, 7, 512, 3, 3, (1, 1), (1, 1), (1, 1))      # 7 x 4 64-pixel tiles
    wide = library.Geometry(32, 64, 56, 56, 64, 3, 3, (1, 1), (1, 1), (1, 1))      # 784 tiles
    short = library.Geometry(1, 16, 8, 8, 16, 1, 1, (1, 1), (0, 0), (1, 1))        # 1 tile, 1 K step
    assert library.split_of(deep, (128, 128), 132) == 2          # 104 CTAs: four parts would be 208
    assert library.split_of(deep, (64, 128), 132) == 1           # 100 tiles: more than half a wave
    assert library.split_of(small, (64, 128), 132) == 4          # 112 CTAs, 18 K steps a part
    assert library.split_of(wide, (128, 64), 132) == 1
    assert library.split_of(short, (128, 64), 132) == 1


def test_convolutions_run_unclustered():
    g = library.Geometry(32, 512, 7, 7, 512, 3, 3, (1, 1), (1, 1), (1, 1))
    assert not library.CLUSTER
    assert "multicast" not in library.conv_kernel("bf16", False, False, False, library.constants(g), cluster=False).ptx
    assert "multicast" in library.conv_kernel("bf16", False, False, False, library.constants(g), cluster=True).ptx


def test_pointwise_layers_go_to_gemm_only_without_padding_epilogue_or_pinned_split():
    g = library.Geometry(3, 40, 5, 7, 72, 1, 1, (1, 1), (0, 0), (1, 1))
    assert library.by_gemm(g, None, False, None)
    assert not library.by_gemm(g, np.zeros(72, np.float32), False, None) and not library.by_gemm(g, None, True, None)
    assert not library.by_gemm(g, None, False, 2)
    for other in (library.Geometry(3, 36, 5, 7, 72, 1, 1, (1, 1), (0, 0), (1, 1)),     # C needs padding
                  library.Geometry(3, 40, 5, 7, 64, 1, 1, (1, 1), (0, 0), (1, 1)),     # K = 64: im2col's 128 x 64
                  library.Geometry(3, 40, 5, 7, 72, 1, 1, (2, 2), (0, 0), (1, 1)),     # strided
                  library.Geometry(3, 40, 5, 7, 72, 3, 3, (1, 1), (1, 1), (1, 1))):    # 3x3
        assert not library.by_gemm(other, None, False, None)


def test_the_tile_rule_by_how_the_tiles_fill_the_gpu():
    def tile(n, c, hw, k, r, stride):
        return library.tile_of(library.Geometry(n, c, hw, hw, k, r, r, (stride, stride), (r // 2, r // 2), (1, 1)), 132)
    assert tile(32, 64, 56, 64, 3, 1) == (128, 64)            # K = 64
    assert tile(32, 192, 35, 192, 3, 1) == (128, 64)          # K = 192: 128-wide tiles a quarter idle
    assert tile(32, 128, 28, 128, 3, 1) == (128, 128)         # 196 tiles
    assert tile(8, 256, 32, 256, 3, 1) == (128, 128)          # 128 tiles: 0.97 of a wave
    assert tile(32, 256, 14, 256, 3, 1) == (128, 128)         # 98 tiles: more than half a wave
    assert tile(32, 512, 7, 512, 3, 1) == (64, 128)           # 52 tiles: 100 of 64 x 128
    g = library.Geometry(32, 512, 7, 7, 512, 3, 3, (1, 1), (1, 1), (1, 1))
    assert library.split_of(g, library.tile_of(g, 132), 132) == 1


def test_f16_on_the_interpreter():
    case = CASES[0]
    x, w, _ = inputs(case, np.float16, 2)
    y = tmalang.conv2d(x, w, padding=1)
    assert y.dtype == np.float16 and relative_error(y, reference(x, w, 1, 1, 1, None, False)) < 2e-3


def test_strided_convolutions_over_few_channels_fold_where_that_halves_the_reduction():
    def fold(c, r, stride, dilation=1):
        return fold_of(library.Geometry(8, c, 224, 224, 64, r, r, (stride, stride), (r // 2, r // 2),
                                        (dilation, dilation)))
    stem = fold(3, 7, 2)                     # 49 taps of 16 channels: 784 terms
    assert (stem.r2, stem.s2, stem.c2, stem.padded_c2) == (4, 4, 12, 16)      # 256 terms
    assert (stem.h2, stem.w2) == (115, 115)
    patches = fold(3, 16, 16)
    assert (patches.r2, patches.c2, patches.padded_c2) == (1, 768, 768)      # a GEMM over 768 channels
    assert fold(24, 7, 2) is None            # 1568 terms against 1536: not worth a copy of x
    assert fold(64, 3, 2) is None            # 576 against 1024
    assert fold(3, 7, 1) is None and fold(3, 7, 2, dilation=2) is None


def test_the_fold_lays_torch_and_numpy_operands_out_alike():
    """The operator's CUDA path folds with torch ops (F.pad, strided copies), the interpreter's with
    NumPy: the same NHWC and KRSC bytes, from contiguous and channels_last tensors, with the image
    padded and cropped."""
    torch = pytest.importorskip("torch")
    from tmalang.library.conv2d_fold import folded_input, folded_weights
    for case in (CASES[10], CASES[11], CASES[12]):
        x, w, _ = inputs(case, np.float16, 7)
        g = library.checked(x, w, case[7], case[8], case[9], None, None)
        f = fold_of(g)
        for memory_format in (torch.contiguous_format, torch.channels_last):
            xt, wt = (torch.from_numpy(a).contiguous(memory_format=memory_format) for a in (x, w))
            assert np.array_equal(folded_input(xt, g, f, True).numpy(), folded_input(x, g, f, False))
            assert np.array_equal(folded_weights(wt, g, f, True).numpy(), folded_weights(w, g, f, False))
    g = library.checked(*inputs(CASES[11], np.float16, 7)[:2], 4, 0, 1, None, None)
    w = torch.randn(16, 3, 4, 4, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    assert folded_weights(w, g, fold_of(g), True).data_ptr() == w.data_ptr()    # patchify: a view, no copy


def test_padded_weights_are_zero_beyond_c_and_k():
    g = library.Geometry(1, 3, 5, 5, 10, 3, 3, (1, 1), (1, 1), (1, 1))
    assert (g.channel_block, g.padded_c, g.padded_k) == (16, 16, 16)
    w = np.ones((10, 3, 3, 3), ml_dtypes.bfloat16)
    prepared = library._weights(w, g, torch=False).astype(np.float32).reshape(16, 3, 3, 16)
    assert prepared[:10, :, :, :3].min() == 1 and prepared[10:].max() == 0 and prepared[..., 3:].max() == 0


def test_channels_last_weights_are_read_in_place_and_others_prepared_on_every_call():
    """torch operands (CPU tensors stand in for CUDA ones: the layout logic is the same): a
    channels_last weight needing no padding is a view of itself; a padded one is prepared afresh
    each call, so a write through `.data` (which leaves torch's version counter alone) is seen; a
    contiguous but misaligned channels_last activation is copied to an aligned one."""
    torch = pytest.importorskip("torch")
    dense = torch.randn(64, 64, 3, 3).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    g = library.Geometry(1, 64, 8, 8, 64, 3, 3, (1, 1), (1, 1), (1, 1))
    view = library._weights(dense, g, torch=True)
    assert view.data_ptr() == dense.data_ptr() and tuple(view.shape) == (64, 9 * 64)
    assert torch.equal(view.reshape(64, 3, 3, 64), dense.permute(0, 2, 3, 1))

    w = torch.randn(10, 3, 3, 3).to(torch.bfloat16)
    g = library.Geometry(1, 3, 5, 5, 10, 3, 3, (1, 1), (1, 1), (1, 1))
    first = library._weights(w, g, torch=True)
    version = w._version
    w.data.mul_(2)                                                         # no version bump
    assert w._version == version
    doubled = library._weights(w, g, torch=True)
    assert torch.equal(doubled.float(), 2 * first.float())

    n, c, h, wd = 1, 64, 3, 5
    shifted = torch.randn(1 + n * h * wd * c).to(torch.bfloat16)[1:].view(n, h, wd, c).permute(0, 3, 1, 2)
    assert shifted.is_contiguous(memory_format=torch.channels_last) and shifted.data_ptr() % 16
    g = library.Geometry(n, c, h, wd, 8, 1, 1, (1, 1), (0, 0), (1, 1))
    nhwc = library._activation(shifted, g, torch=True)
    assert nhwc.data_ptr() % 16 == 0 and torch.equal(nhwc, shifted.permute(0, 2, 3, 1))


@pytest.mark.parametrize("kwargs,message", [
    ({"stride": 0}, "stride and dilation must be at least 1"),
    ({"padding": -1}, "padding at least 0"),
    ({"stride": (1, 2, 3)}, "an int or a pair of ints"),
    ({"activation": "gelu"}, "activation must be None or 'relu'"),
    ({"bias": np.zeros(5, np.float32)}, "bias must be a [24] vector"),
    ({"dilation": 9}, "has no output pixel"),
    ({"split": 0}, "split must be a positive int or None"),
], ids=["stride0", "negative-padding", "stride-triple", "gelu", "bias-shape", "no-pixel", "split0"])
def test_refusals_name_the_argument(kwargs, message):
    x, w, _ = inputs(CASES[0], ml_dtypes.bfloat16, 3)
    with pytest.raises(LaunchError) as caught:
        tmalang.conv2d(x, w, **kwargs)
    assert message in str(caught.value) and caught.value.code == "E212"


def test_refusals_of_mismatched_tensors():
    x, w, _ = inputs(CASES[0], ml_dtypes.bfloat16, 3)
    for bad in (w[:, :8], w.astype(np.float16), w[0]):
        with pytest.raises(LaunchError):
            tmalang.conv2d(x, bad)


@pytest.mark.gpu
@pytest.mark.parametrize("split", [None, 3], ids=["rule", "split3"])
@pytest.mark.parametrize("channels_last", [True, False], ids=["channels_last", "contiguous"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_h100_matches_float64(case, channels_last, split):
    torch = pytest.importorskip("torch")
    x, w, bias = inputs(case, ml_dtypes.bfloat16, 4)
    stride, padding, dilation, _, relu = case[7:]
    expected = reference(x, w, stride, padding, dilation, bias, relu)
    tx = torch.from_numpy(x.astype(np.float32)).cuda().to(torch.bfloat16)
    tw = torch.from_numpy(w.astype(np.float32)).cuda().to(torch.bfloat16)
    if channels_last:
        tx, tw = tx.contiguous(memory_format=torch.channels_last), tw.contiguous(memory_format=torch.channels_last)
    tb = None if bias is None else torch.from_numpy(bias).cuda()
    y = tmalang.conv2d(tx, tw, stride=stride, padding=padding, dilation=dilation, bias=tb,
                       activation="relu" if relu else None, split=split)
    torch.cuda.synchronize()
    assert tuple(y.shape) == expected.shape and y.dtype == torch.bfloat16
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert relative_error(y.float().cpu().numpy(), expected) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [(64, 64), (64, 128), (128, 256)], ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize("case", [CASES[1], CASES[5], CASES[9]], ids=[IDS[1], IDS[5], IDS[9]])
def test_h100_every_tile(case, tile, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(library, "tile_of", lambda g, sms=132: tile)
    x, w, bias = inputs(case, ml_dtypes.bfloat16, 5)
    stride, padding, dilation, _, relu = case[7:]
    expected = reference(x, w, stride, padding, dilation, bias, relu)
    tx = torch.from_numpy(x.astype(np.float32)).cuda().to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    tw = torch.from_numpy(w.astype(np.float32)).cuda().to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    tb = None if bias is None else torch.from_numpy(bias).cuda()
    for split in (None, 2):
        y = tmalang.conv2d(tx, tw, stride=stride, padding=padding, dilation=dilation, bias=tb,
                           activation="relu" if relu else None, split=split)
        assert relative_error(y.float().cpu().numpy(), expected) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("r, split", [(3, None), (3, 3), (1, None)], ids=["3x3", "3x3-split3", "1x1-gemm"])
def test_h100_repeated_calls_follow_the_data_the_outputs_and_the_stream(r, split):
    """A repeated call (same addresses and layouts) launches as the first did: it reads what lies
    there now, writes each call's own output (and a split its own workspace), and goes to the
    current stream. The im2col kernel, split or not, and a 1x1 layer on tmalang.gemm."""
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 64, 11, 9, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(72, 64, r, r, device="cuda") / 24).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    padding = r // 2
    repeats.clear()

    def check(y):
        expected = torch.nn.functional.conv2d(x.double(), w.double(), padding=padding)
        assert y.is_contiguous(memory_format=torch.channels_last) and y.shape == expected.shape
        assert ((y.double() - expected).norm() / expected.norm()).item() < 1e-2

    kept = []
    for _ in range(3):                      # outputs kept alive: a new output address each call
        kept.append(tmalang.conv2d(x, w, padding=padding, split=split))
        check(kept[-1])
        x.copy_(torch.randn_like(x))        # new values at the same address
    del kept
    for _ in range(3):                      # outputs dropped: the allocator hands the address back
        check(tmalang.conv2d(x, w, padding=padding, split=split))
        x.copy_(torch.randn_like(x))
    assert len(repeats._repeats) == 1
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = tmalang.conv2d(x, w, padding=padding, split=split)
    side.synchronize()
    check(y)


@pytest.mark.gpu
@pytest.mark.parametrize("c, r, stride, padding", [(3, 7, 2, 3), (3, 4, 4, 0)], ids=["stem", "patchify"])
def test_h100_repeated_folded_calls_fold_each_calls_activation_and_weights(c, r, stride, padding):
    """A folded call repeated (same addresses and layouts) skips the checks but folds x and w
    afresh: new values written in place into either are what the next call computes with."""
    torch = pytest.importorskip("torch")
    x = torch.randn(3, c, 23, 26, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(72, c, r, r, device="cuda") / 8).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    repeats.clear()
    for _ in range(4):
        y = tmalang.conv2d(x, w, stride=stride, padding=padding)
        expected = torch.nn.functional.conv2d(x.double(), w.double(), stride=stride, padding=padding)
        assert y.is_contiguous(memory_format=torch.channels_last) and y.shape == expected.shape
        assert ((y.double() - expected).norm() / expected.norm()).item() < 1e-2
        x.copy_(torch.randn_like(x))
        w.copy_(torch.randn_like(w) / 8)
    assert len(repeats._repeats) >= 1


@pytest.mark.gpu
def test_h100_a_1x1_layer_on_an_nchw_activation_reads_each_calls_data():
    """An NCHW-contiguous activation's NHWC rows are a copy, made anew each call: a repeat must
    not launch on the address of an earlier call's (freed) copy."""
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 64, 11, 9, device="cuda").to(torch.bfloat16)          # NCHW, not channels_last
    w = (torch.randn(72, 64, 1, 1, device="cuda") / 8).to(torch.bfloat16)
    repeats.clear()
    for _ in range(4):
        x.copy_(torch.randn_like(x))
        y = tmalang.conv2d(x, w)
        expected = torch.nn.functional.conv2d(x.double(), w.double())
        assert ((y.double() - expected).norm() / expected.norm()).item() < 1e-2
        del y


@pytest.mark.gpu
def test_h100_sees_weights_updated_in_place():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 64, 9, 9, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    for _ in range(2):
        y = tmalang.conv2d(x, w, padding=1)
        expected = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
        assert ((y.double() - expected).norm() / expected.norm()).item() < 1e-2
        w.mul_(-0.5)


@pytest.mark.gpu
def test_h100_new_weights_at_a_freed_address_are_prepared_anew():
    """Weights that need padding (C = 24, K = 10), freed and replaced each round by new ones of the
    same shape, which the caching allocator places at the freed address: each round's result is
    its own weights' (bench/conv2d.py once met a stale entry keyed by address)."""
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 24, 9, 9, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    for _ in range(3):
        w = torch.randn(10, 24, 3, 3, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        y = tmalang.conv2d(x, w, padding=1)
        expected = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
        assert ((y.double() - expected).norm() / expected.norm()).item() < 1e-2
        del w, y


def test_torch_operator_eager_compiled_and_opchecked_on_cpu_tensors():
    """torch CPU tensors go through torch.ops.tmalang.conv2d onto the interpreter: the eager call,
    torch.compile(fullgraph=True) recording it as one op, and torch.library.opcheck (schema, fake
    tensor, AOT dispatch)."""
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 16, 7, 6, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    w = (torch.randn(24, 16, 3, 3, generator=torch.Generator().manual_seed(1)) / 12).to(torch.bfloat16)
    b = torch.randn(24, generator=torch.Generator().manual_seed(2))
    expected = torch.nn.functional.conv2d(x.double(), w.double(), b.double(), padding=1).relu()
    y = tmalang.conv2d(x, w, padding=1, bias=b, activation="relu")
    assert y.shape == expected.shape and y.is_contiguous(memory_format=torch.channels_last)
    assert ((y.double() - expected).norm() / expected.norm()).item() < 1e-2
    compiled = torch.compile(lambda x, w, b: tmalang.conv2d(x, w, padding=1, bias=b, activation="relu") * 2,
                             fullgraph=True)
    assert ((compiled(x, w, b).double() - 2 * expected).norm() / expected.norm()).item() < 2e-2
    torch.library.opcheck(torch.ops.tmalang.conv2d.default, (x, w, b, [1, 1], [1, 1], [1, 1], True, 0))


@pytest.mark.gpu
def test_h100_under_torch_compile():
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 64, 14, 14, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(72, 64, 3, 3, device="cuda") / 24).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    compiled = torch.compile(lambda x, w: tmalang.conv2d(x, w, stride=2, padding=1).float().sum(1), fullgraph=True)
    expected = torch.nn.functional.conv2d(x.double(), w.double(), stride=2, padding=1).sum(1)
    assert ((compiled(x, w).double() - expected).norm() / expected.norm()).item() < 1e-2

"""examples/conv2d_sm90.tma: the implicit-GEMM 3x3 convolution (padding 1) through im2col loads,
stride 1 (`conv2d`) and 2 (`conv2d_s2`), against a float64 NumPy convolution of the same bf16
inputs, at shapes whose spatial dims are not tile multiples: in the interpreter here, and on the
H100 (against float64, and against the interpreter to one bf16 rounding)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import conv2d_inputs, conv2d_reference

EXAMPLE = ROOT / "examples" / "conv2d_sm90.tma"
KERNELS = {1: "conv2d", 2: "conv2d_s2"}
RTOL = 1e-2   # relative Frobenius error of a bf16 result with f32 accumulation (as for the GEMMs)

# (N, H, W, C, K): odd spatial dims, one or two images, more than one M and N tile, K not a
# multiple of the 128-wide tile, C one or more 64-channel blocks
INTERP_SHAPES = [(1, 9, 13, 64, 64), (2, 9, 13, 128, 192), (2, 13, 9, 64, 130 - 2), (1, 1, 1, 64, 64),
                 (2, 11, 5, 192, 64)]


def _kernel(stride: int):
    return tmalang.compile_file(EXAMPLE, kernel=KERNELS[stride])


def relative_error(out, expected) -> float:
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all(), "every output element must be written"
    return float(np.linalg.norm(out - expected) / np.linalg.norm(expected))


def test_reference_is_a_convolution():
    """The float64 reference against a direct sum over the filter, with padding by hand."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 5, 4, 3)), rng.standard_normal((6, 3, 3, 3))
    for stride in (1, 2):
        p, q = (5 - 1) // stride + 1, (4 - 1) // stride + 1
        direct = np.zeros((2, p, q, 6))
        for n, i, j, k in np.ndindex(2, p, q, 6):
            for r, s in np.ndindex(3, 3):
                h, v = i * stride + r - 1, j * stride + s - 1
                if 0 <= h < 5 and 0 <= v < 4:
                    direct[n, i, j, k] += x[n, h, v] @ w[k, r, s]
        np.testing.assert_allclose(conv2d_reference(x, w, stride), direct.reshape(-1, 6))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape", INTERP_SHAPES, ids=["x".join(map(str, s)) for s in INTERP_SHAPES])
def test_interpreter_matches_float64(stride, shape):
    args, expected = conv2d_inputs(np.random.default_rng(hash(shape) & 0xFFFF), *shape, stride)
    _kernel(stride).interpret(*args)
    assert relative_error(args[-1], expected) < RTOL


def test_interpreter_runs_clean_across_schedules():
    args, expected = conv2d_inputs(np.random.default_rng(9), 2, 7, 9, 64, 192, 2)
    _kernel(2).interpret(*args, seed=7, explore=16, ctas=3)
    assert relative_error(args[-1], expected) < RTOL


def test_a_wrong_tap_is_caught():
    """The check has teeth: swapping the filter offsets (s, r for r, s) gives another result."""
    source = EXAMPLE.read_text().replace("offsets [r, s]", "offsets [s, r]")
    args, expected = conv2d_inputs(np.random.default_rng(4), 1, 9, 13, 64, 64, 1)
    tmalang.compile(source, kernel="conv2d").interpret(*args)
    assert relative_error(args[-1], expected) > 0.5


GPU_SHAPES = [(1, 9, 13, 64, 64), (2, 9, 13, 128, 192), (3, 28, 28, 128, 128), (2, 56, 56, 64, 64),
              (5, 15, 17, 256, 320), (32, 7, 7, 512, 512)]


@pytest.mark.gpu
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=["x".join(map(str, s)) for s in GPU_SHAPES])
def test_gpu_matches_float64(stride, shape):
    args, expected = conv2d_inputs(np.random.default_rng(hash(shape) & 0xFFFF), *shape, stride)
    _kernel(stride)(*args)
    assert relative_error(args[-1], expected) < RTOL


def within_one_bf16_rounding(a: np.ndarray, b: np.ndarray) -> bool:
    """Two bf16 results of the same f32 sums in another order: equal, or one bf16 step apart
    (a step is at most 2^-7 of the larger magnitude), or both tiny."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return bool(np.all(np.abs(a - b) <= 2.0 ** -7 * np.maximum(np.abs(a), np.abs(b)) + 1e-3))


@pytest.mark.gpu
@pytest.mark.parametrize("stride", [1, 2])
def test_gpu_equals_the_interpreter_to_one_rounding(stride):
    """The products are exact in f32 on both; only the order of the f32 sums differs (the tensor
    cores' against NumPy's), so each output is the same bf16 or its neighbour."""
    args, _ = conv2d_inputs(np.random.default_rng(23), 2, 9, 13, 128, 192, stride)
    interp_args = [a.copy() for a in args]
    k = _kernel(stride)
    k(*args)
    k.interpret(*interp_args)
    assert args[-1].dtype == ml_dtypes.bfloat16
    assert within_one_bf16_rounding(args[-1], interp_args[-1])

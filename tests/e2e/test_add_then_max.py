"""A kernel written from the docs alone (tests/user_kernels/add_then_max.tma): two TMA reduces of
two operations (add, then max) into the same tile, which the compiler must order. The interpreter,
`verify` and the GPU each against NumPy (int64 arithmetic wrapped to int32), at odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT

KERNEL = ROOT / "tests" / "user_kernels" / "add_then_max.tma"
SHAPES = [(97, 130), (33, 65), (200, 7)]


def _padded(rng, shape, low, high):
    rows, cols = shape
    base = rng.integers(low, high, size=(rows, -(-cols // 4) * 4), dtype=np.int64).astype(np.int32)
    return base[:, :cols]


def _case(rng, shape):
    big = 2 ** 31
    x = _padded(rng, shape, -big, big)                  # sums wrap
    y = _padded(rng, shape, -big, big)
    out = _padded(rng, shape, -big, big)
    wrapped = ((out.astype(np.int64) + x + big) % 2 ** 32 - big).astype(np.int32)
    return x, y, out, np.maximum(wrapped, y)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("ctas", [1, 3])
def test_interpreter_matches_numpy_and_verify_proves_it(shape, ctas):
    kernel = tmalang.compile_file(KERNEL)
    x, y, out, expected = _case(np.random.default_rng(sum(shape)), shape)
    assert kernel.verify(x, y, out, ctas=ctas).verified
    kernel.interpret(x, y, out, ctas=ctas, seed=ctas, explore=4)
    np.testing.assert_array_equal(out, expected)


def test_the_two_reduces_are_ordered_by_a_full_wait():
    ir = tmalang.compile_file(KERNEL).ir
    between = ir[ir.index("reduce=add"):ir.index("reduce=max")]
    assert "bulk_wait pending=0 read=false" in between


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_matches_numpy_and_the_interpreter(shape):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU present")
    kernel = tmalang.compile_file(KERNEL)
    x, y, out, expected = _case(np.random.default_rng(7 + sum(shape)), shape)
    on_gpu = [torch.from_numpy(np.ascontiguousarray(a.base if a.base is not None else a)).cuda()[:, : shape[1]]
              for a in (x, y, out)]
    kernel(*on_gpu)
    torch.cuda.synchronize()
    kernel.interpret(x, y, out, ctas=2)
    np.testing.assert_array_equal(on_gpu[2].cpu().numpy(), expected)
    np.testing.assert_array_equal(out, expected)

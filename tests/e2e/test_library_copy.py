"""`tmalang.copy`: every byte of any layout TMA can address, on the interpreter (NumPy, CI) and
the H100 (torch); the layouts it cannot address are refused with their shape and strides."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.contract.errors import LaunchError

RNG = np.random.default_rng(31)
DENSE = [
    np.arange(300_001, dtype=np.float32).reshape(1, -1),          # one row: 18 rows of 16 KiB and a tail
    RNG.standard_normal((5000, 1)).astype(np.float32),              # one column
    RNG.standard_normal((3, 5, 7)).astype(ml_dtypes.bfloat16),      # 210 bytes: 2-byte words, a tail only
    np.arange(37, dtype=np.uint8),                                  # 1-byte words
    RNG.standard_normal((70, 200)).astype(np.float64),
    np.array([np.nan, -0.0, np.inf], np.float32),                   # bits, not values
]


def bits(x) -> bytes:
    return np.ascontiguousarray(x).tobytes()


@pytest.mark.parametrize("x", DENSE, ids=lambda x: f"{x.dtype}{list(x.shape)}")
def test_dense_arrays_copy_every_byte(x):
    y = tmalang.copy(x)
    assert y.shape == x.shape and y.dtype == x.dtype and bits(y) == bits(x)


def test_strided_rows_into_a_strided_out():
    base = RNG.standard_normal((130, 72)).astype(np.float32)
    x = base[:, 4:68]                                   # rows 288 bytes apart, starting 16 bytes in
    out = np.zeros((130, 72), np.float32)[:, 8:72]
    assert tmalang.copy(x, out) is out
    assert np.array_equal(out, x)
    one_row = base[3:4, 4:68]
    assert np.array_equal(tmalang.copy(one_row), one_row)


@pytest.mark.parametrize("view", ["unaligned", "column", "3-d strided"])
def test_layouts_tma_cannot_address_are_refused(view):
    base = RNG.standard_normal((130, 72)).astype(np.float32)
    x = {"unaligned": base[:, 3:67], "column": base[:, 5:6],
         "3-d strided": np.zeros((4, 6, 8), np.float32)[:, :, :4]}[view]
    with pytest.raises(LaunchError) as caught:
        tmalang.copy(x)
    assert caught.value.code == "E212" and "TMA cannot address shape" in str(caught.value)


def test_out_must_match():
    x = np.zeros((4, 4), np.float32)
    for out in (np.zeros((4, 5), np.float32), np.zeros((4, 4), np.float64), [0.0]):
        with pytest.raises(LaunchError):
            tmalang.copy(x, out)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1 << 20), (1 << 20, 1), (1000, 1003), (7,), (2, 3, 5, 7)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "uint8", "float64"])
def test_h100_copies_every_byte(shape, dtype):
    torch = pytest.importorskip("torch")
    x = torch.randn(shape, device="cuda").to(getattr(torch, dtype)) if dtype != "uint8" else \
        torch.randint(0, 256, shape, device="cuda", dtype=torch.uint8)
    y = tmalang.copy(x)
    torch.cuda.synchronize()
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))
    wide = torch.zeros(1000, 1008, device="cuda")
    out = torch.full((1000, 1008), float("nan"), device="cuda")[:, :1003]
    tmalang.copy(wide[:, :1003].copy_(torch.randn(1000, 1003, device="cuda")), out)
    torch.cuda.synchronize()
    assert torch.equal(out, wide[:, :1003])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, (1 << 20) + 3), (1000, 1003)], ids=str)
def test_h100_repeated_copies_move_the_bytes_there_now(shape):
    """A repeated call (same addresses, layouts and stream) launches as the first did: it copies
    what lies there now, into each call's own output, on the current stream."""
    torch = pytest.importorskip("torch")
    x = torch.randn(shape, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(x)
    for _ in range(3):
        x.copy_(torch.randn(shape, device="cuda"))
        out.fill_(float("nan"))
        assert tmalang.copy(x, out) is out and torch.equal(out, x)
    kept = [tmalang.copy(x) for _ in range(3)]
    assert all(torch.equal(y, x) for y in kept)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x.mul_(2)
        tmalang.copy(x, out)
    side.synchronize()
    assert torch.equal(out, x)

"""The DLPack stream handshake: a launch tells each DLPack producer the stream it will run on
(`__dlpack__(stream=...)`), so the producer orders that stream after its own pending writes.

On CPU the producers are stand-ins that record what they were asked; on the H100 a torch tensor
written late on another stream, handed over through DLPack alone, must be read after the write.
"""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.contract.binding import bind

SHAPE = (70, 132)


class CudaProducer:
    """A DLPack producer that claims to live on CUDA device 0 and records each stream it is asked
    for (the capsule holds host memory: binding reads only its description)."""

    def __init__(self, array: np.ndarray):
        self.array, self.asked = array, []

    def __dlpack_device__(self):
        return (2, 0)   # kDLCUDA

    def __dlpack__(self, stream=None):
        self.asked.append(stream)
        return self.array.__dlpack__()


class OldProducer(CudaProducer):
    """A producer from before the stream argument."""

    def __dlpack__(self):
        self.asked.append("no argument")
        return self.array.__dlpack__()


@pytest.fixture(scope="module")
def saxpy():
    return tmalang.compile_file(ROOT / "examples" / "saxpy.tma")


def _args(kind=CudaProducer):
    rng = np.random.default_rng(0)
    return [kind(rng.standard_normal(SHAPE, dtype=np.float32)) for _ in range(3)]


@pytest.mark.parametrize("stream, told", [(0x7F00DEAD, 0x7F00DEAD), (0, 1)])
def test_each_producer_is_told_the_launch_stream(saxpy, stream, told):
    x, y, out = _args()
    binding = bind(saxpy.manifest, (1.5, x, y, out), None, stream)
    assert [p.asked for p in (x, y, out)] == [[told]] * 3   # handle 0 is DLPack's 1: the legacy default stream
    assert binding.views["x"].shape == SHAPE


def test_without_a_launch_stream_producers_are_asked_plainly(saxpy):
    x, y, out = _args()
    bind(saxpy.manifest, (1.5, x, y, out))
    assert x.asked == [None]


def test_producers_without_the_stream_argument_still_bind(saxpy):
    x, y, out = _args(OldProducer)
    binding = bind(saxpy.manifest, (1.5, x, y, out), None, 5)
    assert x.asked == ["no argument"] and binding.views["out"].shape == SHAPE


class DLPackOnly:
    """A torch tensor seen only through DLPack (no torch duck typing, no array interface)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__(stream=stream)


@pytest.mark.gpu
def test_on_the_gpu_the_launch_stream_waits_for_the_producers_write(saxpy):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    x = torch.zeros(SHAPE, device="cuda")
    y = torch.randn(SHAPE, device="cuda")
    out = torch.full(SHAPE, float("nan"), device="cuda")
    source = torch.randn(SHAPE, device="cuda")
    saxpy(1.5, x, y, out)     # module loaded outside the race
    torch.cuda.synchronize()
    writer, launcher = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(writer):          # torch's current stream: the producer's
        torch.cuda._sleep(200_000_000)       # the write lands ~0.1 s late
        x.copy_(source)
        saxpy(1.5, DLPackOnly(x), DLPackOnly(y), DLPackOnly(out), stream=launcher)
        assert not launcher.query()          # ordered on the GPU: the launcher waits, the host did not
    launcher.synchronize()
    expected = np.float32(1.5) * source.cpu().numpy() + y.cpu().numpy()
    np.testing.assert_array_equal(out.cpu().numpy(), expected)

"""On the H100: a launch given no stream follows torch, as torch's own operations do. It goes to
torch's current stream (so it is ordered after the work that produced its inputs on a side
stream), and inside `torch.cuda.graph(...)` it is captured and runs on every replay."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import ROOT

pytestmark = pytest.mark.gpu

SHAPE = (1000, 1000)
SPIN = 200_000_000       # ~0.1 s of GPU time queued before the input is written


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def saxpy():
    import tmalang

    return tmalang.compile_file(ROOT / "examples" / "saxpy.tma")


def _operands(torch):
    x = torch.zeros(SHAPE, device="cuda")
    y = torch.randn(SHAPE, device="cuda")
    out = torch.full(SHAPE, float("nan"), device="cuda")
    return x, y, out


def _expected(a, x, y):
    return np.float32(a) * x.cpu().numpy() + y.cpu().numpy()


def test_a_launch_without_a_stream_follows_torchs_current_stream(torch, saxpy):
    x, y, out = _operands(torch)
    source = torch.randn(SHAPE, device="cuda")
    saxpy(np.float32(1.5), x, y, out)          # loaded once, outside the timed part
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SPIN)         # the input is written late on the side stream
        x.copy_(source)
        saxpy(np.float32(1.5), x, y, out)
        # queued behind the copy on the side stream, not run elsewhere after waiting for it on
        # the host (the array interface's stream handshake would do that): the side stream is busy
        assert not side.query()
    side.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), _expected(1.5, source, y))


def test_a_launch_inside_torch_cuda_graph_is_captured_and_replayed(torch, saxpy):
    x, y, out = _operands(torch)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):        # warm-up outside capture, as torch asks
        saxpy(np.float32(2.0), x, y, out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        saxpy(np.float32(2.0), x, y, out)
    for _ in range(2):                   # each replay reads the inputs as they are then
        x.copy_(torch.randn(SHAPE, device="cuda"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), _expected(2.0, x, y))

"""`Kernel.as_torch_op`: a kernel as a torch custom operator (tmalang/torch_op.py).

On CPU tensors the operator runs the reference interpreter, so torch's own operator checks
(`torch.library.opcheck`: schema, fake implementation, functionalization) run on any machine
with torch; on the H100 the same operator launches the kernel, alone, under
`torch.compile(fullgraph=True)` and inside a CUDA graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.torch_op import schema

torch = pytest.importorskip("torch")

SHAPE = (77, 132)   # not a multiple of saxpy's 64 x 64 box; rows of 16-byte multiples (TMA)


@pytest.fixture(scope="module")
def saxpy():
    return tmalang.compile_file(ROOT / "examples" / "saxpy.tma")


def _operands(device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SHAPE, generator=g).to(device)
    y = torch.randn(SHAPE, generator=g).to(device)
    return x, y, torch.full(SHAPE, float("nan"), device=device)


def _expected(a, x, y):
    return np.float32(a) * x.cpu().numpy() + y.cpu().numpy()


def test_the_schema_marks_what_the_kernel_writes(saxpy):
    assert schema(saxpy.manifest) == "(float a, Tensor x, Tensor y, Tensor(d!) out) -> ()"


def test_on_cpu_tensors_the_operator_runs_the_interpreter_in_place(saxpy):
    op = saxpy.as_torch_op()
    x, y, out = _operands()
    assert op(1.5, x, y, out) is None
    np.testing.assert_array_equal(out.numpy(), _expected(1.5, x, y))
    assert op is saxpy.as_torch_op()          # one operator per kernel
    assert op.op is getattr(torch.ops.tmalang, op.name).default


def test_opcheck_passes_on_cpu(saxpy):
    op = saxpy.as_torch_op()
    x, y, out = _operands(seed=1)
    torch.library.opcheck(op.op, (1.5, x, y, out))


def test_bf16_tensors_reach_the_interpreter_through_their_bits():
    source = (ROOT / "examples" / "tma_copy.tma").read_text().replace("f32[", "bf16[")
    op = tmalang.compile(source, name="tma_copy_bf16.tma").as_torch_op()
    src = torch.randn(70, 200).to(torch.bfloat16)
    dst = torch.zeros(70, 200, dtype=torch.bfloat16)
    op(src, dst)
    assert torch.equal(dst, src)


def test_under_torch_compile_fullgraph_on_cpu(saxpy):
    op = saxpy.as_torch_op()

    def f(x, y):
        out = torch.empty_like(x)
        op(2.0, x * 0.5, y, out)      # torch work before and after the kernel, in one graph
        return out + 1

    x, y, _ = _operands(seed=2)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    got = compiled(x, y)
    np.testing.assert_array_equal(got.numpy(), _expected(2.0, x * 0.5, y) + np.float32(1))


def test_a_name_taken_by_another_kernel_is_refused(saxpy):
    copy = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma")
    saxpy.as_torch_op("shared_name_for_the_test")
    with pytest.raises(tmalang.TmalangError, match="E212.*already another kernel's operator"):
        copy.as_torch_op("shared_name_for_the_test")
    with pytest.raises(tmalang.TmalangError, match="must be an identifier"):
        copy.as_torch_op("not an identifier")


@pytest.mark.gpu
def test_on_the_gpu_alone_compiled_and_captured(saxpy):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    op = saxpy.as_torch_op()
    x, y, out = _operands("cuda", seed=3)
    op(1.5, x, y, out)
    np.testing.assert_array_equal(out.cpu().numpy(), _expected(1.5, x, y))

    def f(x, y):
        out = torch.empty_like(x)
        op(2.0, x * 0.5, y, out)
        return out + 1

    got = torch.compile(f, fullgraph=True)(x, y)
    np.testing.assert_array_equal(got.cpu().numpy(), _expected(2.0, (x * 0.5), y) + np.float32(1))

    static_x, static_y, static_out = _operands("cuda", seed=4)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op(1.0, static_x, static_y, static_out)      # warm-up: loads the module outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(3.0, static_x, static_y, static_out)
    for seed in (5, 6):
        fresh_x, fresh_y, _ = _operands("cuda", seed=seed)
        static_x.copy_(fresh_x)
        static_y.copy_(fresh_y)
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(static_out.cpu().numpy(), _expected(3.0, fresh_x, fresh_y))


def test_only_plain_cuda_calls_skip_the_dispatcher():
    """`unobserved_torch_call`: CPU tensors, scalars alone, a tensor that needs a gradient or a
    subclass (nn.Parameter) all go through the operator."""
    from tmalang.contract.arrays import unobserved_torch_call
    x = torch.zeros(2)
    assert not unobserved_torch_call((1.5, x, x, x))
    assert not unobserved_torch_call((1.5, 2))
    assert not unobserved_torch_call((torch.nn.Parameter(torch.zeros(2)),))


@pytest.mark.gpu
def test_a_dispatch_mode_sees_the_operator_and_a_plain_call_computes_the_same(saxpy):
    """An eager call on plain CUDA tensors runs the kernel without the dispatcher; under a dispatch
    mode (as a profiler or fake tensors install) the operator is what runs, and the mode sees it."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from torch.utils._python_dispatch import TorchDispatchMode
    from tmalang.contract.arrays import unobserved_torch_call

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls.append(str(func))
            return func(*args, **(kwargs or {}))

    op = saxpy.as_torch_op()
    x, y, out = _operands("cuda", seed=7)
    assert unobserved_torch_call((1.5, x, y, out))
    op(1.5, x, y, out)
    np.testing.assert_array_equal(out.cpu().numpy(), _expected(1.5, x, y))
    out.fill_(float("nan"))
    with Seen() as seen:
        op(2.5, x, y, out)
    assert any("tmalang" in call for call in seen.calls), seen.calls
    np.testing.assert_array_equal(out.cpu().numpy(), _expected(2.5, x, y))
    w = (torch.randn(16, 16, 3, 3, device="cuda") / 12).to(torch.bfloat16)
    image = torch.randn(1, 16, 6, 5, device="cuda").to(torch.bfloat16)
    with Seen() as seen:
        tmalang.conv2d(image, w, padding=1)
    assert any("tmalang.conv2d" in call for call in seen.calls), seen.calls

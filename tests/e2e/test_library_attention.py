"""`tmalang.attention` and `tmalang.attention_backward` (library/attention.py).

NumPy arrays run the kernels on the interpreter: outputs and gradients against float64 in both
layouts, with grouped-query heads, causal and not, at lengths that are not block multiples, and
wrong calls refused with nothing written. On the GPU the torch path: the autograd function
against float64 and SDPA, under torch.compile(fullgraph=True), and a small transformer trained
with it following SDPA's loss curve.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.contract.errors import LaunchError

BF16 = ml_dtypes.bfloat16


def operands(b, h, hk, s, t, d, layout, seed):
    rng = np.random.default_rng(seed)

    def make(heads, n):
        shape = (b, heads, n, d) if layout == "bhsd" else (b, n, heads, d)
        return rng.standard_normal(shape).astype(BF16)
    return make(h, s), make(hk, t), make(hk, t), make(h, s)


def to_bhsd(x, layout):
    return x if layout == "bhsd" else x.transpose(0, 2, 1, 3)


def reference(q, k, v, do, causal, layout):
    """float64 (O, LSE, dQ, dK, dV) in the given layout."""
    q, k, v, do = (to_bhsd(x, layout).astype(np.float64) for x in (q, k, v, do))
    group = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, group, 1), np.repeat(v, group, 1)
    scale = 1 / np.sqrt(q.shape[-1])
    logits = q @ kk.swapaxes(-1, -2) * scale
    if causal:
        logits = np.where(np.arange(k.shape[2])[None, None, None, :] > np.arange(q.shape[2])[None, None, :, None],
                          -np.inf, logits)
    top = logits.max(-1, keepdims=True)
    total = np.exp(logits - top).sum(-1, keepdims=True)
    p = np.exp(logits - top) / total
    o = p @ vv
    ds = p * (do @ vv.swapaxes(-1, -2) - (do * o).sum(-1, keepdims=True))
    dq = ds @ kk * scale
    dk = (ds.swapaxes(-1, -2) @ q * scale).reshape(k.shape[0], k.shape[1], group, *k.shape[2:]).sum(2)
    dv = (p.swapaxes(-1, -2) @ do).reshape(k.shape[0], k.shape[1], group, *k.shape[2:]).sum(2)
    back = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(0, 2, 1, 3))
    return back(o), (top + np.log(total))[..., 0], back(dq), back(dk), back(dv)


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / max(np.linalg.norm(want), 1e-30))


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("b,h,hk,s,t,d,causal", [(2, 2, 1, 77, 150, 64, True), (1, 4, 2, 70, 70, 128, False)],
                         ids=["gqa2-hd64-causal", "gqa2-hd128"])
def test_numpy_forward_and_backward_match_float64(layout, b, h, hk, s, t, d, causal):
    q, k, v, do = operands(b, h, hk, s, t, d, layout, s + t + d)
    o, lse = tmalang.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    want_o, want_lse, *want_grads = reference(q, k, v, do, causal, layout)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (b, h, s)
    assert relative_error(o, want_o) < 1e-2
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-4)
    grads = tmalang.attention_backward(q, k, v, o, lse, do, causal=causal, layout=layout)
    for got, arg, want in zip(grads, (q, k, v), want_grads):
        assert got.shape == arg.shape and got.dtype == arg.dtype
        assert relative_error(got, want) < 1e-2
    dq, dk, dv = tmalang.attention_backward(q, k, v, o, lse, do, causal=causal, layout=layout, deterministic=True)
    assert dq.shape == q.shape and dq.dtype == q.dtype and relative_error(dq, want_grads[0]) < 1e-2
    assert np.array_equal(dk.view(np.int16), grads[1].view(np.int16))      # one kernel's either way
    assert np.array_equal(dv.view(np.int16), grads[2].view(np.int16))


@pytest.mark.parametrize("change,message", [
    (lambda q, k, v: (q, k[:, :, :, :32], v[:, :, :, :32]), "alike"),
    (lambda q, k, v: (q[:, :3], k, v), "do not divide"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim 32"),
    (lambda q, k, v: (q.astype(np.float32), k, v), "bf16"),
    (lambda q, k, v: (q[0], k[0], v[0]), "4-D"),
], ids=["k-head-dim", "heads", "head-dim", "dtype", "rank"])
def test_calls_the_kernels_do_not_run_are_refused(change, message):
    q, k, v, _ = operands(1, 4, 2, 16, 16, 64, "bhsd", 1)
    before = [x.copy() for x in (q, k, v)]
    with pytest.raises(LaunchError, match=message):
        tmalang.attention(*change(q, k, v))
    for x, y in zip((q, k, v), before):
        np.testing.assert_array_equal(x.view(np.int16), y.view(np.int16))
    with pytest.raises(LaunchError, match="layout"):
        tmalang.attention(q, k, v, layout="sbhd")


# ---- torch on the GPU ---------------------------------------------------------------------------

def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU present")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("hk,s,d,causal", [(8, 1000, 128, True), (1, 4099, 64, False), (2, 1, 128, True)],
                         ids=["mha-hd128-causal", "mqa-hd64", "gqa4-s1"])
def test_autograd_matches_float64_as_closely_as_sdpa(layout, hk, s, d, causal):
    torch = _torch()
    b, h = 1, 8
    q, k, v, do = (torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
                   for x in operands(b, h, hk, s, s, d, layout, s + d))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    o = tmalang.attention(q, k, v, causal=causal, layout=layout)
    grads = torch.autograd.grad(o, (q, k, v), do)
    want = reference(*(x.detach().float().cpu().numpy() for x in (q, k, v, do)), causal, layout)

    def sdpa(x):
        return x if layout == "bhsd" else x.transpose(1, 2)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        peer_o = sdpa(torch.nn.functional.scaled_dot_product_attention(
            sdpa(q), sdpa(k), sdpa(v), is_causal=causal, enable_gqa=hk != h))
    peer = torch.autograd.grad(peer_o, (q, k, v), do)
    for got, theirs, expected in zip((o, *grads), (peer_o, *peer), (want[0], *want[2:])):
        mine = relative_error(got.detach().float().cpu().numpy(), expected)
        other = relative_error(theirs.detach().float().cpu().numpy(), expected)
        assert mine <= 1.02 * other + 1e-4, (mine, other)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_deterministic_autograd_repeats_bitwise(layout):
    """tmalang.attention(deterministic=True): two backward passes give the same bits (GQA 4,
    causal, S 3000), as accurate as without."""
    torch = _torch()
    q, k, v, do = (torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
                   for x in operands(2, 8, 2, 3000, 3000, 128, layout, 9))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    runs = []
    for deterministic in (True, True, False):
        o = tmalang.attention(q, k, v, causal=True, layout=layout, deterministic=deterministic)
        runs.append(torch.autograd.grad(o, (q, k, v), do))
    for first, second, loose in zip(*runs):
        assert torch.equal(first.view(torch.int16), second.view(torch.int16))
        assert ((first.float() - loose.float()).norm() / loose.float().norm()).item() < 1e-2


@pytest.mark.gpu
def test_torch_compile_fullgraph_and_lse():
    torch = _torch()
    q, k, v = (torch.randn(2, 8, 300, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))

    @torch.compile(fullgraph=True)
    def step(q, k, v):
        o, lse = tmalang.attention(q, k, v, causal=True, return_lse=True)
        return o.float().square().sum(), lse

    loss, lse = step(q, k, v)
    loss.backward()
    eager_o, eager_lse = tmalang.attention(q.detach(), k.detach(), v.detach(), causal=True, return_lse=True)
    assert torch.allclose(lse, eager_lse)
    assert all(x.grad is not None and torch.isfinite(x.grad).all() for x in (q, k, v))


@pytest.mark.gpu
@pytest.mark.parametrize("deterministic", [False, True])
def test_forward_and_backward_replay_in_a_cuda_graph(deterministic):
    """The kernels claim their tiles from a per-stream counter (`dynamic`). A graph captured on a
    stream no launch has used yet zeroes that counter inside the graph, and replays with new
    inputs give what eager calls give."""
    torch = _torch()
    shape = (2, 4, 1000, 128)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        o = tmalang.attention(q, k, v, causal=True, deterministic=deterministic)
        grads = torch.autograd.grad(o, (q, k, v), do)
    for seed in (1, 2):
        torch.manual_seed(seed)
        for x in (q, k, v, do):
            x.data.copy_(torch.randn(shape, device="cuda", dtype=torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        eager = tmalang.attention(q, k, v, causal=True, deterministic=deterministic)
        eager_grads = torch.autograd.grad(eager, (q, k, v), do)
        assert torch.allclose(o.float(), eager.float(), atol=1e-2, rtol=0)
        for got, want in zip(grads, eager_grads):
            assert torch.allclose(got.float(), want.float(), atol=2e-2, rtol=0)


@pytest.mark.gpu
def test_a_two_layer_transformer_trains_like_sdpa():
    """50 steps of a 2-layer pre-norm transformer on random tokens: tmalang.attention's loss curve
    follows SDPA's from the same initial weights within bf16 noise."""
    torch = _torch()
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, width, heads, attend):
            super().__init__()
            self.heads, self.attend = heads, attend
            self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                           torch.nn.Linear(4 * width, width))

        def forward(self, x):
            b, s, w = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads).unbind(2)
            x = x + self.out(self.attend(q, k, v).reshape(b, s, w))
            return x + self.mlp(self.norm2(x))

    def ours(q, k, v):
        return tmalang.attention(q, k, v, causal=True, layout="bshd")

    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)

    def train(attend, seed=1):
        torch.manual_seed(seed)
        embed = torch.nn.Embedding(512, 256)
        blocks = torch.nn.Sequential(Block(256, 4, attend), Block(256, 4, attend))
        head = torch.nn.Linear(256, 512)
        model = torch.nn.ModuleList([embed, blocks, head]).cuda().bfloat16()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = torch.randint(0, 512, (8, 257), generator=torch.Generator().manual_seed(2)).cuda()
        losses = []
        for _ in range(50):
            logits = head(blocks(embed(data[:, :-1])))
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), data[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return np.array(losses)

    ours_losses, sdpa_losses = train(ours), train(sdpa)
    assert ours_losses[-1] < ours_losses[0] - 1.0            # it learns
    np.testing.assert_allclose(ours_losses, sdpa_losses, rtol=0.02, atol=0.05)

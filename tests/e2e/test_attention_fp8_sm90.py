"""examples/attention_fp8_sm90.tma and tmalang.attention on float8 e4m3 operands.

The kernel rounds each key block's probabilities to e4m3 (P in [0, 1], relative to the running
row max), so the reference emulates that online softmax in float64 (`emulated`), which the kernel
must meet closely; and against exact float64 attention the error is what e4m3 P costs (a few
parts in a thousand of O's norm, below bf16 attention's on fp8 inputs quantised once more). On the
interpreter at odd shapes (GQA, causal, S not a multiple of 128, S > T and S < T), through ptxas,
and on the GPU.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.contract.errors import LaunchError
from conftest import ROOT

E4M3 = ml_dtypes.float8_e4m3fn
LOG2E = 1.4426950408889634


def operands(b, h, hk, s, t, seed, layout="bhsd", d=128):
    rng = np.random.default_rng(seed)
    shape = (lambda n, heads: (b, heads, n, d)) if layout == "bhsd" else (lambda n, heads: (b, n, heads, d))
    q = (rng.standard_normal(shape(s, h)) * 2).astype(E4M3)
    k, v = ((rng.standard_normal(shape(t, hk)) * 2).astype(E4M3) for _ in range(2))
    return q, k, v


def heads_first(x, layout):
    return x if layout == "bhsd" else x.transpose(0, 2, 1, 3)


def emulated(q, k, v, scale: float, q_descale, k_descale, v_descale, causal: bool, layout="bhsd"):
    """(O, LSE) as the kernel computes them, in float64: per 128-key block, the running max, P =
    exp2(scaled S - max) rounded to e4m3 for P·V, the row sums of the unrounded P."""
    q, k, v = (heads_first(x, layout).astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, 1), np.repeat(v, group, 1)
    qs = (scale * np.repeat(q_descale * k_descale, group, 1))[..., None, None] * LOG2E      # [B, H, 1, 1]
    logits = q @ k.swapaxes(-1, -2) * qs
    if causal:
        logits = np.where(np.arange(k.shape[2])[None, None, None, :] > np.arange(q.shape[2])[None, None, :, None],
                          -np.inf, logits)
    m = np.full(logits.shape[:-1] + (1,), -np.inf)
    l, acc = np.zeros_like(m), np.zeros(q.shape)
    for j in range(0, k.shape[2], 128):
        block = logits[..., j:j + 128]
        top = np.maximum(m, block.max(-1, keepdims=True))
        p = np.exp2(block - top)
        rescale = np.exp2(np.where(np.isinf(m), -np.inf, m - top))
        quantised = p.astype(np.float32).astype(E4M3).astype(np.float64)
        acc = acc * rescale + quantised @ v[..., j:j + 128, :]
        l, m = l * rescale + p.sum(-1, keepdims=True), top
    o = acc * np.repeat(v_descale, group, 1)[..., None, None] / l
    back = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(0, 2, 1, 3))
    return back(o), (m + np.log2(l))[..., 0] / LOG2E


def exact(q, k, v, scale, q_descale, k_descale, v_descale, causal, layout="bhsd"):
    """float64 attention of the dequantised operands."""
    q, k, v = (heads_first(x, layout).astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    q = q * np.repeat(q_descale, group, 1)[..., None, None]
    k, v = (np.repeat(x * d[..., None, None], group, 1) for x, d in ((k, k_descale), (v, v_descale)))
    logits = q @ k.swapaxes(-1, -2) * scale
    if causal:
        logits = np.where(np.arange(k.shape[2])[None, None, None, :] > np.arange(q.shape[2])[None, None, :, None],
                          -np.inf, logits)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    o = p / p.sum(-1, keepdims=True) @ v
    return o if layout == "bhsd" else o.transpose(0, 2, 1, 3)


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


def descales(b, hk, seed):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(0.5, 2.0, (b, hk)).astype(np.float32) for _ in range(3))


@pytest.mark.parametrize("d", [64, 128])
def test_ptxas_assembles_it_without_spills(d):
    kernel = tmalang.compile_file(ROOT / "examples" / "attention_fp8_sm90.tma", constants={"D": d})
    assert f"wgmma.mma_async.sync.aligned.m64n{d}k32.f32.e4m3.e4m3" in kernel.ptx
    _, stats = ptxas.assemble(kernel.ptx, "sm_90a")
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


@pytest.mark.parametrize("b,h,hk,s,t,causal,layout,d", [
    (1, 2, 1, 77, 150, False, "bhsd", 128), (2, 2, 2, 130, 130, True, "bshd", 128),
    (1, 4, 1, 200, 70, True, "bhsd", 128), (1, 4, 2, 150, 90, True, "bshd", 64), (2, 2, 1, 33, 300, False, "bhsd", 64),
], ids=["gqa2", "mha-causal-bshd", "gqa4-causal-s_gt_t", "hd64-gqa2-causal-bshd", "hd64-gqa2"])
def test_the_interpreter_matches_the_emulation_and_float64(b, h, hk, s, t, causal, layout, d):
    q, k, v = operands(b, h, hk, s, t, s + t, layout, d)
    qd, kd, vd = descales(b, hk, s)
    o, lse = tmalang.attention(q, k, v, causal=causal, layout=layout, return_lse=True,
                               q_descale=qd, k_descale=kd, v_descale=vd)
    assert o.dtype == ml_dtypes.bfloat16 and o.shape == q.shape and lse.shape == (b, h, s)
    want_o, want_lse = emulated(q, k, v, 1 / np.sqrt(d), qd, kd, vd, causal, layout)
    assert relative_error(o, want_o) < 5e-3
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-4)
    assert relative_error(o, exact(q, k, v, 1 / np.sqrt(d), qd, kd, vd, causal, layout)) < 1.5e-2


@pytest.mark.parametrize("change,message", [
    (lambda q, k, v: (q, k, v.astype(ml_dtypes.bfloat16)), "float8_e4m3fn"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim 64 or 128"),
])
def test_calls_the_fp8_kernel_does_not_run_are_refused(change, message):
    q, k, v = change(*operands(1, 2, 1, 10, 10, 1))
    with pytest.raises(LaunchError, match=message):
        tmalang.attention(q, k, v)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hk,s,d", [(8, 1000, 128), (2, 4099, 128), (1, 77, 128), (2, 1000, 64)],
                         ids=["mha", "gqa4", "mqa-short", "hd64-gqa4"])
def test_the_gpu_matches_the_emulation(hk, s, d, causal):
    torch = pytest.importorskip("torch")
    b, h = 1, 8
    q, k, v = operands(b, h, hk, s, s, s + hk, d=d)
    qd, kd, vd = descales(b, hk, s)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.uint8)).cuda().view(torch.float8_e4m3fn)
    o, lse = tmalang.attention(device(q), device(k), device(v), causal=causal, return_lse=True,
                               q_descale=torch.from_numpy(qd).cuda(), k_descale=torch.from_numpy(kd).cuda(),
                               v_descale=torch.from_numpy(vd).cuda())
    torch.cuda.synchronize()
    assert o.dtype == torch.bfloat16
    want_o, want_lse = emulated(q, k, v, 1 / np.sqrt(d), qd, kd, vd, causal)
    assert relative_error(o.float().cpu().numpy(), want_o) < 1e-2     # fp8 wgmma's short accumulator (§15)
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, rtol=3e-3, atol=1e-3)

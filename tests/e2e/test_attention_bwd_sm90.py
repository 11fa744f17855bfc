"""examples/attention_bwd_sm90.tma: attention's backward pass (dQ, dK, dV) on wgmma (sm_90a).

Against float64 gradients at lengths that are not multiples of the 128-row blocks, causal and
not, head dims 64 and 128, with 1, 2, 4 and 8 query heads per K/V head: on the interpreter (small shapes, several
random schedules, which must agree), and on the H100, where each gradient's relative error must
be at most that of SDPA FLASH's bf16 gradients against the same reference. The forward's LSE and
O come from examples/attention_sm90.tma, as in training.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.library.attention_kernels import binding
from conftest import ROOT

EXAMPLES = ROOT / "examples"
BF16 = ml_dtypes.bfloat16
def compiled(role: str, d: int):
    """The example's forward, prep or backward kernel as tmalang.attention binds it at head dim d."""
    file, name, constants = binding(role, d)
    return tmalang.compile_file(EXAMPLES / file, kernel=name, constants=constants)


@pytest.fixture(scope="module", params=[64, 128], ids=["hd64", "hd128"])
def backward(request):
    """(backward kernel, head dim)."""
    return compiled("backward", request.param), request.param


def inputs(bh: int, bhkv: int, s: int, t: int, d: int, seed: int):
    """Q, dO [BH, S, D] and K, V [BHKV, T, D] in bf16."""
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((bh, s, d)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((bhkv, t, d)).astype(BF16) for _ in range(2))
    return q, k, v, do


def padded(bh: int, s: int) -> np.ndarray:
    """[BH, S] f32 with rows padded to 16 bytes, as TMA needs: a view."""
    return np.full((bh, -(-s // 4) * 4), np.nan, np.float32)[:, :s]


def reference(q, k, v, do, causal: bool):
    """float64 (O, LSE, dQ, dK, dV); K/V gradients summed over each group of query heads."""
    group = q.shape[0] // k.shape[0]
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    kk, vv = np.repeat(k, group, 0), np.repeat(v, group, 0)
    scale = 1 / np.sqrt(q.shape[-1])
    s = q @ kk.swapaxes(-1, -2) * scale
    if causal:
        s = np.where(np.arange(k.shape[1])[None, None, :] > np.arange(q.shape[1])[None, :, None], -np.inf, s)
    top = s.max(-1, keepdims=True)
    p = np.exp(s - top)
    total = p.sum(-1, keepdims=True)
    p /= total
    o = p @ vv
    dp = do @ vv.swapaxes(-1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    dq = ds @ kk * scale
    dk = (ds.swapaxes(-1, -2) @ q * scale).reshape(k.shape[0], group, *k.shape[1:]).sum(1)
    dv = (p.swapaxes(-1, -2) @ do).reshape(k.shape[0], group, *k.shape[1:]).sum(1)
    return o, (top + np.log(total))[..., 0], dq, dk, dv


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / max(np.linalg.norm(want), 1e-30))


def interpreted(kernel, q, k, v, do, causal: int, seed: int, explore: int = 1, ctas: int | None = None):
    """The backward on the interpreter from float64's O (rounded to bf16, as the forward writes
    it) and LSE: (dQ, dK, dV)."""
    o, lse, *_ = reference(q, k, v, do, bool(causal))
    (bh, s, d), (bhkv, t, _) = q.shape, k.shape
    lse_in, delta = padded(bh, s), padded(bh, s)
    lse_in[...] = lse
    delta[...] = (do.astype(np.float64) * o.astype(BF16).astype(np.float64)).sum(-1)
    dq = np.zeros((bh, s, d), np.float32)
    dk, dv = np.full((bhkv, t, d), np.nan, BF16), np.full((bhkv, t, d), np.nan, BF16)
    kernel.interpret(q, k, v, do, lse_in, delta, np.float32(1 / np.sqrt(d)), np.int32(causal), dq, dk, dv,
                     seed=seed, explore=explore, **({"ctas": ctas} if ctas else {}))
    return dq, dk, dv


def test_ptxas_accepts_without_spills_and_the_dq_gemm_reads_ds_mn_major(backward):
    kernel, d = backward
    ptx = kernel.ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx         # Sᵀ, dPᵀ
    assert f"wgmma.mma_async.sync.aligned.m64n{d // 2}k16.f32.bf16.bf16" in ptx  # dQ: half the columns each
    assert ", p, 1, 1, 1, 1;" in ptx                                             # dQ: A km, B kn
    assert "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add" in ptx        # dQ into dq
    _, stats = ptxas.assemble(ptx, "sm_90a")
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats
    assert "C7514" not in stats.log, stats.log


@pytest.mark.parametrize("bh,bhkv,s,t,causal", [
    (2, 2, 77, 150, 0), (2, 1, 130, 130, 1), (4, 1, 5, 70, 1), (8, 1, 33, 40, 0), (4, 2, 150, 77, 1),
], ids=["mha", "gqa2_causal", "gqa4_causal", "gqa8", "gqa2_causal_s_gt_t"])
def test_interpreter_matches_float64(backward, bh, bhkv, s, t, causal):
    kernel, d = backward
    q, k, v, do = inputs(bh, bhkv, s, t, d, s + t)
    dq, dk, dv = interpreted(kernel, q, k, v, do, causal, seed=s)
    _, _, *want = reference(q, k, v, do, bool(causal))
    for got, expected in zip((dq, dk, dv), want):
        assert np.isfinite(np.asarray(got, np.float64)).all()
        assert relative_error(got, expected) < 1e-2


def test_interpreter_agrees_across_schedules(backward):
    """Several CTAs add into the same dQ rows (a query block meets every key block): in any order
    of the CTAs, warps and rings the gradients agree to f32 rounding."""
    kernel, d = backward
    q, k, v, do = inputs(2, 1, 140, 260, d, 3)
    runs = [interpreted(kernel, q, k, v, do, 1, seed=seed, explore=4, ctas=ctas) for seed, ctas in ((1, 3), (2, 2))]
    for a, b in zip(*runs):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=1e-5, atol=1e-6)


# ---- the H100 -------------------------------------------------------------------------------------

def on_gpu(q, k, v, do, causal: int):
    """Forward (examples/attention_sm90.tma) then backward on the GPU: (dQ, dK, dV) as numpy."""
    torch = pytest.importorskip("torch")
    (bh, s, d) = q.shape
    forward, prep, backward = (compiled(role, d) for role in ("forward", "prep", "backward"))
    cq, ck, cv, cdo = (torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16) for x in (q, k, v, do))
    scale = np.float32(1 / np.sqrt(d))
    o = torch.empty_like(cq)
    lse, delta = (torch.empty(bh, -(-s // 4) * 4, device="cuda")[:, :s] for _ in range(2))   # 16-byte rows
    forward(cq, ck, cv, scale, np.int32(causal), lse, o)
    dq = torch.full((bh, s, d), float("nan"), device="cuda")
    prep(o, cdo, delta, dq)                      # delta, and dq zeroed
    dk, dv = torch.empty_like(ck), torch.empty_like(cv)
    backward(cq, ck, cv, cdo, lse, delta, scale, np.int32(causal), dq, dk, dv)
    torch.cuda.synchronize()
    return dq.bfloat16().float().cpu().numpy(), dk.float().cpu().numpy(), dv.float().cpu().numpy()


def flash_gradients(q, k, v, do, causal: int):
    """SDPA FLASH's bf16 gradients, K/V heads repeated per query head and summed back."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    group = q.shape[0] // k.shape[0]
    cq, ck, cv, cdo = (torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)[None] for x in (q, k, v, do))
    ck, cv = (x.repeat_interleave(group, dim=1).requires_grad_() for x in (ck, cv))
    cq.requires_grad_()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(cq, ck, cv, is_causal=bool(causal))
    dq, dk, dv = torch.autograd.grad(out, (cq, ck, cv), cdo)
    dk, dv = (x[0].unflatten(0, (-1, group)).float().sum(1) for x in (dk, dv))
    return dq[0].float().cpu().numpy(), dk.cpu().numpy(), dv.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("bh,bhkv,s", [(2, 2, 1), (4, 4, 77), (4, 1, 1000), (8, 1, 4099), (8, 2, 1000)],
                         ids=["mha_s1", "mha_s77", "gqa4_s1000", "gqa8_s4099", "gqa4_s1000_8heads"])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("d", [64, 128], ids=["hd64", "hd128"])
def test_h100_gradients_are_as_accurate_as_flash(bh, bhkv, s, causal, d):
    q, k, v, do = inputs(bh, bhkv, s, s, d, 5 * s + bh)
    _, _, *want = reference(q, k, v, do, bool(causal))
    ours = on_gpu(q, k, v, do, causal)
    flash = flash_gradients(q, k, v, do, causal)
    for name, got, peer, expected in zip(("dq", "dk", "dv"), ours, flash, want):
        assert np.isfinite(got).all(), name
        scale = np.linalg.norm(expected)
        if scale < 1e-6:     # one key: softmax's gradient vanishes; both must be ~0
            assert np.abs(got).max() < 1e-3, name
            continue
        mine, theirs = relative_error(got, expected), relative_error(peer, expected)
        assert mine <= 1.02 * theirs + 1e-4, (name, mine, theirs)


# ---- the prep kernel: delta = rowsum(dO ∘ O), dq zeroed -----------------------------------------

@pytest.mark.parametrize("d", [64, 128])
def test_prep_interpreted_matches_float64_and_zeroes_dq(d):
    prep = compiled("prep", d)
    rng = np.random.default_rng(d)
    o, do = (rng.standard_normal((3, 77, d)).astype(BF16) for _ in range(2))
    delta, dq = padded(3, 77), rng.standard_normal((3, 77, d)).astype(np.float32)
    prep.interpret(o, do, delta, dq, seed=1, explore=2)
    np.testing.assert_allclose(delta, (o.astype(np.float64) * do.astype(np.float64)).sum(-1), rtol=1e-5, atol=1e-5)
    assert not dq.any()


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("s", [1, 77, 4099])
def test_h100_prep_matches_float64_and_zeroes_dq(d, s):
    torch = pytest.importorskip("torch")
    prep = compiled("prep", d)
    o, do = (torch.randn(5, s, d, device="cuda").bfloat16() for _ in range(2))
    delta = torch.full((5, -(-s // 4) * 4), float("nan"), device="cuda")[:, :s]
    dq = torch.randn(5, s, d, device="cuda")
    prep(o, do, delta, dq)
    torch.cuda.synchronize()
    want = (o.double() * do.double()).sum(-1)
    assert torch.allclose(delta.double(), want, rtol=1e-5, atol=1e-4)
    assert not dq.any()


# ---- the deterministic dQ: attention_bwd_dq -------------------------------------------------------

def interpreted_dq(d: int, q, k, v, do, causal: int, seed: int, explore: int = 1, ctas: int | None = None):
    """attention_bwd_dq on the interpreter from float64's O (rounded to bf16) and LSE: dQ (bf16)."""
    o, lse, *_ = reference(q, k, v, do, bool(causal))
    bh, s, _ = q.shape
    lse_in, delta = padded(bh, s), padded(bh, s)
    lse_in[...] = lse
    delta[...] = (do.astype(np.float64) * o.astype(BF16).astype(np.float64)).sum(-1)
    dq = np.full(q.shape, np.nan, BF16)
    compiled("dq", d).interpret(q, k, v, do, lse_in, delta, np.float32(1 / np.sqrt(d)), np.int32(causal), dq,
                                seed=seed, explore=explore, **({"ctas": ctas} if ctas else {}))
    return dq


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("bh,bhkv,s,t,causal", [
    (2, 2, 77, 150, 0), (2, 1, 130, 130, 1), (4, 1, 5, 70, 1), (4, 2, 150, 77, 1),
], ids=["mha", "gqa2_causal", "gqa4_causal", "gqa2_causal_s_gt_t"])
def test_deterministic_dq_interpreted_matches_float64(d, bh, bhkv, s, t, causal):
    q, k, v, do = inputs(bh, bhkv, s, t, d, s + t + d)
    dq = interpreted_dq(d, q, k, v, do, causal, seed=s)
    _, _, want, _, _ = reference(q, k, v, do, bool(causal))
    assert np.isfinite(np.asarray(dq, np.float64)).all()
    assert relative_error(dq, want) < 1e-2


def test_deterministic_dq_is_the_same_bits_in_every_schedule():
    """Each query block's dQ is one CTA's sum in key order: any order of the CTAs, warps and
    rings gives the same bits (the reduce-add backward agrees only to rounding)."""
    q, k, v, do = inputs(2, 1, 140, 260, 64, 3)
    runs = [interpreted_dq(64, q, k, v, do, 1, seed=seed, explore=3, ctas=ctas) for seed, ctas in ((1, 3), (2, 2))]
    assert np.array_equal(runs[0].view(np.int16), runs[1].view(np.int16))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128], ids=["hd64", "hd128"])
def test_h100_deterministic_gradients_repeat_bitwise_and_are_as_accurate(d, causal):
    """tmalang.attention_backward on torch tensors, deterministic=True at GQA 4, S 1000 and 4099:
    two runs give the same bits of dQ, dK and dV; they and the reduce-add run are as accurate
    against float64 as FLASH's."""
    torch = pytest.importorskip("torch")
    for bh, bhkv, s in ((4, 1, 1000), (8, 2, 4099)):
        q, k, v, do = inputs(bh, bhkv, s, s, d, 7 * s + d)
        o, lse, *want = reference(q, k, v, do, causal)
        q4, k4, v4, do4 = (torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)[None] for x in (q, k, v, do))
        o4 = torch.from_numpy(o.astype(BF16).view(np.int16)).cuda().view(torch.bfloat16)[None]
        lse4 = torch.from_numpy(lse.astype(np.float32)).cuda()[None]
        runs = [tmalang.attention_backward(q4, k4, v4, o4, lse4, do4, causal=causal, deterministic=deterministic)
                for deterministic in (True, True, False)]
        torch.cuda.synchronize()
        flash = flash_gradients(q, k, v, do, int(causal))
        for name, first, second, loose, peer, expected in zip(("dq", "dk", "dv"), *runs, flash, want):
            assert torch.equal(first.view(torch.int16), second.view(torch.int16)), name
            for got in (first, loose):
                error = relative_error(got[0].float().cpu().numpy(), expected)
                assert error <= 1.02 * relative_error(peer, expected) + 1e-4, name


@pytest.mark.parametrize("d", [64, 128])
def test_without_dq_the_backward_leaves_dq_alone_and_gives_the_same_dk_dv(d):
    """attention_bwd<WITH_DQ = 0> (the deterministic backward's dK/dV): dq is not written, and dK,
    dV are the bits the full kernel writes; attention_bwd_prep<ZERO = 0> writes delta alone."""
    q, k, v, do = inputs(2, 1, 77, 150, d, 11)
    full = interpreted(compiled("backward", d), q, k, v, do, 1, seed=1)
    o, lse, *_ = reference(q, k, v, do, True)
    lse_in, delta = padded(2, 77), padded(2, 77)
    lse_in[...] = lse
    delta[...] = (do.astype(np.float64) * o.astype(BF16).astype(np.float64)).sum(-1)
    dq = np.full((2, 77, d), np.nan, np.float32)
    dk, dv = np.full((1, 150, d), np.nan, BF16), np.full((1, 150, d), np.nan, BF16)
    compiled("dkdv", d).interpret(q, k, v, do, lse_in, delta, np.float32(1 / np.sqrt(d)), np.int32(1), dq, dk, dv, seed=2)
    assert np.isnan(dq).all()
    assert np.array_equal(dk.view(np.int16), full[1].view(np.int16)) and np.array_equal(dv.view(np.int16), full[2].view(np.int16))
    untouched = np.full((2, 77, d), 7.0, np.float32)
    fresh = padded(2, 77)
    compiled("delta", d).interpret(o.astype(BF16), do, fresh, untouched)
    assert (untouched == 7.0).all()
    np.testing.assert_allclose(fresh, (o.astype(BF16).astype(np.float64) * do.astype(np.float64)).sum(-1), rtol=1e-5, atol=1e-5)

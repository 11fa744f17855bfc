"""examples/attention_varlen_bwd_sm90.tma and tmalang.attention_varlen's backward: dQ, dK, dV of a
packed batch (contiguous keys), causal (bottom-right) or not, grouped-query heads, head dims 64
and 128.

Against float64 gradients computed sequence by sequence, at lengths that make every case of the
kernels' windows: one-row sequences, a sequence with no query rows (its keys get zero
gradients), key tiles and query blocks that straddle sequences, sequences longer than a tile,
len_k > len_q under causal (keys every row sees). On the interpreter over schedules and CTA counts
(every gradient written by the one CTA that owns it: the same bits in any order), through ptxas
without spills, and on the GPU, where torch autograd through tmalang.attention_varlen must match
float64 as closely as SDPA FLASH's bf16 gradients do on the padded batch.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.contract.errors import LaunchError
from tmalang.library.attention_kernels import kernel

BF16 = ml_dtypes.bfloat16


def offsets(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def operands(lens_q, lens_k, h, hkv, d, seed):
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((sum(lens_q), h, d)).astype(BF16) for _ in range(2))
    k, v = (rng.standard_normal((sum(lens_k), hkv, d)).astype(BF16) for _ in range(2))
    return q, k, v, do, offsets(lens_q), offsets(lens_k)


def reference(q, k, v, do, cu_q, cu_k, causal: bool):
    """float64 (dQ, dK, dV), one sequence at a time, from bf16 O as the forward writes it."""
    q, k, v, do = (x.astype(np.float64) for x in (q, k, v, do))
    group = q.shape[1] // k.shape[1]
    scale = 1 / np.sqrt(q.shape[-1])
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if rows.stop == rows.start:
            continue
        qs, gs = q[rows].transpose(1, 0, 2), do[rows].transpose(1, 0, 2)                 # [H, n, D]
        ks, vs = (np.repeat(x[keys].transpose(1, 0, 2), group, 0) for x in (k, v))       # [H, m, D]
        s = qs @ ks.transpose(0, 2, 1) * scale
        n, m = s.shape[1:]
        if causal:
            s = np.where(np.arange(m)[None, :] > np.arange(n)[:, None] + (m - n), -np.inf, s)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = (p @ vs).astype(BF16).astype(np.float64)
        ds = p * (gs @ vs.transpose(0, 2, 1) - (gs * o).sum(-1, keepdims=True)) * scale
        dq[rows] = (ds @ ks).transpose(1, 0, 2)
        dk[keys] = (ds.transpose(0, 2, 1) @ qs).reshape(k.shape[1], group, m, -1).sum(1).transpose(1, 0, 2)
        dv[keys] = (p.transpose(0, 2, 1) @ gs).reshape(k.shape[1], group, m, -1).sum(1).transpose(1, 0, 2)
    return dq, dk, dv


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("role", ["varlen_dkdv", "varlen_dq"])
def test_ptxas_assembles_them_without_spills(role, d):
    stats = ptxas.assemble(kernel(role, d).ptx, "sm_90a")[1]
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


CASES = {   # (lens_q, lens_k, H, HKV, causal)
    "mha": ([1, 77, 130, 5], [1, 77, 130, 5], 2, 2, False),
    "gqa2-causal": ([70, 1, 150], [90, 3, 150], 4, 2, True),
    "gqa4-no-rows": ([40, 0, 100], [50, 20, 100], 4, 1, False),
    "causal-one-key": ([1, 200], [1, 230], 2, 1, True),
}


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", list(CASES))
def test_the_interpreter_matches_float64(name, d):
    lens_q, lens_k, h, hkv, causal = CASES[name]
    q, k, v, do, cu_q, cu_k = operands(lens_q, lens_k, h, hkv, d, d + len(name))
    o, lse = tmalang.attention_varlen(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
    grads = tmalang.attention_varlen_backward(q, k, v, o, lse, do, cu_q, cu_k, causal=causal)
    for label, got, arg, want in zip(("dq", "dk", "dv"), grads, (q, k, v), reference(q, k, v, do, cu_q, cu_k, causal)):
        assert got.shape == arg.shape and got.dtype == arg.dtype, label
        assert np.isfinite(np.asarray(got, np.float64)).all(), label
        assert relative_error(got, want) < 1e-2, (label, relative_error(got, want))
    if sum(lens_q) < sum(lens_k) and 0 in lens_q:      # keys no row sees get zero gradients
        b = lens_q.index(0)
        keys = slice(int(cu_k[b]), int(cu_k[b + 1]))
        assert not np.asarray(grads[1][keys], np.float64).any() and not np.asarray(grads[2][keys], np.float64).any()


def test_every_schedule_writes_the_same_bits():
    """No reduce-add: each gradient row is written once by the CTA that owns it, in key order."""
    from tmalang.library import attention_varlen_bwd as bwd

    lens_q, lens_k, h, hkv, causal = CASES["gqa2-causal"]
    q, k, v, do, cu_q, cu_k = operands(lens_q, lens_k, h, hkv, 64, 3)
    o, lse = tmalang.attention_varlen(q, k, v, cu_q, cu_k, causal=causal, return_lse=True)
    runs = []
    for seed, ctas in ((1, 3), (7, 2)):
        original = kernel
        try:
            bwd.kernel = lambda role, d, page=1: _Seeded(original(role, d, page), seed, ctas)
            runs.append(bwd.backward(q, k, v, o, lse, do, cu_q, cu_k, causal, 1 / 8))
        finally:
            bwd.kernel = original
    for a, b in zip(*runs):
        assert np.array_equal(a.view(np.int16), b.view(np.int16))


class _Seeded:
    """A kernel whose interpret() runs with a given schedule seed and CTA count."""

    def __init__(self, compiled, seed, ctas):
        self.compiled, self.seed, self.ctas = compiled, seed, ctas

    def interpret(self, *args):
        return self.compiled.interpret(*args, seed=self.seed, explore=2, ctas=self.ctas)


def test_a_paged_cache_needing_a_gradient_is_refused():
    torch = pytest.importorskip("torch")
    q = torch.zeros(10, 2, 64, dtype=torch.bfloat16, requires_grad=True)
    k = torch.zeros(1, 64, 1, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 10], dtype=torch.int32)
    with pytest.raises(LaunchError, match="contiguous keys"):
        tmalang.attention_varlen(q, k, k, cu, cu, block_table=torch.zeros(1, 1, dtype=torch.int32))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("hkv", [8, 2], ids=["mha", "gqa4"])
def test_autograd_on_the_gpu_matches_float64(hkv, d, causal):
    """Lengths 1, 77, 1000, 4099 and 5 in one batch, through torch autograd."""
    torch = pytest.importorskip("torch")
    lens = [1, 77, 1000, 4099, 5]
    q, k, v, do, cu_q, cu_k = operands(lens, lens, 8, hkv, d, d + hkv)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.bfloat16)
    tq, tk, tv = (device(x).requires_grad_() for x in (q, k, v))
    o = tmalang.attention_varlen(tq, tk, tv, torch.from_numpy(cu_q).cuda(), torch.from_numpy(cu_k).cuda(), causal=causal)
    grads = torch.autograd.grad(o, (tq, tk, tv), device(do))
    for label, got, want in zip(("dq", "dk", "dv"), grads, reference(q, k, v, do, cu_q, cu_k, causal)):
        got = got.float().cpu().numpy()
        assert np.isfinite(got).all(), label
        assert relative_error(got, want) < 1e-2, (label, relative_error(got, want))


@pytest.mark.parametrize("causal", [False, True])
def test_keys_past_the_last_sequence_get_zero_gradients(causal):
    """k and v may hold more rows than cu_seqlens_k's last offset (the forward reads only the
    offsets' keys): those keys belong to no sequence, no row sees them, and their dK and dV are 0;
    the rest are the gradients of the batch without them."""
    lens_q, lens_k = [70, 30], [90, 40]
    q, k, v, do, cu_q, cu_k = operands(lens_q, lens_k, 2, 1, 64, 5)
    extra = np.random.default_rng(1).standard_normal((150, 1, 64)).astype(BF16)
    k_all, v_all = np.concatenate([k, extra]), np.concatenate([v, -extra])
    o, lse = tmalang.attention_varlen(q, k_all, v_all, cu_q, cu_k, causal=causal, return_lse=True)
    dq, dk, dv = tmalang.attention_varlen_backward(q, k_all, v_all, o, lse, do, cu_q, cu_k, causal=causal)
    assert not np.asarray(dk[130:], np.float64).any() and not np.asarray(dv[130:], np.float64).any()
    for got, want in zip((dq, dk[:130], dv[:130]), reference(q, k, v, do, cu_q, cu_k, causal)):
        assert relative_error(got, want) < 1e-2

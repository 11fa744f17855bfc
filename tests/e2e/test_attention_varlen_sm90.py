"""examples/attention_varlen_sm90.tma and tmalang.attention_varlen: attention over a packed batch
of sequences of any lengths (FlashAttention's varlen layout), causal (bottom-right aligned) or
not, grouped-query heads, head dims 64 and 128, keys contiguous or in a paged cache (pages of 16,
32, 48, 64, 128 and 256 rows, in shuffled order, with unused pages and table entries).

Against a float64 reference computed sequence by sequence: on the interpreter over schedules and
CTA counts at small odd lengths (one-row sequences, tiles that straddle sequences, sequences
longer than a tile), through ptxas without spills, and on the GPU at lengths 1, 77, 1000 and 4099
in one batch with GQA ratios 1, 4 and 8, contiguous and paged. The library's refusals: offsets
that do not describe the tensors, a row with no key, pages the kernel cannot read whole, a block
table that does not name each sequence's pages.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.contract.errors import LaunchError
from tmalang.library.attention_kernels import kernel
from tmalang.library.attention_varlen_kernels import windows

BF16 = ml_dtypes.bfloat16


def offsets(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def operands(lens_q, lens_k, h, hkv, d, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((sum(lens_q), h, d)).astype(BF16)
    k, v = (rng.standard_normal((sum(lens_k), hkv, d)).astype(BF16) for _ in range(2))
    return q, k, v, offsets(lens_q), offsets(lens_k)


def reference(q, k, v, cu_q, cu_k, causal: bool, scale: float):
    """float64 (O [TQ, H, D], LSE [H, TQ]), one sequence at a time."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    o, lse = np.zeros(q.shape), np.zeros((q.shape[1], q.shape[0]))
    for b in range(len(cu_q) - 1):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        qs, ks, vs = q[rows].transpose(1, 0, 2), k[keys].transpose(1, 0, 2), v[keys].transpose(1, 0, 2)
        ks, vs = np.repeat(ks, group, 0), np.repeat(vs, group, 0)
        s = qs @ ks.transpose(0, 2, 1) * scale
        if causal:   # bottom-right: row i of n sees keys up to i + (m - n)
            n, m = s.shape[1:]
            s = np.where(np.arange(m)[None, :] > np.arange(n)[:, None] + (m - n), -np.inf, s)
        top = s.max(-1, keepdims=True)
        p = np.exp(s - top)
        total = p.sum(-1, keepdims=True)
        o[rows] = (p / total @ vs).transpose(1, 0, 2)
        lse[:, rows] = (top + np.log(total))[..., 0]
    return o, lse


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@pytest.mark.parametrize("d,page", [(64, 1), (128, 1), (128, 16), (64, 32), (128, 48)])
def test_ptxas_assembles_it_without_spills(d, page):
    stats = ptxas.assemble(kernel("varlen", d, page).ptx, "sm_90a")[1]
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


CASES = [([1, 77, 130], [1, 77, 130], 4, 1, 64, True),        # MQA; a one-row sequence, a straddled tile
         ([40, 1, 300], [100, 1, 333], 8, 2, 128, True),      # longer keys than queries, bottom-right
         ([129, 2], [129, 700], 4, 4, 64, False),
         ([5, 200, 3], [300, 7, 50], 2, 2, 128, False)]


@pytest.mark.parametrize("lens_q,lens_k,h,hkv,d,causal", CASES, ids=["mqa-causal", "gqa4-hd128-causal", "mha",
                                                                      "hd128"])
def test_the_interpreter_matches_float64_across_schedules(lens_q, lens_k, h, hkv, d, causal):
    q, k, v, cu_q, cu_k = operands(lens_q, lens_k, h, hkv, d, sum(lens_q) + d)
    scale = 1 / np.sqrt(d)
    want_o, want_lse = reference(q, k, v, cu_q, cu_k, causal, scale)
    lo, hi = windows(cu_q, cu_k, q.shape[0], causal)
    for seed, ctas in ((0, 1), (1, 3)):
        o = np.full(q.shape, np.nan, BF16)
        lse = np.full((h, -(-q.shape[0] // 4) * 4), np.nan, np.float32)[:, :q.shape[0]]
        pages = np.arange(k.shape[0], dtype=np.int32)     # contiguous keys: the identity table, P = 1
        kernel("varlen", d).interpret(q, k, v, pages, lo, hi, lo.astype(np.float32), hi.astype(np.float32),
                                      np.float32(scale), lse, o, seed=seed, explore=2, ctas=ctas)
        assert relative_error(o, want_o) < 1e-2
        np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-4)


def test_the_library_call_on_numpy_arrays():
    q, k, v, cu_q, cu_k = operands([3, 90], [3, 90], 4, 2, 64, 9)
    o, lse = tmalang.attention_varlen(q, k, v, cu_q, cu_k, causal=True, return_lse=True)
    want_o, want_lse = reference(q, k, v, cu_q, cu_k, True, 1 / 8)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (4, 93)
    assert relative_error(o, want_o) < 1e-2
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-4)


def paged_cache(k, v, cu_k, page: int, seed: int):
    """k and v [TK, HKV, D] as a paged cache [pages, P, HKV, D] in shuffled page order, with spare
    pages of noise and a block table [B, pages] whose unused entries are -1."""
    rng = np.random.default_rng(seed)
    used = -(-np.diff(cu_k) // page)
    count = int(used.sum()) + 3
    order = rng.permutation(count)
    caches = [rng.standard_normal((count, page, *k.shape[1:])).astype(BF16) for _ in range(2)]
    table = np.full((len(used), int(used.max()) + 2), -1, np.int32)
    taken = 0
    for b, n in enumerate(used):
        for j in range(n):
            table[b, j] = order[taken]
            taken += 1
            rows = slice(cu_k[b] + j * page, min(cu_k[b] + (j + 1) * page, cu_k[b + 1]))
            for cache, x in zip(caches, (k, v)):
                cache[table[b, j], :rows.stop - rows.start] = x[rows]
    return (*caches, table)


@pytest.mark.parametrize("d,page,causal,hkv", [(64, 128, True, 2), (128, 64, False, 1), (64, 64, False, 4),
                                               (128, 256, True, 4), (64, 16, True, 2), (128, 32, False, 1),
                                               (128, 48, True, 2)],
                         ids=["hd64-p128-causal", "hd128-p64", "hd64-p64", "hd128-p256-causal", "hd64-p16-causal",
                              "hd128-p32", "hd128-p48-causal"])
def test_a_paged_cache_matches_float64_on_the_interpreter(d, page, causal, hkv):
    q, k, v, cu_q, cu_k = operands([3, 90, 130], [3, 200, 140], 4, hkv, d, page + d)
    k_cache, v_cache, table = paged_cache(k, v, cu_k, page, d)
    o, lse = tmalang.attention_varlen(q, k_cache, v_cache, cu_q, cu_k, causal=causal, return_lse=True,
                                      block_table=table)
    want_o, want_lse = reference(q, k, v, cu_q, cu_k, causal, 1 / np.sqrt(d))
    assert relative_error(o, want_o) < 1e-2
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-4)


def test_pages_the_kernel_cannot_read_are_refused():
    q, k, v, cu_q, cu_k = operands([6, 5], [70, 9], 2, 1, 64, 1)
    k_cache, v_cache, table = paged_cache(k, v, cu_k, 64, 1)
    with pytest.raises(LaunchError, match="multiple of 16 rows"):
        tmalang.attention_varlen(q, k_cache[:, :24], v_cache[:, :24], cu_q, cu_k, block_table=table)
    bad = table.copy()
    bad[0, 1] = k_cache.shape[0]
    with pytest.raises(LaunchError, match="sequence 0 has 70 keys, 2 pages"):
        tmalang.attention_varlen(q, k_cache, v_cache, cu_q, cu_k, block_table=bad)
    with pytest.raises(LaunchError, match="int32"):
        tmalang.attention_varlen(q, k_cache, v_cache, cu_q, cu_k, block_table=table.astype(np.int64))


@pytest.mark.parametrize("cu_q,cu_k,causal,message", [
    ([0, 3, 5], [0, 4, 6], False, "0 to q's 6 rows"),
    ([0, 3, 6], [0, 4, 4], False, "sequence 1 has 3 query rows and 0 keys"),
    ([0, 3, 6], [0, 2, 6], True, "sequence 0 has 3 query rows and 2 keys"),
    ([0, 4, 3, 6], [0, 4, 5, 6], False, "sequence 1 has -1 query rows"),
    ([0, 6], [0, 3, 6], False, "must both hold B"),
], ids=["end", "no-keys", "causal-short", "backwards", "counts"])
def test_offsets_that_do_not_fit_are_refused(cu_q, cu_k, causal, message):
    q, k, v, _, _ = operands([6], [6], 2, 1, 64, 1)
    with pytest.raises(LaunchError, match=message):
        tmalang.attention_varlen(q, k, v, np.array(cu_q, np.int32), np.array(cu_k, np.int32), causal=causal)


def test_operands_that_do_not_fit_are_refused():
    q, k, v, cu_q, cu_k = operands([6], [6], 3, 2, 64, 1)
    with pytest.raises(LaunchError, match="do not divide"):
        tmalang.attention_varlen(q, k, v, cu_q, cu_k)
    with pytest.raises(LaunchError, match=r"q is \[total, heads, head dim\]"):
        tmalang.attention_varlen(q[None], k, v, cu_q, cu_k)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hkv,page", [(8, 0), (2, 0), (1, 0), (2, 64), (2, 256), (2, 16), (1, 32)],
                         ids=["mha", "gqa4", "gqa8", "gqa4-p64", "gqa4-p256", "gqa4-p16", "gqa8-p32"])
def test_the_gpu_matches_float64(d, causal, hkv, page):
    """Lengths 1, 77, 1000, 4099 and 5 in one batch, the keys contiguous or paged (page 0:
    contiguous; else a shuffled cache of `page`-row pages)."""
    torch = pytest.importorskip("torch")
    lens = [1, 77, 1000, 4099, 5]
    q, k, v, cu_q, cu_k = operands(lens, lens, 8, hkv, d, d + hkv + page)
    want_o, want_lse = reference(q, k, v, cu_q, cu_k, causal, 1 / np.sqrt(d))
    table = None
    if page:
        k, v, table = paged_cache(k, v, cu_k, page, page)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.bfloat16)
    o, lse = tmalang.attention_varlen(device(q), device(k), device(v), torch.from_numpy(cu_q).cuda(),
                                      torch.from_numpy(cu_k).cuda(), causal=causal, return_lse=True,
                                      block_table=None if table is None else torch.from_numpy(table).cuda())
    torch.cuda.synchronize()
    got = o.float().cpu().numpy()
    assert np.isfinite(got).all()
    assert relative_error(got, want_o) < 1e-2
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, rtol=0, atol=1e-3)


@pytest.mark.gpu
def test_a_packed_batch_replays_in_a_cuda_graph():
    """Captured once with check=False, then replayed with the same packed rows split into other
    sequences (the offsets updated in place): each replay agrees with float64 at its split."""
    torch = pytest.importorskip("torch")
    splits = [[1, 77, 1000, 4099, 5], [2000, 1, 3000, 100, 81], [5178, 1, 1, 1, 1]]
    q, k, v, cu, _ = operands(splits[0], splits[0], 8, 2, 128, 11)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.bfloat16)
    dq, dk, dv = device(q), device(k), device(v)
    offsets = torch.from_numpy(cu).cuda()

    def call():
        return tmalang.attention_varlen(dq, dk, dv, offsets, offsets, causal=True, check=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    for lens in splits:
        now = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        offsets.copy_(torch.from_numpy(now))
        graph.replay()
        torch.cuda.synchronize()
        want_o, _ = reference(q, k, v, now, now, True, 1 / np.sqrt(128))
        assert relative_error(out.float().cpu().numpy(), want_o) < 1e-2, lens

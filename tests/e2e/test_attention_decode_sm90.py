"""examples/attention_decode_sm90.tma and tmalang.attention_decode: a few new query rows per
sequence against a KV cache, the keys split into chunks that CTAs take in parallel, combined after
(FlashDecoding). Contiguous and paged caches, causal (bottom-right) or not, MQA and GQA, head dims
64 and 128, chunks that end inside a sequence and chunks past its end.

Against a float64 reference on the interpreter (small caches, forced small chunks), through ptxas
without spills, and on the GPU with 1 and 8 new rows against caches of 4096 to 32768 keys.
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


def operands(b, sq, h, hkv, d, t, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, sq, h, d)).astype(BF16)
    k, v = (rng.standard_normal((b, t, hkv, d)).astype(BF16) for _ in range(2))
    return q, k, v


def reference(q, k, v, lengths, causal: bool):
    """float64 (O [B, SQ, H, D], LSE [B, H, SQ]): new row s of SQ sees keys below len - SQ + s + 1."""
    b, sq, h, d = q.shape
    group = h // k.shape[2]
    o, lse = np.zeros(q.shape), np.zeros((b, h, sq))
    for i, n in enumerate(lengths):
        keys = np.repeat(k[i, :n].astype(np.float64), group, 1).transpose(1, 0, 2)        # [H, n, D]
        values = np.repeat(v[i, :n].astype(np.float64), group, 1).transpose(1, 0, 2)
        logits = q[i].astype(np.float64).transpose(1, 0, 2) @ keys.transpose(0, 2, 1) / np.sqrt(d)   # [H, SQ, n]
        if causal:
            logits = np.where(np.arange(n)[None, None, :] > n - sq + np.arange(sq)[None, :, None], -np.inf, logits)
        top = logits.max(-1, keepdims=True)
        p = np.exp(logits - top)
        o[i] = (p / p.sum(-1, keepdims=True) @ values).transpose(1, 0, 2)
        lse[i] = (top + np.log(p.sum(-1, keepdims=True)))[..., 0]
    return o, lse


def paged(k, v, lengths, page: int, seed: int):
    """The caches as shuffled pages of `page` rows, spare pages of noise, unused table entries -1."""
    rng = np.random.default_rng(seed)
    used = [-(-n // page) for n in lengths]
    count = sum(used) + 2
    order = rng.permutation(count)
    caches = [rng.standard_normal((count, page, *k.shape[2:])).astype(BF16) for _ in range(2)]
    table = np.full((len(lengths), max(used) + 1), -1, np.int32)
    taken = 0
    for b, n in enumerate(used):
        for j in range(n):
            table[b, j] = order[taken]
            taken += 1
            rows = min(page, lengths[b] - j * page)
            for cache, x in zip(caches, (k, v)):
                cache[table[b, j], :rows] = x[b, j * page:j * page + rows]
    return (*caches, table)


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@pytest.mark.parametrize("d,page", [(64, 1), (128, 1), (128, 64), (64, 256), (128, 16), (64, 32)])
def test_ptxas_assembles_it_without_spills(d, page):
    stats = ptxas.assemble(kernel("decode", d, page).ptx, "sm_90a")[1]
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats


CASES = [(2, 1, 8, 1, 128, 700, [700, 33], False, 0, 256),      # MQA, one row, a short sequence
         (3, 4, 8, 2, 64, 1000, [999, 5, 300], True, 0, 128),     # GQA 4 x 4 rows, chunks past the end
         (2, 8, 8, 8, 128, 300, [300, 129], True, 64, 128),       # MHA, 8 rows, pages of 64
         (2, 2, 16, 2, 64, 600, [1, 600], False, 256, 256),       # GQA 8, one key, pages of 256
         (2, 1, 8, 2, 128, 200, [200, 37], True, 16, 64),         # GQA 4, pages of 16
         (2, 2, 8, 1, 64, 160, [150, 3], False, 32, None)]        # MQA, pages of 32, the call's chunks


@pytest.mark.parametrize("b,sq,h,hkv,d,t,lengths,causal,page,chunk", CASES,
                         ids=["mqa-1row", "gqa4-causal", "mha-8rows-p64", "gqa8-p256", "gqa4-p16", "mqa-p32"])
def test_the_interpreter_matches_float64(b, sq, h, hkv, d, t, lengths, causal, page, chunk):
    q, k, v = operands(b, sq, h, hkv, d, t, t + d)
    want_o, want_lse = reference(q, k, v, lengths, causal)
    table = None
    if page:
        k, v, table = paged(k, v, lengths, page, t)
    o, lse = tmalang.attention_decode(q, k, v, np.array(lengths, np.int32), block_table=table, causal=causal,
                                      return_lse=True, chunk=chunk)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (b, h, sq)
    assert relative_error(o, want_o) < 1e-2
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=1e-4)


@pytest.mark.parametrize("change,message", [
    (dict(sq=9, h=8, hkv=1), "H / HKV · SQ <= 64"),
    (dict(lengths=[0, 5]), "sequence 0 has 0 keys"),
    (dict(lengths=[5, 200]), "sequence 1 has 200 keys"),
    (dict(causal=True, sq=4, lengths=[3, 5]), "4 at least"),
    (dict(chunk=100), "not a multiple of the key block 128"),
], ids=["rows", "no-keys", "past-the-cache", "causal-rows", "chunk"])
def test_calls_the_kernel_does_not_run_are_refused(change, message):
    call = dict(sq=1, h=8, hkv=2, lengths=[5, 9], causal=False, chunk=None) | change
    q, k, v = operands(2, call["sq"], call["h"], call["hkv"], 64, 100, 1)
    with pytest.raises(LaunchError, match=message):
        tmalang.attention_decode(q, k, v, np.array(call["lengths"], np.int32), causal=call["causal"],
                                 chunk=call["chunk"])


def test_pages_of_24_rows_are_refused():
    q, k, v = operands(2, 1, 8, 2, 64, 72, 1)
    k_cache, v_cache, table = paged(k, v, [40, 72], 24, 1)
    with pytest.raises(LaunchError, match="16·n rows"):
        tmalang.attention_decode(q, k_cache, v_cache, np.array([40, 64], np.int32), block_table=table)


@pytest.mark.gpu
@pytest.mark.parametrize("sq", [1, 8])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("page", [0, 128, 16], ids=["contiguous", "p128", "p16"])
def test_the_gpu_matches_float64(sq, d, page):
    """8 query heads over 1 K/V head (GQA 8), lengths 4096, 32768, 77 and 5000, causal."""
    torch = pytest.importorskip("torch")
    lengths = [4096, 32768, 77, 5000]
    q, k, v = operands(4, sq, 8, 1, d, 32768, sq + d + page)
    want_o, want_lse = reference(q, k, v, lengths, True)
    table = None
    if page:
        k, v, table = paged(k, v, lengths, page, d)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.bfloat16)
    o, lse = tmalang.attention_decode(device(q), device(k), device(v), torch.tensor(lengths, dtype=torch.int32).cuda(),
                                      block_table=None if table is None else torch.from_numpy(table).cuda(),
                                      causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert relative_error(o.float().cpu().numpy(), want_o) < 1e-2
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, rtol=0, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("page", [0, 64], ids=["contiguous", "p64"])
def test_a_decode_step_replays_in_a_cuda_graph(page):
    """A serving loop captures one decode step in a CUDA graph, then replays it as the sequences
    grow: the lengths tensor is updated in place between replays, and every replay must agree
    with float64 at the new lengths (nothing about the lengths may be baked in at capture)."""
    torch = pytest.importorskip("torch")
    q, k, v = operands(3, 2, 8, 2, 128, 1024, 7 + page)
    steps = [[100, 1000, 3], [101, 1001, 4], [640, 1024, 65]]
    k_cache, v_cache, table = paged(k, v, [1024] * 3, page, 7) if page else (k, v, None)

    def device(x):
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).cuda().view(torch.bfloat16)
    dq, dk, dv = device(q), device(k_cache), device(v_cache)
    dtable = None if table is None else torch.from_numpy(table).cuda()
    lengths = torch.tensor(steps[0], dtype=torch.int32, device="cuda")

    def step():
        return tmalang.attention_decode(dq, dk, dv, lengths, block_table=dtable, causal=True, check=False)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()                                  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for now in steps:
        lengths.copy_(torch.tensor(now, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want_o, _ = reference(q, k, v, now, True)
        assert relative_error(out.float().cpu().numpy(), want_o) < 1e-2, now

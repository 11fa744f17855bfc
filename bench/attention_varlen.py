"""Packed-batch (varlen) attention forward: tmalang.attention_varlen (examples/attention_varlen_sm90.tma)
against compiled flex_attention with a document mask over the packed rows, and against SDPA's
FLASH and CUDNN backends on a jagged nested tensor (where this torch supports them), in the same
run. bf16, 16 sequences of lengths from 1 to 8192 in one batch (len_q = len_k), causal and not,
head dims 64 and 128, multi-head and grouped-query; and tmalang reading the same keys from a paged
cache (pages of 64, 128, 256 rows in shuffled order), against the peers on contiguous keys.

FLOPs are Σ 4·H·L²·D over the sequences, halved when causal. Every contender's output is checked
against float32 SDPA (math backend) on the batch's first, a middle and last sequences first; a
peer that raises is recorded as unsupported, not timed. Each is timed three ways (bench/timing.py:
cold-L2 GPU time, warm-L2 CUDA-graph replay, host-inclusive eager calls). tmalang is timed as a
user calls it, the windows computed from the offsets in every call, without the host check of the
offsets (`check=False`: it copies B + 1 integers to the host, which a CUDA graph cannot hold).

    python bench/attention_varlen.py --out bench/results/attention-varlen-<date>-h100.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, arguments, first_runs, timed_row, write_report  # noqa: E402

LENGTHS = [1, 17, 100, 257, 500, 1000, 1500, 2048, 3000, 4099, 5000, 6000, 7000, 7777, 8000, 8192]
CASES = [(16, 16, 128, 0), (16, 16, 64, 0), (32, 8, 128, 0),   # (query heads, K/V heads, head dim, page)
         (16, 16, 128, 64), (16, 16, 64, 128), (32, 8, 128, 256),   # paged: tmalang reads a paged cache
         (16, 16, 128, 16)]                                         # 16-row pages: 16-key blocks

torch._dynamo.config.recompile_limit = 64
flex = torch.compile(flex_attention, dynamic=False)


def document_mask(cu: torch.Tensor, rows: int, causal: bool):
    """flex_attention's BlockMask over the packed rows: a key is seen by the rows of its sequence
    (and, causal, by those at or after it)."""
    doc = torch.repeat_interleave(torch.arange(cu.numel() - 1, device="cuda"), cu.diff(), output_size=rows)

    def same_document(b, h, q_idx, kv_idx):
        seen = doc[q_idx] == doc[kv_idx]
        return seen & (q_idx >= kv_idx) if causal else seen
    return create_block_mask(same_document, None, None, rows, rows, device="cuda")


def nested(x: torch.Tensor, cu: torch.Tensor) -> torch.Tensor:
    """[TQ, H, D] as a jagged nested tensor [B, H, j, D], as SDPA takes one. The length bounds
    are given, as a serving loop knows them: else SDPA reads them from the device in every call,
    which a CUDA graph cannot capture."""
    return torch.nested.nested_tensor_from_jagged(x, offsets=cu.long(), min_seqlen=min(LENGTHS),
                                                  max_seqlen=max(LENGTHS)).transpose(1, 2)


def sdpa_jagged(backend, cu, causal):
    def run(q, k, v):
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(nested(q, cu), nested(k, cu), nested(v, cu), is_causal=causal,
                                                 enable_gqa=k.shape[1] != q.shape[1])
        return out.transpose(1, 2).values()
    return run


def reference(q, k, v, cu, causal, sequences):
    """float32 SDPA (math) per chosen sequence, K/V heads repeated per query head."""
    group = q.shape[1] // k.shape[1]
    outs = []
    for b in sequences:
        rows = slice(int(cu[b]), int(cu[b + 1]))
        qs, ks, vs = (x[rows].transpose(0, 1).float() for x in (q, k, v))
        ks, vs = ks.repeat_interleave(group, 0), vs.repeat_interleave(group, 0)
        with sdpa_kernel(SDPBackend.MATH):
            outs.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal).transpose(0, 1).double())
    return outs


def paged_cache(k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, page: int):
    """k and v [TK, HKV, D] copied into a cache of `page`-row pages in shuffled order, and the
    block table [B, max pages] naming each sequence's."""
    lengths = cu.diff().tolist()
    used = [-(-n // page) for n in lengths]
    order = torch.randperm(sum(used), dtype=torch.int64).to(torch.int32).cuda()
    table = torch.full((len(used), max(used)), -1, device="cuda", dtype=torch.int32)
    caches = [torch.zeros(sum(used), page, *k.shape[1:], device="cuda", dtype=k.dtype) for _ in range(2)]
    taken, start = 0, 0
    for b, (n, pages) in enumerate(zip(lengths, used)):
        table[b, :pages] = order[taken:taken + pages]
        for j in range(pages):
            rows = min(page, n - j * page)
            for cache, x in zip(caches, (k, v)):
                cache[int(order[taken + j]), :rows] = x[start + j * page:start + j * page + rows]
        taken, start = taken + pages, start + n
    return (*caches, table)


def row(heads: int, kv_heads: int, d: int, page: int, causal: bool, samples: int) -> dict:
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    total = int(cu[-1])
    # drawn on the host: a peer's failed graph capture can leave the CUDA generator unusable
    sets = [tuple(torch.randn(total, n, d, dtype=torch.bfloat16).cuda() for n in (heads, kv_heads, kv_heads))
            for _ in range(2)]
    mask = document_mask(cu, total, causal)   # built once, as a model builds it once for its layers

    def flex_run(q, k, v):
        out = flex(*(x.transpose(0, 1)[None] for x in (q, k, v)), block_mask=mask, enable_gqa=kv_heads != heads)
        return out[0].transpose(0, 1)
    caches = [paged_cache(*x[1:], cu, page) for x in sets] if page else None

    def ours(i):
        if page:
            return tmalang.attention_varlen(sets[i][0], *caches[i][:2], cu, cu, causal=causal, check=False,
                                            block_table=caches[i][2])
        return tmalang.attention_varlen(*sets[i], cu, cu, causal=causal, check=False)
    runs = {"tmalang": ours,
            "flex": lambda i: flex_run(*sets[i]),
            "flash": lambda i: sdpa_jagged(SDPBackend.FLASH_ATTENTION, cu, causal)(*sets[i]),
            "cudnn": lambda i: sdpa_jagged(SDPBackend.CUDNN_ATTENTION, cu, causal)(*sets[i])}
    result = {"heads": heads, "kv_heads": kv_heads, "head_dim": d, "page": page, "causal": causal, "lengths": LENGTHS}
    checked = [0, len(LENGTHS) // 2, len(LENGTHS) - 1]
    want = reference(*sets[0], cu, causal, checked)

    def error_of(out):
        got = [out[int(cu[b]):int(cu[b + 1])].double() for b in checked]
        error = sum((g - w).norm() ** 2 for g, w in zip(got, want)) ** 0.5 / sum(w.norm() ** 2 for w in want) ** 0.5
        return error.item()
    first_runs(runs, result, error_of)
    flops = sum(4 * heads * n * n * d for n in LENGTHS) / (2 if causal else 1)
    return timed_row(runs, result, flops, samples, f"H={heads} HKV={kv_heads} D={d} page={page} causal={causal}")


def main() -> None:
    args = arguments()
    rows = []
    for h, hk, d, page in CASES:
        for causal in (False, True):
            rows.append(row(h, hk, d, page, causal, args.samples))
            report(args, rows)       # after every row: a run cut short keeps what it measured


def report(args, rows: list) -> None:
    write_report(args.out,
                 "varlen attention forward, bf16 (examples/attention_varlen_sm90.tma), 16 sequences of "
                 "1..8192 rows packed, vs compiled flex_attention (document mask) and SDPA FLASH/CUDNN on "
                 "jagged nested tensors",
                 f"{METHOD}; {args.samples} rounds; FLOPs Σ 4·H·L²·D, halved when causal; flex compiled per "
                 "case (dynamic=False), its block mask built outside the timing; tmalang timed through "
                 "tmalang.attention_varlen(check=False), windows (and with a page size, the packed page "
                 "list) computed in every call; paged rows: tmalang reads a paged cache of the same keys "
                 "in shuffled pages, the peers the contiguous keys", rows)


if __name__ == "__main__":
    main()

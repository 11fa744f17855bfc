"""Decoding attention: tmalang.attention_decode (examples/attention_decode_sm90.tma, split-KV with a
combine) against SDPA's FLASH, CUDNN and EFFICIENT backends and compiled flex_attention, in the
same run. bf16, 1 and 8 new query rows against caches of 4096 to 131072 keys, grouped-query heads
(32 over 8), head dims 64 and 128, contiguous caches (and paged for tmalang), every sequence the
full cache length (SDPA takes no per-sequence lengths), no causal mask (SDPA's is top-left).

Decoding is bound by reading the cache: the rate reported is the cache's bytes (K and V) per
second. Each contender's output is checked against float32 SDPA (math) on the first sequence
first; a peer that raises is recorded as unsupported. Timed three ways (bench/timing.py).

    python bench/attention_decode.py --out bench/results/attention-decode-<date>-h100.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.nn.attention.flex_attention import flex_attention  # noqa: E402

import tmalang  # noqa: E402
from tmalang.library.attention_kernels import DECODE  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, arguments, first_runs, timed_row, write_report  # noqa: E402

# (batch, new rows, query heads, K/V heads, head dim, cache length, page: 0 contiguous)
CASES = [(8, 1, 32, 8, 128, 4096, 0), (8, 8, 32, 8, 128, 4096, 0), (8, 1, 32, 8, 128, 16384, 0),
         (4, 1, 32, 8, 128, 65536, 0), (1, 1, 32, 8, 128, 131072, 0), (1, 8, 32, 8, 128, 131072, 0),
         (8, 1, 32, 8, 64, 16384, 0), (8, 1, 32, 8, 128, 16384, 128), (1, 8, 32, 8, 128, 131072, 256),
         (8, 1, 32, 8, 128, 16384, 16)]

torch._dynamo.config.recompile_limit = 64
flex = torch.compile(flex_attention, dynamic=False)


def sdpa(backend):
    def run(q, k, v):      # q [B, SQ, H, D], caches [B, T, HKV, D]
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 enable_gqa=k.shape[2] != q.shape[2])
        return out.transpose(1, 2)
    return run


def paged_cache(k: torch.Tensor, v: torch.Tensor, page: int):
    """[B, T, HKV, D] caches as pages [pages, P, HKV, D] in one shuffled order, and the block table."""
    b, t = k.shape[:2]
    per = t // page
    order = torch.randperm(b * per, device="cuda")
    caches = []
    for x in (k, v):
        cache = torch.empty(b * per, page, *x.shape[2:], device="cuda", dtype=x.dtype)
        cache[order] = x.reshape(b * per, page, *x.shape[2:])
        caches.append(cache)
    return (*caches, order.reshape(b, per).to(torch.int32))


def row(b, sq, h, hkv, d, t, page, samples) -> dict:
    sets = [(torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16),
             *(torch.randn(b, t, hkv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))) for _ in range(2)]
    lengths = torch.full((b,), t, device="cuda", dtype=torch.int32)
    caches = [paged_cache(x[1], x[2], page) for x in sets] if page else None

    def ours(i):
        if page:
            k_cache, v_cache, table = caches[i]
            return tmalang.attention_decode(sets[i][0], k_cache, v_cache, lengths, block_table=table, check=False)
        return tmalang.attention_decode(*sets[i], lengths, check=False)
    runs = {"tmalang": ours,
            "flash": lambda i: sdpa(SDPBackend.FLASH_ATTENTION)(*sets[i]),
            "cudnn": lambda i: sdpa(SDPBackend.CUDNN_ATTENTION)(*sets[i]),
            "efficient": lambda i: sdpa(SDPBackend.EFFICIENT_ATTENTION)(*sets[i]),
            "flex": lambda i: flex(*(x.transpose(1, 2) for x in sets[i]), enable_gqa=hkv != h).transpose(1, 2)}
    result = {"batch": b, "new_rows": sq, "heads": h, "kv_heads": hkv, "head_dim": d, "cache": t, "page": page}
    q, k, v = (x[:1].float() for x in sets[0])
    with sdpa_kernel(SDPBackend.MATH):
        reference = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(h // hkv, 1),
                                                   v.transpose(1, 2).repeat_interleave(h // hkv, 1)).transpose(1, 2)

    def error_of(out):
        return ((out[:1].double() - reference.double()).norm() / reference.double().norm()).item()
    first_runs(runs, result, error_of)
    cache_bytes = 2 * b * t * hkv * d * 2
    return timed_row(runs, result, cache_bytes, samples, f"B={b} SQ={sq} H={h}/{hkv} D={d} T={t} page={page}",
                     rate="cache_TBps", batch=max(3, int(2e10 // cache_bytes)))


def main() -> None:
    args = arguments(extra=lambda p: p.add_argument(
        "--config", default="", help="the decode kernel's constants, e.g. KB=64,OCC=2,AR=200 (attention_kernels.DECODE)"))
    for item in filter(None, args.config.split(",")):
        name, value = item.split("=")
        DECODE[name] = int(value)
    rows = []
    for case in CASES:
        rows.append(row(*case, args.samples))
        report(args, rows)       # after every row: a run cut short keeps what it measured


def report(args, rows: list) -> None:
    write_report(args.out,
                 "decoding attention, bf16 (examples/attention_decode_sm90.tma): 1 and 8 new rows against "
                 "caches of 4096..131072 keys, GQA 32/8, vs SDPA FLASH, CUDNN, EFFICIENT and compiled flex",
                 f"{METHOD}; {args.samples} rounds; rate: the cache's K and V bytes per second; tmalang through "
                 "tmalang.attention_decode(check=False), chunks chosen by the call, the combine included; "
                 f"paged rows: tmalang reads shuffled pages, the peers the contiguous cache; decode kernel {DECODE}", rows)


if __name__ == "__main__":
    main()

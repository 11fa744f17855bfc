"""Attention forward throughput: examples/attention_sm90.tma against torch's
scaled_dot_product_attention with the FLASH (FlashAttention-2) and CUDNN backends and against
flex_attention (torch.compile'd), in the same run. bf16 in and out, (B, H, S, D) with S = T,
causal and not; multi-head, and grouped-query (H query heads over HKV K/V heads; HKV = 1 is MQA).

FLOPs are 4·B·H·S·T·D (two GEMMs), halved when causal, as FlashAttention counts them. Every
contender's output is checked against float32 SDPA (math backend, K/V heads repeated per query
head) first; a peer that raises for a case (no GQA, say) is recorded as unsupported, not timed.
Each contender is timed three ways (bench/timing.py: cold-L2 GPU time, warm-L2 CUDA-graph
replay, host-inclusive eager calls), with tmalang's ratio to each peer and to the fastest peer
in each way.

    python bench/attention.py --out bench/results/attention-<date>-h100.json
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

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(4, 16, 4096, 128), (2, 16, 8192, 128), (4, 32, 4096, 64), (16, 16, 1024, 128), (2, 24, 3000, 128)]
# (shape, K/V heads): 32 query heads over 8 K/V heads (GQA) and over 1 (MQA)
GQA = [((4, 32, 4096, 128), 8), ((4, 32, 4096, 128), 1), ((4, 32, 4096, 64), 8), ((4, 32, 4096, 64), 1)]
KERNELS = {64: "flash_attention", 128: "flash_attention_hd128"}

# Specialised to each shape, as a model of fixed shapes gets it: one compilation per row, more
# than dynamo's default 8 before it silently falls back to eager (unfused, and far slower).
torch._dynamo.config.recompile_limit = 64
flex = torch.compile(flex_attention, dynamic=False)


def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx          # top-left aligned, as SDPA's is_causal


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return run


def ours(kernel):
    def run(q, k, v, causal, out):
        o, lse = out
        kernel(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), 1 / q.shape[-1] ** 0.5, int(causal),
               lse, o.flatten(0, 1))
    return run


def row(kernel, shape, kv_heads: int, causal: bool, samples: int) -> dict:
    b, h, s, d = shape
    sets = [tuple(torch.randn(b, n, s, d, device="cuda", dtype=torch.bfloat16) for n in (h, kv_heads, kv_heads))
            for _ in range(2)]
    o = torch.empty(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b * h, -(-s // 4) * 4, device="cuda")[:, :s]
    # built once outside the timing, as a model builds it once for all its layers
    mask = create_block_mask(causal_mask, None, None, s, s, device="cuda") if causal else None
    runs = {"flash": lambda i: sdpa(SDPBackend.FLASH_ATTENTION)(*sets[i], causal),
            "cudnn": lambda i: sdpa(SDPBackend.CUDNN_ATTENTION)(*sets[i], causal),
            "flex": lambda i: flex(*sets[i], block_mask=mask, enable_gqa=kv_heads != h)}
    result = {"shape": list(shape), "kv_heads": kv_heads, "causal": causal}
    if kernel is not None:
        runs["tmalang"] = lambda i: ours(kernel)(*sets[i], causal, (o, lse))
    # the first and last query heads in float32 as the reference (with GQA, the first and last
    # K/V heads too), each query head given its own copy of its K/V head
    heads = [0, h - 1]
    q, k, v = (x[:1].repeat_interleave(h // x.shape[1], dim=1)[:, heads].float() for x in sets[0])
    with sdpa_kernel(SDPBackend.MATH):
        reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal).double()

    def error_of(out):
        got = (o if out is None else out)[:1, heads].double()
        return ((got - reference).norm() / reference.norm()).item()
    first_runs(runs, result, error_of)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    return timed_row(runs, result, flops, samples, f"{shape} kv_heads={kv_heads} causal={causal}")


def main() -> None:
    args = arguments()
    kernels = {d: tmalang.compile_file(ROOT / "examples" / "attention_sm90.tma", kernel=name) for d, name in KERNELS.items()}
    cases = [(shape, shape[1]) for shape in SHAPES] + GQA
    rows = [row(kernels[shape[3]], shape, kv_heads, causal, args.samples)
            for shape, kv_heads in cases for causal in (False, True)]
    write_report(args.out,
                 "attention forward, bf16 (examples/attention_sm90.tma), multi-head and grouped-query, "
                 "vs SDPA FLASH and CUDNN backends and compiled flex_attention",
                 f"{METHOD}; {args.samples} rounds; FLOPs 4·B·H·S²·D, halved when causal; flex_attention "
                 "compiled per shape (dynamic=False), its causal block mask built outside the timing; "
                 "tmalang_vs_best: against the fastest peer in each way", rows)


if __name__ == "__main__":
    main()

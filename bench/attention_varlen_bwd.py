"""Packed-batch (varlen) attention backward: torch autograd through tmalang.attention_varlen
(examples/attention_varlen_bwd_sm90.tma: delta, then the dK/dV and dQ kernels) against compiled
flex_attention's backward with a document mask over the packed rows, same run. bf16, 16 sequences
of 1 to 8192 rows in one batch (len_q = len_k), causal and not, head dims 64 and 128, multi-head
and grouped-query.

Each contender's backward is `torch.autograd.grad` through a forward recorded once outside the
timing (as bench/attention_bwd.py's peers), so only the backward is timed. FLOPs are Σ 10·H·L²·D
over the sequences (five GEMMs), halved when causal. The gradients are checked against float32
SDPA (math) on the batch's first, a middle and the last sequences first. Timed three ways
(bench/timing.py).

    python bench/attention_varlen_bwd.py --out bench/results/attention-varlen-bwd-<date>-h100.json
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

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from attention_varlen import LENGTHS, document_mask  # noqa: E402
from timing import METHOD, arguments, first_runs, timed_row, write_report  # noqa: E402

CASES = [(16, 16, 128), (16, 16, 64), (32, 8, 128)]   # (query heads, K/V heads, head dim)

torch._dynamo.config.recompile_limit = 64
flex = torch.compile(flex_attention, dynamic=False)


class Backward:
    """A forward recorded once (on its own stream, which a CUDA graph of the backward needs), then
    `run(do)`: the gradients of q, k, v."""

    def __init__(self, forward, q, k, v):
        self.inputs = [x.detach().requires_grad_() for x in (q, k, v)]
        self.capture_stream = torch.cuda.Stream()
        self.capture_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.capture_stream):
            self.out = forward(*self.inputs)
        torch.cuda.current_stream().wait_stream(self.capture_stream)

    def __call__(self, do):
        return torch.autograd.grad(self.out, self.inputs, do, retain_graph=True)


def row(heads: int, kv_heads: int, d: int, causal: bool, samples: int) -> dict:
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    total = int(cu[-1])
    sets = [tuple(torch.randn(total, n, d, dtype=torch.bfloat16).cuda() for n in (heads, kv_heads, kv_heads, heads))
            for _ in range(2)]
    mask = document_mask(cu, total, causal)

    def ours(q, k, v):
        return tmalang.attention_varlen(q, k, v, cu, cu, causal=causal, check=False)

    def flex_forward(q, k, v):
        out = flex(*(x.transpose(0, 1)[None] for x in (q, k, v)), block_mask=mask, enable_gqa=kv_heads != heads)
        return out[0].transpose(0, 1)
    runs = {}
    for name, forward in (("tmalang", ours), ("flex", flex_forward)):
        calls = [Backward(forward, *x[:3]) for x in sets]
        runs[name] = (lambda calls: (lambda i: calls[i](sets[i][3])))(calls)
        runs[name].capture_stream = calls[0].capture_stream
    result = {"heads": heads, "kv_heads": kv_heads, "head_dim": d, "causal": causal, "lengths": LENGTHS}
    checked = [0, len(LENGTHS) // 2, len(LENGTHS) - 1]
    want = reference(*sets[0], cu, causal, checked)

    def error_of(grads):
        got = [g[int(cu[b]):int(cu[b + 1])].double() for b in checked for g in grads]
        return max(((g - w).norm() / w.norm()).item() for g, w in zip(got, want) if w.norm() > 0)
    first_runs(runs, result, error_of)
    flops = sum(10 * heads * n * n * d for n in LENGTHS) / (2 if causal else 1)
    return timed_row(runs, result, flops, samples, f"H={heads} HKV={kv_heads} D={d} causal={causal}")


def reference(q, k, v, do, cu, causal, sequences):
    """float32 SDPA (math) gradients of the chosen sequences, in the order error_of reads them."""
    group = q.shape[1] // k.shape[1]
    out = []
    for b in sequences:
        rows = slice(int(cu[b]), int(cu[b + 1]))
        qs, ks, vs = (x[rows].transpose(0, 1).float().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(SDPBackend.MATH):
            o = F.scaled_dot_product_attention(qs, ks.repeat_interleave(group, 0), vs.repeat_interleave(group, 0),
                                               is_causal=causal)
        grads = torch.autograd.grad(o, (qs, ks, vs), do[rows].transpose(0, 1).float())
        out += [g.transpose(0, 1).double() for g in grads]
    return out


def main() -> None:
    args = arguments()
    rows = []
    for h, hk, d in CASES:
        for causal in (False, True):
            rows.append(row(h, hk, d, causal, args.samples))
            write_report(args.out, "varlen attention backward, bf16 (examples/attention_varlen_bwd_sm90.tma), 16 "
                         "sequences of 1..8192 rows packed, vs compiled flex_attention's backward (document mask)",
                         f"{METHOD}; {args.samples} rounds; FLOPs Σ 10·H·L²·D, halved when causal; the backward "
                         "alone, through torch.autograd.grad of a forward recorded once", rows)


if __name__ == "__main__":
    main()

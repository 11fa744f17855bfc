"""Attention backward: examples/attention_bwd_sm90.tma against the backward of torch's
scaled_dot_product_attention with the FLASH (FlashAttention-2) and CUDNN backends, same run.
bf16, (B, H, S, D) with S = T, causal and not, and grouped-query shapes.

tmalang_deterministic is `deterministic=True`: the prep and the backward without their dQ parts
(ZERO = 0, WITH_DQ = 0), then dQ from attention_bwd_dq.
Ours is what a training step pays: the prep kernel (delta = rowsum(dO ∘ O) and dQ's f32
accumulator zeroed, one pass), the backward kernel, and dQ rounded to bf16 (torch); the peers' is `torch.autograd.grad` through the forward
graph, recorded once outside the timing. FLOPs are 10·B·H·S·T·D (five GEMMs; halved when
causal), as FlashAttention counts a backward. Before timing, every contender's gradients are
compared with float64 ones at small odd shapes (the first and last query heads).

    python bench/attention_bwd.py --out bench/results/attention-bwd-<date>-h100.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from tmalang.library.attention_kernels import HEAD_DIMS, kernel  # noqa: E402  (the library's bindings)

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, rates, report_line, three_ways, versus  # noqa: E402

SHAPES = [((4, 16, 4096, 128), 16), ((2, 16, 8192, 128), 16), ((16, 16, 1024, 128), 16), ((2, 24, 3000, 128), 24),
          ((4, 32, 4096, 128), 8), ((4, 32, 4096, 128), 1), ((4, 32, 4096, 64), 32), ((4, 32, 4096, 64), 8)]
CHECKS = [((1, 4, 1000, d), 4) for d in (64, 128)] + [((1, 8, 4099, d), 1) for d in (64, 128)] + \
         [((2, 2, 77, 128), 1), ((1, 2, 1, 64), 2)]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


class Ours:
    """Forward (examples/attention_sm90.tma) once, then the backward per call."""

    def __init__(self, kernels, q, k, v, causal: bool, deterministic: bool = False):
        b, h, s, d = q.shape
        forward, self.prep, self.kernel, self.dq_kernel, self.delta_kernel, self.dkdv_kernel = kernels
        self.deterministic = deterministic
        self.causal, self.scale = int(causal), 1 / d ** 0.5
        self.q, self.k, self.v = (x.flatten(0, 1) for x in (q, k, v))
        self.o = torch.empty_like(self.q)
        padded = -(-s // 4) * 4    # TMA: 16-byte rows
        self.lse = torch.empty(b * h, padded, device="cuda")[:, :s]
        self.delta = torch.empty(b * h, padded, device="cuda")[:, :s]
        forward(self.q, self.k, self.v, self.scale, self.causal, self.lse, self.o)
        self.dq32 = torch.empty(b * h, s, d, device="cuda")
        self.dk, self.dv = torch.empty_like(self.k), torch.empty_like(self.v)

    def __call__(self, do):
        do = do.flatten(0, 1)
        if self.deterministic:       # delta, dK and dV without dQ, then dQ query-major in one order
            self.delta_kernel(self.o, do, self.delta, self.dq32)
            self.dkdv_kernel(self.q, self.k, self.v, do, self.lse, self.delta, self.scale, self.causal,
                             self.dq32, self.dk, self.dv)
            dq = torch.empty_like(self.q)
            self.dq_kernel(self.q, self.k, self.v, do, self.lse, self.delta, self.scale, self.causal, dq)
            return dq, self.dk, self.dv
        self.prep(self.o, do, self.delta, self.dq32)
        self.kernel(self.q, self.k, self.v, do, self.lse, self.delta, self.scale, self.causal,
                    self.dq32, self.dk, self.dv)
        return self.dq32.to(torch.bfloat16), self.dk, self.dv


class Peer:
    """SDPA's backward through a forward graph recorded once."""

    def __init__(self, backend, q, k, v, causal: bool):
        self.inputs = [x.detach().requires_grad_() for x in (q, k, v)]
        self.stream = torch.cuda.Stream()     # the backward runs here: a CUDA graph captures it here
        self.stream.wait_stream(torch.cuda.current_stream())
        with sdpa_kernel(backend), torch.cuda.stream(self.stream):
            self.out = F.scaled_dot_product_attention(*self.inputs, is_causal=causal,
                                                      enable_gqa=k.shape[1] != q.shape[1])
        torch.cuda.current_stream().wait_stream(self.stream)

    def __call__(self, do):
        return torch.autograd.grad(self.out, self.inputs, do, retain_graph=True)


def inputs(shape, kv_heads, seed):
    b, h, s, d = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(b, h, s, d, device="cuda", generator=g).bfloat16() for _ in range(2))
    k, v = (torch.randn(b, kv_heads, s, d, device="cuda", generator=g).bfloat16() for _ in range(2))
    return q, k, v, do


def reference(q, k, v, do, causal: bool, heads: list[int]):
    """float64 gradients of the query heads `heads` (their K/V heads repeated for each)."""
    group = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(group, dim=1)[:, heads] for x in (k, v))
    q, k, v = (x[:, heads].double().requires_grad_() for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return torch.autograd.grad(out, (q, k, v), do[:, heads].double())


def gradient_error(got, want) -> float:
    """Relative error; absolute where the reference vanishes (one key: softmax's gradient is 0)."""
    diff = (got.double() - want).norm().item()
    return diff / want.norm().item() if want.norm().item() > 1e-6 else diff


def check(kernels, shape, kv_heads, causal) -> dict:
    """Relative errors of dQ, dK, dV against float64, for ours and each peer. With GQA the
    reference's dK/dV are per query head: the contenders' are compared through the sum over the
    group, computed for the checked heads' groups in full."""
    q, k, v, do = inputs(shape, kv_heads, 1)
    h, group = shape[1], shape[1] // kv_heads
    heads = list(range(h)) if h <= 8 else [0, h - 1]
    want = reference(q, k, v, do, causal, heads)
    want = (want[0], *(x.unflatten(1, (-1, group)).sum(2) if len(heads) == h else x for x in want[1:]))
    out = {}
    contenders = {"tmalang": lambda: Ours(kernels[shape[3]], q, k, v, causal)(do),
                  "tmalang_deterministic": lambda: Ours(kernels[shape[3]], q, k, v, causal, True)(do)}
    contenders |= {name: (lambda b=b: Peer(b, q, k, v, causal)(do)) for name, b in BACKENDS.items()}
    for name, run in contenders.items():
        try:
            got = run()
        except RuntimeError as error:
            out[name] = {"unsupported": str(error).splitlines()[0]}
            continue
        got = [x.view(shape[0], -1, *x.shape[-2:]) for x in got]
        got = [got[0][:, heads], *(x if len(heads) == h else None for x in got[1:])]
        out[name] = {n: gradient_error(g, w) for n, g, w in zip(("dq", "dk", "dv"), got, want) if g is not None}
    print(f"check {shape} kv_heads={kv_heads} causal={causal}: {out}", flush=True)
    return {"shape": list(shape), "kv_heads": kv_heads, "causal": causal, "rel_err_vs_f64": out}


def contender(calls, grads):
    def run(i):
        return calls[i](grads[i])
    run.capture_stream = getattr(calls[0], "stream", None)
    return run


def row(kernels, shape, kv_heads, causal, samples) -> dict:
    b, h, s, d = shape
    sets = [inputs(shape, kv_heads, seed) for seed in (2, 3)]
    runs = {"tmalang": [Ours(kernels[d], *x[:3], causal) for x in sets],
            "tmalang_deterministic": [Ours(kernels[d], *x[:3], causal, True) for x in sets]}
    runs |= {name: [Peer(backend, *x[:3], causal) for x in sets] for name, backend in BACKENDS.items()}
    contenders = {name: contender(r, [x[3] for x in sets]) for name, r in runs.items()}
    flops = 10 * b * h * s * s * d / (2 if causal else 1)
    result = {"shape": list(shape), "kv_heads": kv_heads, "causal": causal}
    for name, times in three_ways(contenders, samples, max(3, int(2e12 // flops))).items():
        result[name] = {**times, "tflops": rates(flops, times)}
    versus(result, list(BACKENDS))
    versus(result, list(BACKENDS), ours="tmalang_deterministic")
    print(report_line(f"{shape} kv_heads={kv_heads} causal={causal}", result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--check-only", action="store_true")
    parser.add_argument("--shapes", type=int, nargs="*", help="indices into SHAPES (default: all)")
    args = parser.parse_args()
    kernels = {d: tuple(kernel(role, d) for role in ("forward", "prep", "backward", "dq", "delta", "dkdv"))
               for d in HEAD_DIMS}
    shapes = SHAPES if args.shapes is None else [SHAPES[i] for i in args.shapes]
    checks = [check(kernels, shape, kv, causal) for shape, kv in CHECKS for causal in (False, True)]
    rows = [] if args.check_only else [row(kernels, shape, kv, causal, args.samples)
                                       for shape, kv in shapes for causal in (False, True)]
    report = {
        "benchmark": "attention backward, bf16, head dims 64 and 128 (examples/attention_bwd_sm90.tma), vs the "
                     "backward of SDPA's FLASH and CUDNN backends",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "method": f"{METHOD}; {args.samples} rounds; FLOPs 10·B·H·S²·D, halved when causal; ours includes "
                  "the prep kernel (delta = rowsum(dO∘O), dQ's f32 accumulator zeroed) and rounding dQ to bf16; "
                  "tmalang_deterministic: prep and backward without dQ (ZERO = 0, WITH_DQ = 0), then attention_bwd_dq "
                  "(dQ query-major in one order)",
        "checks": checks, "results": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

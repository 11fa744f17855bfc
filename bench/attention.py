"""Attention forward throughput: examples/attention_sm90.tma against torch's
scaled_dot_product_attention with the FLASH (FlashAttention-2) and CUDNN backends, in the same
run. bf16 in and out, (B, H, S, D) with S = T, causal and not.

FLOPs are 4·B·H·S·T·D (two GEMMs), halved when causal, as FlashAttention counts them. Every
contender's output is checked against float32 SDPA (math backend) on the first shape's data
first. Each contender is timed three ways (bench/timing.py: cold-L2 GPU time, warm-L2
CUDA-graph replay, host-inclusive eager calls).

    python bench/attention.py --out bench/results/attention-<date>-h100.json
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

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, rates, ratios, summary, three_ways  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(4, 16, 4096, 128), (2, 16, 8192, 128), (4, 32, 4096, 64), (16, 16, 1024, 128)]
KERNELS = {64: "flash_attention", 128: "flash_attention_hd128"}


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def ours(kernel):
    def run(q, k, v, causal, out):
        b, h, s, d = q.shape
        o, lse = out
        kernel(q.view(b * h, s, d), k.view(b * h, -1, d), v.view(b * h, -1, d), 1 / d ** 0.5, int(causal),
               lse, o.view(b * h, s, d))
    return run


def row(kernel, shape, causal: bool, samples: int) -> dict:
    b, h, s, d = shape
    sets = [tuple(torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)) for _ in range(2)]
    o = torch.empty(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b * h, -(-s // 4) * 4, device="cuda")[:, :s]
    runs = {"flash": lambda i: sdpa(SDPBackend.FLASH_ATTENTION)(*sets[i], causal),
            "cudnn": lambda i: sdpa(SDPBackend.CUDNN_ATTENTION)(*sets[i], causal)}
    result = {"shape": list(shape), "causal": causal}
    if kernel is not None:
        runs["tmalang"] = lambda i: ours(kernel)(*sets[i], causal, (o, lse))
    q, k, v = (x[:1, :2].float() for x in sets[0])      # two heads in float32 as the reference
    with sdpa_kernel(SDPBackend.MATH):
        reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal).double()
    for name, run in runs.items():
        out = run(0)
        torch.cuda.synchronize()
        got = (o if out is None else out)[:1, :2].double()
        result[name] = {"rel_err_vs_f32": ((got - reference).norm() / reference.norm()).item()}
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    batch = max(3, int(2e12 // flops))
    for name, times in three_ways(runs, samples, batch).items():
        result[name].update(times, tflops=rates(flops, times))
    if kernel is not None:
        for other in ("flash", "cudnn"):
            result[f"tmalang_vs_{other}"] = ratios(result["tmalang"], result[other])
    print(f"{shape} causal={causal}  " + "  ".join(f"{k}: {summary(v)}" for k, v in result.items()
                                                   if k.startswith("tmalang_vs")), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=15)
    args = parser.parse_args()
    kernels = {d: tmalang.compile_file(ROOT / "examples" / "attention_sm90.tma", kernel=name) for d, name in KERNELS.items()}
    rows = [row(kernels[shape[3]], shape, causal, args.samples) for shape in SHAPES for causal in (False, True)]
    report = {
        "benchmark": "attention forward, bf16 (examples/attention_sm90.tma) vs SDPA FLASH and CUDNN backends",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "method": f"{METHOD}; {args.samples} rounds; FLOPs 4·B·H·S²·D, halved when causal",
        "results": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

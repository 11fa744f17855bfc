"""The 2 x 2 cluster GEMM, measured: examples/gemm_cluster2x2_sm90.tma (A multicast along the
cluster row, B along the cluster column) against examples/gemm_sm90.tma (clusters of 2, B
multicast) and torch.matmul (cuBLAS), in the same run. bf16 C = A · Bᵀ with A [M, K], B [N, K]
(K-major), f32 accumulate, bf16 out, at 4096³ and 8192³.

Each sample times a batch of back-to-back launches between two CUDA events (bench/gemm.py's
timed_in_turns: the contenders in turns within each round, one untimed launch enqueued first);
the figure is the median over the samples after warm-up, on random data, rotating between two
input sets. Each tmalang kernel's result is checked against cuBLAS first (relative error ~1e-3:
bf16 rounding of the output, both accumulate in f32).

    python bench/gemm_cluster.py --out bench/results/gemm-cluster-<date>-h100.json   (about 20 s)
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/gemm_cluster.py`, this file's folder heads sys.path, where bench/copy.py
# would shadow the standard library's `copy` module (which lark and torch import): drop the folder.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import datetime
import json

import torch

import tmalang

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import timed_in_turns  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
KERNELS = {"gemm_cluster2x2": "gemm_cluster2x2_sm90.tma", "gemm_sm90": "gemm_sm90.tma"}


def row(kernels: dict, m: int, n: int, k: int, samples: int) -> dict:
    sets = [(torch.randn(m, k, device="cuda").to(torch.bfloat16), torch.randn(n, k, device="cuda").to(torch.bfloat16))
            for _ in range(2)]
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    reference = (sets[0][0] @ sets[0][1].T).double()
    flops = 2 * m * n * k
    runs = {"cublas": lambda i: torch.matmul(sets[i][0], sets[i][1].T, out=c)}
    runs.update({name: (lambda i, kern=kern: kern(sets[i][0], sets[i][1], c)) for name, kern in kernels.items()})
    result = {"shape": [m, n, k]}
    for name, run in runs.items():
        c.fill_(float("nan"))
        run(0)
        torch.cuda.synchronize()
        result[name] = {"rel_err_vs_cublas": ((c.double() - reference).norm() / reference.norm()).item()}
    for name, ms in timed_in_turns(runs, samples, max(4, int(4e12 // flops))).items():
        result[name].update(ms=ms, tflops=flops / ms / 1e9)
    for name in kernels:
        result[f"{name}_vs_cublas"] = result[name]["tflops"] / result["cublas"]["tflops"]
    result["gemm_cluster2x2_vs_gemm_sm90"] = result["gemm_cluster2x2"]["tflops"] / result["gemm_sm90"]["tflops"]
    print(f"{m}x{n}x{k}: cuBLAS {result['cublas']['tflops']:.0f}  2x2 {result['gemm_cluster2x2']['tflops']:.0f} "
          f"({result['gemm_cluster2x2_vs_cublas']:.3f}x)  gemm_sm90 {result['gemm_sm90']['tflops']:.0f} "
          f"({result['gemm_sm90_vs_cublas']:.3f}x) TFLOP/s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=25)
    args = parser.parse_args()
    kernels = {name: tmalang.compile_file(ROOT / "examples" / file) for name, file in KERNELS.items()}
    rows = [row(kernels, m, n, k, args.samples) for m, n, k in SHAPES]
    report = {
        "benchmark": "bf16 GEMM C = A·Bᵀ: examples/gemm_cluster2x2_sm90.tma (2x2 cluster, A multicast along the "
                     "cluster row, B along the column) vs examples/gemm_sm90.tma (cluster 2, B multicast) vs cuBLAS",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "method": f"median of {args.samples} event-timed batches per contender after "
                  "warm-up, the contenders timed in turns within each round",
        "results": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

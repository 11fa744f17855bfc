"""Ping-pong bf16 GEMMs against examples/gemm_sm90.tma and torch.matmul (cuBLAS), in the same run:
examples/gemm_pingpong_tiles_sm90.tma (CUTLASS-style: each consumer warpgroup owns its tiles,
`by warpgroup`, and their mainloops take turns, so one's epilogue overlaps the other's mainloop,
§15f) and examples/gemm_pingpong_sm90.tma (the two warpgroups share each tile and issue each
k-step's wgmmas in turn, §15e). C = A · Bᵀ with A [M, K], B [N, K], bf16 out.

Each contender is timed three ways (bench/timing.py: cold-L2 GPU time, warm-L2 CUDA-graph
replay, host-inclusive eager calls), on random data, two input sets alternating. Every kernel's result is checked
against cuBLAS before it is timed.

    python bench/gemm_pingpong.py                     # writes bench/results/gemm-pingpong-<date>-<gpu>.json
    python bench/gemm_pingpong.py --samples 9 --out /tmp/quick.json
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

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, rates, ratios, summary, three_ways  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 2048, 8192), (1000, 1000, 1000)]


def row(kernels: dict, m: int, n: int, k: int, samples: int) -> dict:
    sets = [(torch.randn(m, k, device="cuda").to(torch.bfloat16), torch.randn(n, k, device="cuda").to(torch.bfloat16))
            for _ in range(2)]
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    reference = sets[0][0] @ sets[0][1].T
    flops = 2 * m * n * k
    result = {"shape": [m, n, k]}
    runs = {"cublas": lambda i: torch.matmul(sets[i][0], sets[i][1].T, out=c)}
    runs |= {name: (lambda i, kernel=kernel: kernel(sets[i][0], sets[i][1], c)) for name, kernel in kernels.items()}
    for name, run in runs.items():
        c.fill_(float("nan"))
        run(0)
        torch.cuda.synchronize()
        error = ((c.double() - reference.double()).norm() / reference.double().norm()).item()
        if not error < 1e-2:
            raise SystemExit(f"{name} at {m}x{n}x{k}: relative error {error} against cuBLAS")
        result[name] = {"rel_err_vs_cublas": error}
    for name, times in three_ways(runs, samples, max(4, int(4e12 // flops))).items():
        result[name].update(times, tflops=rates(flops, times))
    for name in ("gemm_sm90", "pingpong", "pingpong_tiles"):
        result[f"{name}_vs_cublas"] = ratios(result[name], result["cublas"])
    for name in ("pingpong", "pingpong_tiles"):
        result[f"{name}_vs_gemm_sm90"] = ratios(result[name], result["gemm_sm90"])
    print(f"{m}x{n}x{k}: pingpong_tiles/cuBLAS {summary(result['pingpong_tiles_vs_cublas'])}  "
          f"/gemm_sm90 {summary(result['pingpong_tiles_vs_gemm_sm90'])}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=25)
    args = parser.parse_args()
    kernels = {name: tmalang.compile_file(ROOT / "examples" / f"{file}.tma")
               for name, file in (("gemm_sm90", "gemm_sm90"), ("pingpong", "gemm_pingpong_sm90"),
                                  ("pingpong_tiles", "gemm_pingpong_tiles_sm90"))}
    rows = [row(kernels, m, n, k, args.samples) for m, n, k in SHAPES]
    gpu = torch.cuda.get_device_name()
    today = datetime.date.today().isoformat()
    report = {
        "benchmark": "bf16 GEMM C = A·Bᵀ: examples/gemm_pingpong_tiles_sm90.tma (each warpgroup its own "
                     "tiles, mainloops in turns) and examples/gemm_pingpong_sm90.tma (warpgroups take turns on "
                     "shared tiles) vs examples/gemm_sm90.tma and cuBLAS",
        "gpu": gpu, "date": today, "torch": torch.__version__,
        "method": f"{METHOD}; {args.samples} rounds",
        "results": rows,
    }
    short = "h100" if "H100" in gpu else gpu.lower().replace(" ", "-")
    out = args.out or ROOT / "bench" / "results" / f"gemm-pingpong-{today}-{short}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

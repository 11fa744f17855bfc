"""bf16 GEMM throughput: examples/gemm_sm90.tma against torch.matmul (cuBLAS) and a Triton
matmul, in the same run. C = A · Bᵀ with A [M, K], B [N, K] (K-major), bf16 out, f32 accumulate.

Every contender is timed three ways (bench/timing.py): GPU time with a cold L2, CUDA-graph
replay with a warm L2, and host-inclusive eager calls; ratios are given for each. Data is
random (never zeros), two input sets alternated; every kernel's result is checked first.

    python bench/gemm.py --out bench/results/gemm-<date>-h100.json
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
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 2048, 8192)]


def triton_matmul():
    """A tutorial-style Triton kernel (grouped rasterization, software pipelining), our own code."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (GROUP * tiles_n)
        first_m = group * GROUP
        rows = min(tiles_m - first_m, GROUP)
        pm = first_m + (pid % rows)
        pn = (pid % (GROUP * tiles_n)) // rows
        offs_m = pm * BM + tl.arange(0, BM)
        offs_n = pn * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + offs_k
            x = tl.load(a + offs_m[:, None] * K + kk[None, :], mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
            y = tl.load(b + offs_n[:, None] * K + kk[None, :], mask=(offs_n[:, None] < N) & (kk[None, :] < K), other=0.0)
            acc = tl.dot(x, tl.trans(y), acc)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(c + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.bfloat16), mask=mask)

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[0]
        grid = (triton.cdiv(M, 128) * triton.cdiv(N, 256),)
        kernel[grid](a, b, c, M, N, K, BM=128, BN=256, BK=64, GROUP=8, num_warps=8, num_stages=3)

    return run


def fp8_row(samples: int, size: int = 8192) -> dict:
    """e4m3 inputs, bf16 out: examples/gemm_fp8_sm90.tma against cuBLAS through torch._scaled_mm."""
    kernel = tmalang.compile_file(ROOT / "examples" / "gemm_fp8_sm90.tma")
    sets = [(torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn),
             torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)) for _ in range(2)]
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    one = torch.ones((), device="cuda")
    reference = sets[0][0].float() @ sets[0][1].float().T
    flops, row = 2 * size ** 3, {"shape": [size, size, size], "dtype": "f8e4m3 -> bf16"}
    runs = {"cublas": lambda i: torch._scaled_mm(sets[i][0], sets[i][1].T, one, one, out_dtype=torch.bfloat16),
            "tmalang": lambda i: kernel(sets[i][0], sets[i][1], c)}
    for name, run in runs.items():
        out = run(0)
        torch.cuda.synchronize()
        out = c if out is None else out
        row[name] = {"rel_err_vs_fp32": ((out.double() - reference.double()).norm() / reference.double().norm()).item()}
    for name, times in three_ways(runs, samples, 8).items():
        row[name].update(times, tflops=rates(flops, times))
    row["tmalang_vs_cublas"] = ratios(row["tmalang"], row["cublas"])
    print(f"fp8 {size}^3: tmalang/cuBLAS {summary(row['tmalang_vs_cublas'])}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=25)
    args = parser.parse_args()
    gemm = tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma")
    triton_run = triton_matmul()
    rows = []
    for m, n, k in SHAPES:
        sets = [(torch.randn(m, k, device="cuda").to(torch.bfloat16), torch.randn(n, k, device="cuda").to(torch.bfloat16))
                for _ in range(2)]
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        reference = sets[0][0] @ sets[0][1].T
        flops = 2 * m * n * k
        batch = max(4, int(4e12 // flops))
        result = {"shape": [m, n, k]}
        runs = {"cublas": lambda i: torch.matmul(sets[i][0], sets[i][1].T, out=c),
                "tmalang": lambda i: gemm(sets[i][0], sets[i][1], c),
                "triton": lambda i: triton_run(sets[i][0], sets[i][1], c)}
        for name, run in runs.items():
            c.fill_(float("nan"))
            run(0)
            torch.cuda.synchronize()
            result[name] = {"rel_err_vs_cublas": ((c.double() - reference.double()).norm() / reference.double().norm()).item()}
        for name, times in three_ways(runs, args.samples, batch).items():
            result[name].update(times, tflops=rates(flops, times))
        result["tmalang_vs_cublas"] = ratios(result["tmalang"], result["cublas"])
        result["triton_vs_cublas"] = ratios(result["triton"], result["cublas"])
        rows.append(result)
        print(f"{m}x{n}x{k}: tmalang/cuBLAS {summary(result['tmalang_vs_cublas'])}  "
              f"Triton/cuBLAS {summary(result['triton_vs_cublas'])}", flush=True)
    rows.append(fp8_row(args.samples))
    report = {
        "benchmark": "bf16 GEMM C = A·Bᵀ (examples/gemm_sm90.tma) vs cuBLAS and Triton",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "method": f"{METHOD}; {args.samples} rounds",
        "results": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

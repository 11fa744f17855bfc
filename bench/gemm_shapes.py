"""GEMM at every shape: what tmalang's GEMM kernels reach against cuBLAS across the shapes users
run (issue 15), bf16 and fp8, in the same run. C = A · Bᵀ, A [M, K] row-major, B [N, K] K-major.

bf16: examples/gemm_sm90.tma and, where it is faster, examples/gemm_splitk_sm90.tma with S parts
or examples/gemm_streamk_sm90.tma (f32 C zeroed each launch, the zeroing timed too) against
torch.matmul; the best tmalang variant is the shape's figure. fp8 (e4m3 in, bf16 out): examples/gemm_fp8_sm90.tma against
torch._scaled_mm. Each contender cycles through enough input sets (twice the L2's 50 MiB, at
least two) that small shapes are timed from memory, not from the cache. Every output is checked against a float64 product of the same inputs before it
is timed; a variant that fails to compile, launch or match is reported with its error and left
out. Shapes that are not tile multiples get operands whose rows are padded to 16 bytes (views),
as TMA needs. Timing as in bench/gemm.py; the report gives each ratio and their geometric mean.

    python bench/gemm_shapes.py --out bench/results/gemm-shapes-<date>-h100.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

import torch  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from gemm import timed_in_turns  # noqa: E402  (as bench/prefetch.py does)

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [
    (8192, 8192, 8192), (6144, 6144, 6144), (8000, 8000, 8000), (2048, 2048, 2048), (1024, 1024, 1024),
    (16384, 14336, 4096), (4096, 4096, 512), (128, 8192, 8192),             # the table
    (512, 512, 512), (4096, 4096, 4096),
    (1, 8192, 8192), (16, 8192, 8192), (64, 8192, 8192), (256, 8192, 8192),  # decode (M = 128 above)
    (4096, 4096, 128), (1024, 1024, 65536),                                  # short and long K
    (1000, 1000, 1000), (777, 1531, 1000), (3000, 5000, 2008), (4097, 2049, 1032),  # not tile multiples
]
SPLITS = (2, 4, 8)
TOLERANCE = 2e-2       # relative Frobenius error against float64 (bf16 outputs round at ~4e-3)


L2_BYTES = 50 << 20    # the H100's L2: input sets rotate through at least twice this much


def input_sets(make, bytes_per_set: int) -> list:
    """Enough input sets that cycling through them leaves none in L2 from its last use (at least
    two), so small shapes are timed from memory, not from the cache."""
    return [make() for _ in range(max(2, min(64, -(-2 * L2_BYTES // bytes_per_set))))]


def rotating(sets: list, run):
    """run(set) on the next set at each call, whatever index the timing loop passes; the first
    call (the one checked against float64) takes set 0."""
    position = [-1]

    def call(_):
        position[0] = (position[0] + 1) % len(sets)
        return run(sets[position[0]])
    return call


def padded(rows: int, cols: int, dtype, fill=None) -> torch.Tensor:
    """[rows, cols] on the GPU whose rows are padded to 16 bytes: a view, as TMA needs."""
    step = 16 // torch.empty((), dtype=dtype).element_size()
    base = torch.empty(rows, -(-cols // step) * step, device="cuda", dtype=dtype)
    if fill is None:
        base.copy_(torch.randn(base.shape, device="cuda"))
    else:
        base.fill_(fill)
    return base[:, :cols]


def error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return ((out.double() - reference).norm() / reference.norm()).item()


def measure(runs: dict, outputs: dict, reference: torch.Tensor, flops: float, samples: int) -> dict:
    """Check every contender against `reference`, then time those that match."""
    result, live = {}, {}
    for name, run in runs.items():
        try:
            out = run(0)
            torch.cuda.synchronize()
            err = error(outputs.get(name, out), reference)
            result[name] = {"rel_err_vs_f64": err}
            if err < TOLERANCE:
                live[name] = run
            else:
                result[name]["error"] = f"does not match float64 (relative error {err:.3g})"
        except Exception as exc:   # a variant that cannot run is reported, not fatal
            result[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    batch = max(3, int(2e12 // flops))
    for name, ms in timed_in_turns(live, samples, batch).items():
        result[name].update(ms=ms, tflops=flops / ms / 1e9)
    return result


def bf16_row(kernels: dict, m: int, n: int, k: int, samples: int) -> dict:
    sets = input_sets(lambda: (padded(m, k, torch.bfloat16), padded(n, k, torch.bfloat16)), 2 * (m + n) * k)
    c = padded(m, n, torch.bfloat16, 0.0)
    c32 = padded(m, n, torch.float32, 0.0)
    reference = sets[0][0].double() @ sets[0][1].double().T
    runs = {"cublas": rotating(sets, lambda ab: torch.matmul(ab[0], ab[1].T)),
            "gemm_sm90": rotating(sets, lambda ab: kernels["gemm"](ab[0], ab[1], c))}
    outputs = {"gemm_sm90": c}
    for s in SPLITS:
        def split(ab, s=s):
            c32.zero_()
            kernels["splitk"](s, ab[0], ab[1], c32)
        runs[f"splitk_{s}"], outputs[f"splitk_{s}"] = rotating(sets, split), c32

    def stream(ab):
        c32.zero_()
        kernels["streamk"](ab[0], ab[1], c32)
    runs["streamk"], outputs["streamk"] = rotating(sets, stream), c32
    row = {"shape": [m, n, k], "dtype": "bf16", **measure(runs, outputs, reference, 2 * m * n * k, samples)}
    return _ratio(row, [name for name in runs if name != "cublas"])


def fp8_row(kernel, m: int, n: int, k: int, samples: int) -> dict:
    sets = input_sets(lambda: (padded(m, k, torch.float8_e4m3fn), padded(n, k, torch.float8_e4m3fn)), (m + n) * k)
    c = padded(m, n, torch.bfloat16, 0.0)
    one = torch.ones((), device="cuda")
    reference = sets[0][0].double() @ sets[0][1].double().T
    runs = {"cublas": rotating(sets, lambda ab: torch._scaled_mm(ab[0], ab[1].T, one, one, out_dtype=torch.bfloat16)),
            "gemm_fp8_sm90": rotating(sets, lambda ab: kernel(ab[0], ab[1], c))}
    row = {"shape": [m, n, k], "dtype": "f8e4m3 -> bf16",
           **measure(runs, {"gemm_fp8_sm90": c}, reference, 2 * m * n * k, samples)}
    return _ratio(row, ["gemm_fp8_sm90"])


def _ratio(row: dict, ours: list[str]) -> dict:
    """The best tmalang variant's throughput over cuBLAS's (None when either did not run)."""
    timed = [name for name in ours if "tflops" in row.get(name, {})]
    if timed and "tflops" in row.get("cublas", {}):
        best = max(timed, key=lambda name: row[name]["tflops"])
        row["best"], row["tmalang_vs_cublas"] = best, row[best]["tflops"] / row["cublas"]["tflops"]
    else:
        row["best"], row["tmalang_vs_cublas"] = None, None
    print(f"{row['dtype']:>15} {'x'.join(map(str, row['shape'])):>18}: cuBLAS "
          f"{row.get('cublas', {}).get('tflops', float('nan')):6.1f}  best {row['best']} "
          f"{(row['tmalang_vs_cublas'] or float('nan')):.3f}x", flush=True)
    return row


def geomean(rows: list[dict]) -> float | None:
    ratios = [r["tmalang_vs_cublas"] for r in rows if r["tmalang_vs_cublas"]]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=9)
    args = parser.parse_args()
    examples = ROOT / "examples"
    kernels = {"gemm": tmalang.compile_file(examples / "gemm_sm90.tma"),
               "splitk": tmalang.compile_file(examples / "gemm_splitk_sm90.tma"),
               "streamk": tmalang.compile_file(examples / "gemm_streamk_sm90.tma")}
    fp8 = tmalang.compile_file(examples / "gemm_fp8_sm90.tma")
    bf16 = [bf16_row(kernels, *shape, args.samples) for shape in SHAPES]
    f8 = [fp8_row(fp8, *shape, args.samples) for shape in SHAPES if shape[2] % 16 == 0]
    report = {
        "benchmark": "GEMM at every shape (issue 15): tmalang's best GEMM kernel per shape vs cuBLAS, bf16 and fp8",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "method": f"median of {args.samples} event-timed batches per contender after warm-up, contenders timed "
                  "in turns, cycling through input sets of twice the L2 in total; every output checked against "
                  "float64 first; small shapes are bound by launch rate for every contender (no graph capture)",
        "geomean_bf16": geomean(bf16), "geomean_fp8": geomean(f8),
        "bf16": bf16, "fp8": f8,
    }
    print(f"geometric mean, best tmalang / cuBLAS: bf16 {report['geomean_bf16']:.3f}, fp8 {report['geomean_fp8']:.3f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""GEMM at every shape: what `tmalang.gemm` reaches against cuBLAS across the shapes users run
(issue 15), bf16 and fp8, in the same run. C = A · Bᵀ, A [M, K] row-major, B [N, K] K-major
(passed to tmalang.gemm as the view B.T, as to torch.matmul).

Contenders: cuBLAS (torch.matmul for bf16; torch._scaled_mm with unit scales, e4m3 in and bf16
out, for fp8), `tmalang.gemm` with the configuration its rule picks (the headline ratio), the
same call with tune=True (tuned during the check, before any timing), and for bf16 the
examples as written: gemm_sm90.tma, gemm_dynamic_sm90.tma (tiles claimed from an atomic
counter) and gemm_streamk_sm90.tma (stream-K into an f32 C zeroed in each timed call). Every output is checked against a float64 product of the
same inputs before it is timed; a contender that fails to compile, launch or match is reported
with its error and left out. Shapes that are not tile multiples get operands whose rows are
padded to 16 bytes (views), as TMA needs. Each call is timed alone with CUDA events after an L2
flush (as triton.testing.do_bench does), median of many; the report gives each ratio, the
configurations, and the geometric means. cuBLAS and `tmalang.gemm` (with `out`, the rule's pick)
are also timed as users run them in a model (issue 31): replays of a CUDA graph of a batch of
calls (warm L2, no host) and a batch of eager calls closed by a synchronize (the host's cost per
call counts wherever it exceeds the GPU's).

    python bench/gemm_shapes.py --out bench/results/gemm-shapes-<date>-h100.json
    python bench/gemm_shapes.py --decode --out bench/results/gemm-shapes-decode-<date>-h200.json   # M <= 32
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
from timing import CALLS_PER_ROUND, timed_eager, timed_flushed, timed_graph_replays  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [
    (8192, 8192, 8192), (6144, 6144, 6144), (8000, 8000, 8000), (2048, 2048, 2048), (1024, 1024, 1024),
    (16384, 14336, 4096), (4096, 4096, 512), (128, 8192, 8192),             # the table
    (512, 512, 512), (4096, 4096, 4096),
    (1, 8192, 8192), (16, 8192, 8192), (64, 8192, 8192), (256, 8192, 8192),  # decode (M = 128 above)
    (4096, 4096, 128), (1024, 1024, 65536),                                  # short and long K
    (1000, 1000, 1000), (777, 1531, 1000), (3000, 5000, 2008), (4097, 2049, 1032),  # not tile multiples
    (3072, 768, 768), (77, 4096, 4096), (2, 5120, 5120), (1, 4096, 4096), (16, 14336, 4096),   # issue 31:
    (1024, 1024, 1024),                                                       # shapes PyTorch users run
]
TOLERANCE = 2e-2       # relative Frobenius error against float64 (bf16 outputs round at ~4e-3)


def input_sets(make, bytes_per_set: int) -> list:
    """Two input sets, alternated (the L2 is flushed before each timed call anyway)."""
    return [make() for _ in range(2)]


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
    for name, ms in timed_flushed(live, samples).items():
        result[name].update(ms=ms, tflops=flops / ms / 1e9)
    return result


def bf16_row(kernels: dict, m: int, n: int, k: int, samples: int) -> dict:
    sets = input_sets(lambda: (padded(m, k, torch.bfloat16), padded(n, k, torch.bfloat16)), 2 * (m + n) * k)
    c = padded(m, n, torch.bfloat16, 0.0)
    c32 = padded(m, n, torch.float32, 0.0)
    reference = sets[0][0].double() @ sets[0][1].double().T
    runs = {"cublas": rotating(sets, lambda ab: torch.matmul(ab[0], ab[1].T)),
            **library_runs(sets, c),
            "gemm_sm90": rotating(sets, lambda ab: kernels["gemm"](ab[0], ab[1], c)),
            "gemm_dynamic": rotating(sets, lambda ab: kernels["dynamic"](ab[0], ab[1], c))}
    outputs = {name: c for name in runs if name != "cublas"}

    def stream(ab):       # stream-K adds partial tiles into a zeroed f32 C; the zeroing is timed too
        c32.zero_()
        kernels["streamk"](ab[0], ab[1], c32)
    runs["streamk"], outputs["streamk"] = rotating(sets, stream), c32
    row = {"shape": [m, n, k], "dtype": "bf16", **measure(runs, outputs, reference, 2 * m * n * k, samples)}
    warm_columns(row, runs, 2 * m * n * k, samples)
    plans(row, sets, c)
    return _ratio(row, [name for name in runs if name != "cublas"])


def warm_columns(row: dict, runs: dict, flops: float, samples: int) -> None:
    """cuBLAS and tmalang.gemm in CUDA-graph replay (warm L2) and as eager calls (host included),
    batches of about 0.2 TFLOP (3 to 400 calls); both must have matched float64 first."""
    if "ms" not in row.get("cublas", {}) or "ms" not in row.get("gemm", {}):
        return
    pair = {"cublas": runs["cublas"], "tmalang": runs["gemm"]}
    batch = max(3, min(400, int(2e11 // flops)))
    graph, eager = timed_graph_replays(pair, samples, batch), timed_eager(pair, samples, batch)
    for ours, name in (("cublas", "cublas"), ("tmalang", "gemm")):
        row[name].update(graph_ms=graph.get(ours), eager_ms=eager[ours])
    row["tmalang_vs_cublas_graph"] = graph["cublas"] / graph["tmalang"] if "cublas" in graph else None
    row["tmalang_vs_cublas_eager"] = eager["cublas"] / eager["tmalang"]


def fp8_row(m: int, n: int, k: int, samples: int) -> dict:
    sets = input_sets(lambda: (padded(m, k, torch.float8_e4m3fn), padded(n, k, torch.float8_e4m3fn)), (m + n) * k)
    c = padded(m, n, torch.bfloat16, 0.0)
    one = torch.ones((), device="cuda")
    reference = sets[0][0].double() @ sets[0][1].double().T
    runs = {"cublas": rotating(sets, lambda ab: torch._scaled_mm(ab[0], ab[1].T, one, one, out_dtype=torch.bfloat16)),
            **library_runs(sets, c)}
    row = {"shape": [m, n, k], "dtype": "f8e4m3 -> bf16",
           **measure(runs, {name: c for name in runs if name != "cublas"}, reference, 2 * m * n * k, samples)}
    plans(row, sets, c)
    return _ratio(row, [name for name in runs if name != "cublas"])


def library_runs(sets: list, c: torch.Tensor) -> dict:
    """tmalang.gemm as a user calls it (B as the K-major view of the [N, K] operand), with the
    configuration its rule picks, and with tune=True (tuned on the check's call, before timing)."""
    return {"gemm": rotating(sets, lambda ab: tmalang.gemm(ab[0], ab[1].T, c)),
            "gemm_tuned": rotating(sets, lambda ab: tmalang.gemm(ab[0], ab[1].T, c, tune=True))}


def plans(row: dict, sets: list, c: torch.Tensor) -> None:
    """The configurations the two library calls ran, in the row."""
    a, b = sets[0][0], sets[0][1].T
    row["gemm_config"] = tmalang.gemm_config(a, b, c).describe()
    row["gemm_tuned_config"] = tmalang.gemm_config(a, b, c, tune=True).describe()


def _ratio(row: dict, ours: list[str]) -> dict:
    """Each tmalang contender's throughput over cuBLAS's; the headline is `tmalang.gemm` as it
    picks by itself ("gemm"), with the tuned call and the best contender recorded beside it."""
    cublas = row.get("cublas", {}).get("tflops")
    timed = [name for name in ours if "tflops" in row.get(name, {})]
    for name in timed:
        row[name]["vs_cublas"] = row[name]["tflops"] / cublas if cublas else None
    best = max(timed, key=lambda name: row[name]["tflops"]) if timed else None
    row["best"] = best
    row["tmalang_vs_cublas"] = row.get("gemm", {}).get("vs_cublas")
    row["tuned_vs_cublas"] = row.get("gemm_tuned", {}).get("vs_cublas")
    warm = (f"  graph {row['tmalang_vs_cublas_graph'] or float('nan'):.3f}x  eager "
            f"{row['tmalang_vs_cublas_eager']:.3f}x" if "tmalang_vs_cublas_eager" in row else "")
    print(f"{row['dtype']:>15} {'x'.join(map(str, row['shape'])):>18}: cuBLAS {cublas or float('nan'):6.1f}  "
          f"gemm {(row['tmalang_vs_cublas'] or float('nan')):.3f}x [{row['gemm_config']}]{warm}  tuned "
          f"{(row['tuned_vs_cublas'] or float('nan')):.3f}x [{row['gemm_tuned_config']}]  best {best}", flush=True)
    return row


def geomean(rows: list[dict], field: str = "tmalang_vs_cublas") -> float | None:
    ratios = [r[field] for r in rows if r.get(field)]
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=9)
    parser.add_argument("--decode", action="store_true", help="only the shapes of M <= 32 (short tiles)")
    args = parser.parse_args()
    shapes = [s for s in SHAPES if not args.decode or s[0] <= 32]
    examples = ROOT / "examples"
    kernels = {name: tmalang.compile_file(examples / f"{file}.tma") for name, file in
               (("gemm", "gemm_sm90"), ("dynamic", "gemm_dynamic_sm90"), ("streamk", "gemm_streamk_sm90"))}
    bf16 = [bf16_row(kernels, *shape, args.samples) for shape in shapes]
    f8 = [fp8_row(*shape, args.samples) for shape in shapes if shape[2] % 16 == 0]
    report = {
        "benchmark": "GEMM at every shape (issue 15): tmalang's best GEMM kernel per shape vs cuBLAS, bf16 and fp8",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "method": f"median of {args.samples * CALLS_PER_ROUND} calls per contender, each timed alone with CUDA "
                  "events after a 256 MiB L2 flush, each round of 5 queued behind a 2 ms spin (GPU time, "
                  "not host time), contenders in turns, after warm-up; two input sets "
                  "alternated; every output checked against float64 first. bf16 cuBLAS and gemm also: "
                  "graph_ms, median per call over replays of a CUDA graph of a batch of calls (warm L2); "
                  "eager_ms, median per call of a batch of calls on the host's clock closed by a synchronize",
        "geomean_bf16": geomean(bf16), "geomean_fp8": geomean(f8),
        "geomean_bf16_graph": geomean(bf16, "tmalang_vs_cublas_graph"),
        "geomean_bf16_eager": geomean(bf16, "tmalang_vs_cublas_eager"),
        "geomean_bf16_tuned": geomean(bf16, "tuned_vs_cublas"), "geomean_fp8_tuned": geomean(f8, "tuned_vs_cublas"),
        "bf16": bf16, "fp8": f8,
    }
    print(f"geometric mean, tmalang.gemm / cuBLAS: bf16 {report['geomean_bf16']:.3f}, fp8 {report['geomean_fp8']:.3f}; "
          f"tuned: bf16 {report['geomean_bf16_tuned']:.3f}, fp8 {report['geomean_fp8_tuned']:.3f}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

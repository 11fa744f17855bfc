"""What programmatic dependent launch (backend/prior_grid.py) buys tmalang.gemm: per-call time of
back-to-back calls, in CUDA-graph replay (warm L2) and eagerly on the host's clock, with the
overlap (the default) and without it (TMALANG_OVERLAP=0, a second process), against cuBLAS
(torch.matmul(out=)) in the same process. Every output is checked against float64 first.

    python bench/prior_grid.py --out bench/results/prior-grid-<date>-h200.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import timed_graph_replays  # noqa: E402

import tmalang  # noqa: E402

SHAPES = [(128, 8192, 8192), (2, 5120, 5120), (777, 1531, 1000), (512, 512, 512), (1000, 1000, 1000),
          (3072, 768, 768), (16, 14336, 4096), (1024, 1024, 1024), (77, 4096, 4096)]
ROUNDS, BATCH = 7, 20


def eager_us(fn) -> float:
    """Median per-call microseconds of BATCH back-to-back calls closed by a synchronize."""
    times = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(BATCH):
            fn(0)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / BATCH * 1e6)
    return statistics.median(times)


def measure() -> dict:
    result = {}
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        ours, theirs = (torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        runs = {"tmalang": lambda i: tmalang.gemm(a, w.t(), out=ours),
                "cublas": lambda i: torch.matmul(a, w.t(), out=theirs)}
        ref = a.double() @ w.double().t()
        for name, fn in runs.items():
            fn(0)
            torch.cuda.synchronize()
            out = ours if name == "tmalang" else theirs
            assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2, (name, (m, n, k))
        graph = timed_graph_replays(runs, ROUNDS, BATCH)
        result["x".join(map(str, (m, n, k)))] = {
            "graph_us": {name: t * 1e3 for name, t in graph.items()},
            "eager_us": {name: eager_us(fn) for name, fn in runs.items()}}
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure()))
        return
    variants = {}
    for name, overlap in (("overlap", "1"), ("no_overlap", "0")):
        run = subprocess.run([sys.executable, __file__, "--child"], env={**os.environ, "TMALANG_OVERLAP": overlap},
                             capture_output=True, text=True, check=True)
        variants[name] = json.loads(run.stdout.splitlines()[-1])
    rows = []
    for shape in variants["overlap"]:
        row = {"shape": shape}
        for name, data in variants.items():
            for column in ("graph_us", "eager_us"):
                times = data[shape][column]
                row[f"{name}_{column}"] = times
                row[f"{name}_{column[:-3]}_vs_cublas"] = times["cublas"] / times["tmalang"]
        rows.append(row)
        print(shape, " ".join(f"{key} {value:.3f}" for key, value in row.items() if key.endswith("vs_cublas")))
    out = {"benchmark": "programmatic dependent launch", "gpu": torch.cuda.get_device_name(),
           "date": str(datetime.date.today()),
           "method": f"per call of {BATCH} back-to-back tmalang.gemm(out=) calls: CUDA-graph replay (median of {ROUNDS}) "
                     f"and eager on the host's clock (median of {ROUNDS}); TMALANG_OVERLAP=1 and =0 in two processes, "
                     "cuBLAS in each", "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Tile shapes outside the rule's usual set, at the shapes of bench/gemm_shapes.py still below
cuBLAS (issue 31): widths that fit one wave (128 x 160, 128 x 192), ragged tiles of M rows (80
rows for M = 77, language.md §15), narrow and unclustered tiles, each against cuBLAS
(torch.matmul(out=)) in the same run, cold-L2 GPU time, warm-L2 CUDA-graph replay and
host-inclusive eager calls (bench/timing.py; results before 2026-11-30 have the first two only).
Every output is checked against float64 first. The rule's pick runs as "rule". gemm_row (a
cluster row sharing A by multicast) was measured on ragged and decode tiles at commit cb9a118
(bench/results/gemm-row-2026-11-29-h200.json: slower than gemm_tile at every shape).
With --cluster: the cluster kernel at widths besides 256. With --slim: an unsplit 128 x 64 tile against
the split of K the rule took before it (configs.SLIM), and where it lost. With --row: gemm_row (a
pair of CTAs sharing A by multicast) where rows of A are off 32-byte sectors, against what the rule
took before it, and on sectors. With --pointwise: the GEMMs of the 1x1 convolutions that run on
tmalang.gemm below cuDNN (bench/conv2d.py), other tiles, a split and the cluster kernel.

    python bench/gemm_tiles.py --out bench/results/gemm-tiles-<date>-h200.json
    python bench/gemm_tiles.py --cluster --out bench/results/gemm-cluster-widths-<date>-h200.json
    python bench/gemm_tiles.py --slim --out bench/results/gemm-slim-<date>-h200.json
    python bench/gemm_tiles.py --row --out bench/results/gemm-row-<date>-h200-sectors.json
    python bench/gemm_tiles.py --pointwise --out bench/results/gemm-pointwise-<date>-h200.json
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import timed_eager, timed_flushed, timed_graph_replays  # noqa: E402

import tmalang  # noqa: E402
from tmalang.library import configs  # noqa: E402

T, P = "gemm_tile", "gemm_parts"
PLAN = {   # shape -> (kernel, BM, BN[, split]) tried besides the rule's pick
    (77, 4096, 4096): [(T, 80, 32), (T, 80, 64), (T, 80, 128), (P, 80, 64, 2), (P, 80, 128, 2), (T, 64, 64),
                       (T, 128, 64), (T, 128, 32)],
    (3072, 768, 768): [(T, 128, 96), (T, 128, 128), (T, 128, 160), (T, 128, 192), (T, 128, 256), (T, 64, 192),
                       (T, 64, 128), (T, 128, 64)],
    (1000, 1000, 1000): [(T, 128, 64), (T, 128, 96), (T, 128, 128), (T, 64, 64), (T, 64, 128), (T, 128, 32)],
    (3000, 5000, 2008): [(T, 128, 160), (T, 128, 192), (T, 128, 224), (T, 128, 256), (T, 128, 128)],
    (4096, 4096, 128): [(T, 128, 128), (T, 128, 192), (T, 128, 256), (T, 64, 256)],
    (512, 512, 512): [(T, 64, 64), (T, 64, 32), (T, 128, 32), (T, 128, 64)],
}
CL = "gemm_cluster"
CLUSTER_PLAN = {   # --cluster: the cluster kernel (B multicast to a vertical pair) at widths besides 256
    (3000, 5000, 2008): [(CL, 128, 256), (CL, 128, 192), (CL, 128, 160), (CL, 128, 128)],
    (8000, 8000, 8000): [(CL, 128, 256), (CL, 128, 192)],
    (6144, 6144, 6144): [(CL, 128, 256), (CL, 128, 192)],
    (4096, 4096, 4096): [(CL, 128, 256), (CL, 128, 192)],
    (2048, 2048, 2048): [(CL, 128, 256), (CL, 128, 192), (CL, 128, 128), (T, 128, 128)],
    (3072, 768, 768): [(T, 128, 160), (CL, 128, 160), (CL, 128, 192), (CL, 128, 128)],
}
SLIM_PLAN = {   # --slim: 128 x 64 unsplit against the split the rule took before configs.SLIM
    (1568, 512, 4608): [(T, 128, 64), (P, 128, 256, 4), (T, 128, 128)],     # a deep 3x3 convolution's GEMM
    (3136, 256, 2304): [(T, 128, 64), (P, 128, 128, 2)],
    (1280, 640, 5120): [(T, 128, 64), (P, 128, 256, 4)],
    (2048, 512, 8192): [(T, 128, 64), (P, 128, 256, 4)],
    (1024, 768, 8192): [(T, 128, 64), (P, 128, 192, 4)],
    (1536, 512, 16384): [(T, 128, 64), (P, 64, 128, 8)],                     # past SLIM_STEPS
    (1024, 1024, 65536): [(T, 128, 64), (P, 128, 256, 4)],
    (1000, 1000, 1000): [(T, 128, 64), (T, 128, 128)],                       # short of SLIM_STEPS
}
R = "gemm_row"
ROW_PLAN = {   # --row: rows of A off 32-byte sectors (K * 2 bytes not a multiple of 32), and on them
    (1000, 1000, 1000): [(R, 128, 64), (T, 128, 128), (T, 128, 64)],
    (1100, 600, 4104): [(R, 128, 64), (P, 128, 256, 4), (T, 128, 64)],
    (1000, 1024, 3000): [(R, 128, 64), (T, 128, 64)],
    (2000, 512, 1000): [(R, 128, 64), (T, 128, 128), (T, 128, 64)],
    (1000, 1000, 1008): [(R, 128, 64), (T, 64, 128)],                        # on sectors
    (1024, 1024, 1024): [(R, 128, 64), (T, 64, 128)],
}

POINTWISE_PLAN = {   # --pointwise: the GEMMs of ResNet-50's 1x1 layers below 0.95x cuDNN (N = 32, rows = pixels)
    (6272, 512, 1024): [(T, 128, 256), (T, 128, 128), (T, 128, 192), (T, 128, 64), (P, 128, 256, 2)],
    (25088, 512, 128): [(T, 128, 128), (T, 128, 256), (T, 128, 64), (CL, 128, 256)],
    (6272, 1024, 256): [(T, 128, 128), (T, 128, 256), (T, 128, 192)],
    (1568, 2048, 512): [(T, 128, 256), (T, 128, 128), (T, 128, 192)],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cluster", action="store_true", help="the cluster kernel at tile widths besides 256")
    parser.add_argument("--slim", action="store_true", help="an unsplit 128 x 64 tile against a split of K")
    parser.add_argument("--row", action="store_true", help="gemm_row where rows of A are off sectors")
    parser.add_argument("--pointwise", action="store_true", help="the GEMMs of 1x1 convolutions below cuDNN")
    args = parser.parse_args()
    out = {"benchmark": "gemm tile shapes beyond the rule's set", "gpu": torch.cuda.get_device_name(),
           "date": str(datetime.date.today()),
           "method": "cold: timed_flushed (5 rounds); graph: timed_graph_replays (5 rounds of 20); eager: "
                     "timed_eager (5 rounds of 20, host-inclusive); ratios cuBLAS / candidate", "gemm": []}
    plan_of = ROW_PLAN if args.row else SLIM_PLAN if args.slim else CLUSTER_PLAN if args.cluster else \
        POINTWISE_PLAN if args.pointwise else PLAN
    for (m, n, k), plan in plan_of.items():
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        ref = a.double() @ w.double().t()
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        runs = {"cublas": lambda i: torch.matmul(a, w.t(), out=c), "rule": lambda i: tmalang.gemm(a, w.t(), c)}
        for tile in plan:
            out_size = 4 if tile[0] == P else 2      # gemm_parts writes f32 slabs
            cfg = configs._config(tile[0], tile[1], tile[2], 2, out_size, tile[3] if len(tile) > 3 else 1)
            runs[cfg.describe()] = (lambda cfg: lambda i: tmalang.gemm(a, w.t(), c, config=cfg))(cfg)
        for name, fn in runs.items():
            c.fill_(float("nan"))
            fn(0)
            torch.cuda.synchronize()
            err = ((c.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{name} at {(m, n, k)}: relative error {err}"
        cold, graph, eager = timed_flushed(runs, 5), timed_graph_replays(runs, 5, 20), timed_eager(runs, 5, 20)
        rule = tmalang.gemm_config(a, w.t()).describe()
        print((m, n, k), "cuBLAS %.1f / %.1f us, rule %s" % (cold["cublas"] * 1e3, graph["cublas"] * 1e3, rule))
        for name in runs:
            print("    %.3f %.3f %.3f %s" % (cold["cublas"] / cold[name], graph["cublas"] / graph[name],
                                         eager["cublas"] / eager[name], name), flush=True)
        out["gemm"].append({"shape": [m, n, k], "rule": rule, "cublas_cold_ms": cold["cublas"],
                            "cublas_graph_ms": graph["cublas"],
                            "cold": {nm: cold["cublas"] / t for nm, t in cold.items()},
                            "graph": {nm: graph["cublas"] / t for nm, t in graph.items()},
                            "eager": {nm: eager["cublas"] / t for nm, t in eager.items()}})
        if args.out:
            args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

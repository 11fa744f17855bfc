"""Every candidate of tmalang.gemm's rule (library/configs.py) at the shapes the rule was revised
for (issue 31): ResNet-50's 1x1 convolutions as GEMMs and the decode and small shapes of
bench/gemm_shapes.py, against cuBLAS (torch.matmul(out=)) in the same run, cold-L2 GPU time and
warm-L2 CUDA-graph replay (bench/timing.py). Every output is checked against float64 first.
The rule's pick is listed as "rule"; the JSON keeps each candidate's ratio to cuBLAS.

    python bench/gemm_rule.py --out bench/results/gemm-rule-<date>-h200.json
    python bench/gemm_rule.py --decode --out bench/results/gemm-decode-<date>-h200.json
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
from timing import timed_flushed, timed_graph_replays  # noqa: E402

import tmalang  # noqa: E402
from tmalang.library import configs  # noqa: E402

SHAPES = [(25088, 128, 512), (25088, 256, 512), (6272, 1024, 256), (6272, 256, 1024), (6272, 512, 1024),
          (1568, 2048, 512), (1568, 512, 2048), (100352, 64, 64),        # ResNet-50's 1x1 layers, N = 32
          (3072, 768, 768), (77, 4096, 4096), (2, 5120, 5120), (1, 4096, 4096), (16, 14336, 4096),
          (1, 8192, 8192), (16, 8192, 8192),
          (8, 4096, 14336), (32, 4096, 4096), (4, 11008, 4096), (1, 14336, 4096)]    # more decode shapes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--decode", action="store_true", help=f"only the shapes of M <= {configs.DECODE_M}")
    args = parser.parse_args()
    out = {"benchmark": "gemm rule candidates", "gpu": torch.cuda.get_device_name(), "date": str(datetime.date.today()),
           "method": "cold: timed_flushed (5 rounds); graph: timed_graph_replays (5 rounds of 20); ratios cuBLAS / candidate",
           "gemm": []}
    for m, n, k in (s for s in SHAPES if not args.decode or s[0] <= configs.DECODE_M):
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        ref = a.double() @ w.double().t()
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        runs = {"cublas": lambda i: torch.matmul(a, w.t(), out=c), "rule": lambda i: tmalang.gemm(a, w.t(), c)}
        # the candidates, and what the revised rule no longer offers (the cluster kernel over
        # short K loops, 256-wide tiles for N <= 128), so that the revision stays checkable
        removed = [configs._config(name, 128, 256, 2, 2) for name in ("gemm_cluster", "gemm_tile")]
        for cfg in dict.fromkeys([*configs.candidates(m, n, k, 2, 2, n_major=False), *removed]):
            runs[cfg.describe()] = (lambda cfg: lambda i: tmalang.gemm(a, w.t(), c, config=cfg))(cfg)
        good = {}
        for name, fn in runs.items():
            try:
                c.fill_(float("nan"))
                fn(0)
                torch.cuda.synchronize()
            except Exception as error:
                print("fail", name, type(error).__name__, str(error)[:120])
                continue
            err = ((c.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{name} at {(m, n, k)}: relative error {err}"
            good[name] = fn
        cold = timed_flushed(good, 5)
        graph = timed_graph_replays(good, 5, 20)
        rule = tmalang.gemm_config(a, w.t()).describe()
        base_c, base_g = cold["cublas"], graph["cublas"]
        rows = sorted(((base_c / cold[nm], base_g / graph.get(nm, 1e9), nm) for nm in good if nm != "cublas"), reverse=True)
        print((m, n, k), "cublas cold %.1f graph %.1f us; rule=%s" % (base_c * 1e3, base_g * 1e3, rule), flush=True)
        for rc, rg, nm in rows[:6]:
            print("    %.2f %.2f %s" % (rc, rg, nm), flush=True)
        out["gemm"].append({"shape": [m, n, k], "rule": rule, "cublas_cold_ms": base_c, "cublas_graph_ms": base_g,
                            "cold": {nm: base_c / t for nm, t in cold.items()}, "graph": {nm: base_g / t for nm, t in graph.items()}})
        if args.out:
            args.out.write_text(json.dumps(out, indent=1) + "\n")

if __name__ == "__main__":
    main()

"""Every tile and split of `tmalang.conv2d`'s im2col kernel (128 x 64, 128 x 128, 128 x 256, 64 x 64,
64 x 128; K in 1, 2 or 4 parts) and, for 1x1 stride-1 layers, the GEMM route (`tmalang.gemm` by
its rule and tuned), against cuDNN in the same run, cold-L2 GPU time (bench/timing.py): the
measurements behind conv2d_kernels.tile_of, split_of and by_gemm (issue 31). The layers are those
bench/conv2d.py found below 0.95x cuDNN and a few that were not. Every output is checked against
float64 first. The library's rule functions are replaced while a variant runs (this is a sweep,
not a use).

    python bench/conv2d_tiles.py --out bench/results/conv2d-tiles-<date>-h200.json
    python bench/conv2d_tiles.py --clusters --out bench/results/conv2d-clusters-<date>-h200.json

With --clusters: the 3x3 and 7x7 layers, 128 x 64, 128 x 128 and 64 x 128 tiles in 1, 2 or 4 parts,
each with CTAs paired in clusters that share the weight tile by multicast ("c") and alone ("u"),
the measurements behind conv2d_kernels.CLUSTER.

With --stages: the layers still below 0.95x cuDNN, 128 x 64, 64 x 128 and 128 x 128 tiles in 1 or
2 parts, each with rings of 4, 6, 8 and as many stages as fit (conv2d_kernels.stages_of caps
128-pixel tiles at six).

    python bench/conv2d_tiles.py --stages --out bench/results/conv2d-stages-<date>-h200.json
"""
import argparse
import datetime
import itertools
import json
import sys
import time
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import timed_flushed  # noqa: E402

import tmalang  # noqa: E402
from tmalang.library import conv2d_kernels as L  # noqa: E402

LAYERS = [(32, 3, 224, 64, 7, 2, 3), (32, 512, 28, 128, 1, 1, 0), (32, 512, 28, 256, 1, 1, 0), (32, 256, 28, 256, 3, 2, 1),
          (32, 256, 14, 1024, 1, 1, 0), (32, 1024, 14, 256, 1, 1, 0), (32, 256, 14, 256, 3, 1, 1), (32, 1024, 14, 512, 1, 1, 0),
          (32, 512, 14, 512, 3, 2, 1), (32, 512, 7, 2048, 1, 1, 0), (32, 2048, 7, 512, 1, 1, 0), (32, 512, 7, 512, 3, 1, 1),
          (64, 64, 56, 64, 3, 1, 1), (16, 128, 64, 128, 3, 1, 1), (32, 64, 56, 64, 1, 1, 0), (128, 64, 28, 64, 3, 1, 1),
          (32, 64, 56, 64, 3, 1, 1), (32, 128, 28, 128, 3, 1, 1), (32, 192, 35, 192, 3, 1, 1), (8, 256, 32, 256, 3, 1, 1)]
TILES = [(128, 64), (128, 128), (128, 256), (64, 64), (64, 128)]
SPLITS = [1, 2, 4]
CLUSTER_TILES = [(128, 64), (128, 128), (64, 128)]
STAGE_LAYERS = [(32, 512, 7, 512, 3, 1, 1), (32, 512, 14, 512, 3, 2, 1), (32, 192, 35, 192, 3, 1, 1),
                (64, 64, 56, 64, 3, 1, 1)]
STAGE_TILES = [(128, 64), (64, 128), (128, 128)]
STAGES = [4, 6, 8, 99]       # 99: as many as fit
real_tile_of, real_by_gemm, real_cluster, real_stages_of = L.tile_of, L.by_gemm, L.CLUSTER, L.stages_of
choice = {"v": None, "gemm": False, "stages": None}
L.tile_of = lambda g, sms=132: choice["v"] or real_tile_of(g, sms)
L.by_gemm = lambda *a: choice["gemm"] and real_by_gemm(*a)


L.stages_of = lambda bm, bn, block, whole_tile=False: real_stages_of(bm, bn, block, whole_tile,
                                                                    choice["stages"] and min(choice["stages"], 12))

def ok(k, tile, sp, steps):
    bm, bn = tile
    return not (bn > 64 and k <= 64 or (bn == 256 and k < 256) or (sp > 1 and steps // sp < 4))

def warm(job):
    g, tile, split, cluster, *stages = job
    choice["stages"] = stages[0] if stages else None
    L.conv_kernel("bf16", False, False, split, L.constants(g, tile), cluster=cluster)
    return job

def main() -> None:
    import multiprocessing as mp
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--clusters", action="store_true", help="each tile and split clustered and alone")
    parser.add_argument("--stages", action="store_true", help="ring depths of the layers below 0.95x")
    args = parser.parse_args()
    layers = [x for x in LAYERS if x[4] > 1] if args.clusters else STAGE_LAYERS if args.stages else LAYERS
    tiles = CLUSTER_TILES if args.clusters else STAGE_TILES if args.stages else TILES
    clusters = (True, False) if args.clusters else (None,)
    depths = STAGES if args.stages else (None,)
    jobs = []
    for n, c, hw, k, r, s, p in layers:
        g = L.Geometry(n, c, hw, hw, k, r, r, (s, s), (p, p), (1, 1))
        jobs += [(g, t, sp, real_cluster if cl is None else cl, d) for t in tiles for sp in (False, True)
                 for cl in clusters for d in depths if ok(k, t, 1, 99)]
    t0 = time.time()
    with mp.get_context("fork").Pool(15) as pool:
        list(pool.imap_unordered(warm, jobs))
    print("warmed", len(jobs), "kernels in %.0f s" % (time.time() - t0), flush=True)
    out = {"benchmark": "conv2d tiles", "gpu": torch.cuda.get_device_name(), "date": str(datetime.date.today()),
           "method": "cold-L2 GPU time (timed_flushed, 5 rounds); ratios cuDNN / variant", "layers": []}
    for n, c, hw, k, r, s, p in layers:
        x = torch.randn(n, c, hw, hw, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        w = (torch.randn(k, c, r, r, device="cuda") / (c * r * r) ** 0.5).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        ref = F.conv2d(x.double(), w.double(), stride=s, padding=p)
        runs = {"cudnn": lambda i: F.conv2d(x, w, stride=s, padding=p)}
        g = L.checked(x, w, s, p, 1, None, None)
        steps = r * r * g.padded_c // g.channel_block
        def setting(tile, sp, by_gemm, cluster=None, stages=None):
            def run(i=0):
                choice["v"], choice["gemm"], choice["stages"] = tile, by_gemm, stages
                L.CLUSTER = real_cluster if cluster is None else cluster
                L.repeats.clear()          # a repeated call would launch the previous variant's kernel
                return tmalang.conv2d(x, w, stride=s, padding=p, split=sp)
            return run
        variants = {f"{t[0]}x{t[1]} split{sp}" + {None: "", True: " c", False: " u"}[cl]
                    + ("" if d is None else f" stages {'max' if d == 99 else d}"): setting(t, sp, False, cl, d)
                    for t in tiles for sp in (SPLITS[:2] if args.stages else SPLITS) for cl in clusters for d in depths
                    if ok(k, t, sp, steps)}
        if args.clusters or args.stages:
            variants["rule"] = setting(None, None, False)
        if r == 1 and s == 1 and not args.clusters:
            variants["gemm"] = setting(None, None, True)
            rows, w2 = x.permute(0, 2, 3, 1).reshape(-1, c), w.reshape(k, c)
            variants["gemm tuned"] = lambda i: tmalang.gemm(rows, w2.t(), tune=True)
            variants["gemm tuned"](0)
        for name, fn in variants.items():
            y = fn(0)
            if name == "gemm tuned":
                y = y.reshape(n, hw, hw, k).permute(0, 3, 1, 2)
            err = ((y.double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, f"{name} at {(n, c, hw, k, r, s, p)}: relative error {err}"
            runs[name] = fn
        times = timed_flushed(runs, 5)
        base = times["cudnn"]
        best = min((t, name) for name, t in times.items() if name != "cudnn")
        print((n, c, hw, k, r, s, p), "cudnn %.1f us" % (base * 1e3), " ".join(f"{name}:{base / t:.2f}" for name, t in times.items() if name != "cudnn"), "BEST", best[1], "%.2f" % (base / best[0]), flush=True)
        out["layers"].append({"layer": [n, c, hw, k, r, s, p], "cudnn_ms": base, "ratios": {name: base / t for name, t in times.items() if name != "cudnn"}})
        if args.out:
            args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

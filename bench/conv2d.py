"""3x3 convolution forward (padding 1): examples/conv2d_sm90.tma (implicit GEMM through TMA im2col
loads, wgmma) against cuDNN (torch.nn.functional.conv2d on channels_last bf16 tensors,
cudnn.benchmark on), in the same run, on the ResNet-50 3x3 layers with N = 32: C = K = 64 at
56², 128 at 28², 256 at 14², 512 at 7² (stride 1), and the stride-2 3x3 layers that open stages
2-4 (ResNet-50 v1.5) as an extra.

The tmalang kernel reads the very memory cuDNN reads: a channels_last activation [N, C, H, W] is
NHWC in memory (its permute to [N, H, W, C] is a view), channels_last weights [K, C, 3, 3] are
KRSC (viewed as [K, 9·C]), and the output rows [N·P·Q, K] are the NHWC output. Every contender's
result is checked against a float64 convolution first (relative Frobenius error). Each
contender is timed three ways (bench/timing.py: cold-L2 GPU time, warm-L2 CUDA-graph replay,
host-inclusive eager calls), two input sets alternating. Tile-width and stage variants of the example are measured too, to show
where the example's 128 x 128 tile sits (the 64-channel layer wastes half of a 128-wide tile).

`tmalang.conv2d` (the library call, issue 31) is timed the same way against cuDNN on every
convolution of ResNet-50 v1.5 at N = 32 (the 7x7 stem, the 1x1 and 3x3 layers of each stage,
stride 1 and 2, the strided 1x1 projections), five 3x3 layers that are not ResNet-50's, and the
patch embeddings of ViT-B/16 (16x16, stride 16, to 768 channels) and Swin-T (4x4, stride 4, to 96).
The example and its variants run with --examples.

    python bench/conv2d.py --out bench/results/conv2d-<date>-h100.json [--examples]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/conv2d.py`, this file's folder heads sys.path, where bench/copy.py would
# shadow the standard library's `copy` module (which torch imports): drop the folder first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, rates, ratios, summary, three_ways  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = (ROOT / "examples" / "conv2d_sm90.tma").read_text()
KERNELS = {1: "conv2d", 2: "conv2d_s2"}
LAYERS = [  # (N, C = K, H = W, stride)
    (32, 64, 56, 1), (32, 128, 28, 1), (32, 256, 14, 1), (32, 512, 7, 1),
    (32, 128, 56, 2), (32, 256, 28, 2), (32, 512, 14, 2),
]
VARIANTS = {  # (tile width = output channels per CTA, ring stages); None: the example as written
    "example 128x128, 4 stages": None,
    "128x64, 6 stages": (64, 6),
    "128x128, 6 stages": (128, 6),
    "128x256, 4 stages": (256, 4),
}
EPILOGUE = """            elect { wait_group read 1 }
            sync
            os0 = bf16(acc[0, 0])
            elect { store Ob[m, 2 * n] <- os0  commit_group }
            elect { wait_group read 1 }
            sync
            os1 = bf16(acc[0, 1])
            elect { store Ob[m, 2 * n + 1] <- os1  commit_group }
"""


def variant_source(width: int, stages: int) -> str:
    """The example with `width` output channels per CTA (B, the tile, the accumulator, one
    64-column epilogue block per 64 channels) and a ring of `stages`. With one block per tile, the
    next tile rewrites the same staging tile, so its store must have read it (wait_group read 0)."""
    blocks = width // 64
    pending = 1 if blocks % 2 == 0 else 0   # a staging tile is rewritten two blocks later (or next tile)
    epilogue = "".join(
        f"            elect {{ wait_group read {pending} }}\n            sync\n"
        f"            os{j % 2} = bf16(acc[0, {j}])\n"
        f"            elect {{ store Ob[m, {blocks} * n + {j}] <- os{j % 2}  commit_group }}\n"
        for j in range(blocks))
    src = EXAMPLE.replace(EPILOGUE, epilogue)
    for old, new in (("box B = w[128, 64]", f"box B = w[{width}, 64]"), ("box T = o[128, 128]", f"box T = o[128, {width}]"),
                     ("acc: f32[128, 128]", f"acc: f32[128, {width}]"), ("ring[4]", f"ring[{stages}]")):
        assert old in src, old
        src = src.replace(old, new)
    return src


LIBRARY_LAYERS = [  # (N, C, H = W, K, R = S, stride, padding)
    (32, 3, 224, 64, 7, 2, 3),                                                                # the stem
    (32, 64, 56, 64, 1, 1, 0), (32, 64, 56, 64, 3, 1, 1), (32, 64, 56, 256, 1, 1, 0), (32, 256, 56, 64, 1, 1, 0),
    (32, 256, 56, 128, 1, 1, 0), (32, 128, 56, 128, 3, 2, 1), (32, 128, 28, 512, 1, 1, 0),
    (32, 256, 56, 512, 1, 2, 0), (32, 512, 28, 128, 1, 1, 0), (32, 128, 28, 128, 3, 1, 1),
    (32, 512, 28, 256, 1, 1, 0), (32, 256, 28, 256, 3, 2, 1), (32, 256, 14, 1024, 1, 1, 0),
    (32, 512, 28, 1024, 1, 2, 0), (32, 1024, 14, 256, 1, 1, 0), (32, 256, 14, 256, 3, 1, 1),
    (32, 1024, 14, 512, 1, 1, 0), (32, 512, 14, 512, 3, 2, 1), (32, 512, 7, 2048, 1, 1, 0),
    (32, 1024, 14, 2048, 1, 2, 0), (32, 2048, 7, 512, 1, 1, 0), (32, 512, 7, 512, 3, 1, 1),
    (64, 64, 56, 64, 3, 1, 1), (16, 128, 64, 128, 3, 1, 1), (8, 256, 32, 256, 3, 1, 1),        # issue 31's
    (128, 64, 28, 64, 3, 1, 1), (32, 192, 35, 192, 3, 1, 1),                                   # five
    (32, 3, 224, 768, 16, 16, 0), (32, 3, 224, 96, 4, 4, 0),        # ViT-B/16's and Swin-T's patch embeddings
]


def library_row(n: int, c: int, hw: int, k: int, r: int, stride: int, padding: int, samples: int) -> dict:
    """tmalang.conv2d as a user calls it (channels_last tensors in, a channels_last result) against
    cuDNN, both checked against a float64 convolution first, then timed three ways."""
    p = (hw + 2 * padding - r) // stride + 1
    flops = 2 * n * p * p * k * r * r * c
    sets = [(torch.randn(n, c, hw, hw, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last),
             (torch.randn(k, c, r, r, device="cuda") / (c * r * r) ** 0.5).to(torch.bfloat16)
             .contiguous(memory_format=torch.channels_last)) for _ in range(2)]
    reference = F.conv2d(sets[0][0].double(), sets[0][1].double(), stride=stride, padding=padding)
    runs = {"cudnn": lambda i: F.conv2d(*sets[i], stride=stride, padding=padding),
            "tmalang": lambda i: tmalang.conv2d(*sets[i], stride=stride, padding=padding)}
    row = {"layer": {"N": n, "C": c, "H": hw, "W": hw, "K": k, "R": r, "S": r, "stride": stride, "padding": padding,
                     "P": p, "Q": p}, "gflop": flops / 1e9}
    for name, run in runs.items():
        checked(row, name, run(0), reference)
    timed(row, runs, flops, samples)
    row["tmalang_vs_cudnn"] = ratios(row["tmalang"], row["cudnn"])
    return row


def checked(row: dict, name: str, out: torch.Tensor, reference: torch.Tensor) -> None:
    """A contender's first output against float64, before any timing."""
    torch.cuda.synchronize()
    error = ((out.double() - reference).norm() / reference.norm()).item()
    assert error < 1e-2, f"{name} at {row['layer']}: relative error {error}"
    row[name] = {"rel_err_vs_float64": error}


def timed(row: dict, runs: dict, flops: float, samples: int) -> None:
    batch = max(4, int(2e12 // flops))
    for name, times in three_ways(runs, samples, batch).items():
        row[name].update(times, tflops=rates(flops, times))


def layer_row(kernels: dict, n: int, c: int, hw: int, stride: int, samples: int) -> dict:
    k = c
    p = (hw - 1) // stride + 1
    flops = 2 * n * p * p * k * 9 * c
    sets = [(torch.randn(n, c, hw, hw, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last),
             torch.randn(k, c, 3, 3, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last))
            for _ in range(2)]
    views = [(x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1).reshape(k, 9 * c)) for x, w in sets]
    out = torch.empty(n * p * p, k, device="cuda", dtype=torch.bfloat16)
    reference = F.conv2d(sets[0][0].double(), sets[0][1].double(), stride=stride, padding=1)
    reference = reference.permute(0, 2, 3, 1).reshape(-1, k)
    cudnn_out = {}

    def cudnn(i):
        cudnn_out[0] = F.conv2d(sets[i][0], sets[i][1], stride=stride, padding=1)

    runs = {"cudnn": cudnn}
    for label, kernel in kernels.items():
        runs[label] = lambda i, kernel=kernel: kernel(views[i][0], views[i][1], out)
    row = {"layer": {"N": n, "C": c, "K": k, "H": hw, "W": hw, "stride": stride, "P": p, "Q": p}, "gflop": flops / 1e9}
    for name, run in runs.items():
        out.fill_(float("nan"))
        run(0)
        checked(row, name, out if name != "cudnn" else cudnn_out[0].permute(0, 2, 3, 1).reshape(-1, k), reference)
    timed(row, runs, flops, samples)
    for label in kernels:
        row[label]["ratio_vs_cudnn"] = ratios(row[label], row["cudnn"])
    best = max(kernels, key=lambda label: row[label]["tflops"]["cold_l2"])
    row["best_variant"] = best
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--examples", action="store_true", help="also the example and its tile variants")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    library = []
    for layer in LIBRARY_LAYERS:
        row = library_row(*layer, args.samples)
        library.append(row)
        print(f"tmalang.conv2d {layer}: vs cuDNN {summary(row['tmalang_vs_cudnn'])}", flush=True)
    rows = []
    for n, c, hw, stride in LAYERS if args.examples else []:
        kernels = {label: tmalang.compile(EXAMPLE if shape is None else variant_source(*shape), kernel=KERNELS[stride])
                   for label, shape in VARIANTS.items()}
        row = layer_row(kernels, n, c, hw, stride, args.samples)
        rows.append(row)
        example = next(iter(VARIANTS))
        print(f"N={n} C=K={c} {hw}x{hw} stride {stride}: example/cuDNN {summary(row[example]['ratio_vs_cudnn'])}  "
              f"best {row['best_variant']} {summary(row[row['best_variant']]['ratio_vs_cudnn'])}", flush=True)
    report = {
        "benchmark": "conv forward, bf16 channels_last: tmalang.conv2d on ResNet-50's layers and five more "
                     "(library), and the 3x3 example examples/conv2d_sm90.tma with its variants (results), vs "
                     "cuDNN (torch.nn.functional.conv2d, channels_last, cudnn.benchmark)",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
        "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
        "method": f"{METHOD}; {args.samples} rounds, two input sets alternating; TFLOP/s = 2·N·P·Q·K·R·S·C / time",
        "library": library,
        "results": rows,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

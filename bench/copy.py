"""TMA copy bandwidth: examples/tma_copy.tma and the bulk copy examples/bulk_copy_sm90.tma (one
cp.async.bulk per 16 KiB row chunk, no tensor map) against torch `copy_` on 1 GiB of f32, same
run; then the same three at 64 MiB (results labelled "@ 64 MiB"); then `tmalang.copy` at both
sizes and on a 1 x 1,048,576 tensor, with the example and torch there.

Bandwidth counts bytes read plus bytes written. Each sample times a batch of back-to-back
launches between two CUDA events (so host-side launch work overlaps the GPU, as in real use);
the reported figure is the median over many samples after warm-up. Box/stage variants of the
example are measured too, to show where the example's configuration sits.

    python bench/copy.py --out bench/results/copy-<date>.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/copy.py`, this file's folder heads sys.path and its name would shadow the
# standard library's `copy` module (which torch imports): drop the folder first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import datetime
import json
import statistics

import torch

import tmalang

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = (ROOT / "examples" / "tma_copy.tma").read_text()
BULK_EXAMPLE = (ROOT / "examples" / "bulk_copy_sm90.tma").read_text()
BULK_VARIANTS = {  # (chunk f32 elements, stages); the chunk must divide the 16384 columns
    "bulk example 4096 f32, 6 stages": None,
    "bulk 2048 chunks, 8 stages": (2048, 8),
    "bulk 8192 chunks, 3 stages": (8192, 3),
}
VARIANTS = {  # (box rows, box cols, stages)
    "example 64x128 f32, 4 stages": None,
    "32x128, 6 stages": (32, 128, 6),
    "128x64, 3 stages": (128, 64, 3),
    "64x64, 6 stages": (64, 64, 6),
    "64x128, 3 stages (2 CTAs/SM)": (64, 128, 3),
    "64x64, 4 stages (3 CTAs/SM)": (64, 64, 4),
    "32x128, 2 stages (6 CTAs/SM)": (32, 128, 2),
    "64x128, 4 stages, cache evict_first": (64, 128, 4, "evict_first"),
    "64x128, 6 stages, cache evict_first": (64, 128, 6, "evict_first"),
    "128x128, 3 stages, cache evict_first": (128, 128, 3, "evict_first"),
}


def variant_source(rows: int, cols: int, stages: int, cache: str = "") -> str:
    """The example with another box and ring; `cache`: an L2 eviction policy on both boxes (§13b),
    so that streamed data does not push out what is still to be read."""
    src = EXAMPLE.replace("[64, 128]", f"[{rows}, {cols}]" + (f" cache {cache}" if cache else ""))
    return src.replace("ring[4]", f"ring[{stages}]")


def bulk_variant_source(chunk: int, stages: int) -> str:
    src = BULK_EXAMPLE.replace("[4096]", f"[{chunk}]")
    return src.replace("ring[6]", f"ring[{stages}]")


def measure(label: str, kernel, src, dst, t_torch: float, moved: int, args) -> dict:
    """One kernel's median time after checking that it copies `src` exactly."""
    dst.fill_(float("nan"))
    kernel(src, dst)
    torch.cuda.synchronize()
    assert torch.equal(dst, src), f"{label}: wrong result"
    t = median_ms(lambda: kernel(src, dst), args.samples, args.batch)
    return {"ms": t, "TB/s": moved / t / 1e9, "ratio_vs_torch": t_torch / t}


def median_ms(fn, samples: int, batch: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / batch)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()

    rows, cols = 16384, 16384  # 2^28 f32 = 1 GiB
    src = torch.randn(rows, cols, device="cuda")
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * src.element_size()

    results = {}
    t_torch = median_ms(lambda: dst.copy_(src), args.samples, args.batch)
    results["torch copy_"] = {"ms": t_torch, "TB/s": moved / t_torch / 1e9}
    for label, shape in VARIANTS.items():
        kernel = tmalang.compile(EXAMPLE if shape is None else variant_source(*shape))
        results[label] = measure(label, kernel, src, dst, t_torch, moved, args)
    for label, shape in BULK_VARIANTS.items():
        kernel = tmalang.compile(BULK_EXAMPLE if shape is None else bulk_variant_source(*shape))
        results[label] = measure(label, kernel, src, dst, t_torch, moved, args)
    t_torch_again = median_ms(lambda: dst.copy_(src), args.samples, args.batch)
    results["torch copy_ (again, spread check)"] = {"ms": t_torch_again, "TB/s": moved / t_torch_again / 1e9}

    small_src, small_dst = src[:1024], dst[:1024]   # 1024 x 16384 f32 = 64 MiB
    small_moved = 2 * small_src.numel() * small_src.element_size()
    t_small = median_ms(lambda: small_dst.copy_(small_src), args.samples, args.batch)
    results["torch copy_ @ 64 MiB"] = {"ms": t_small, "TB/s": small_moved / t_small / 1e9}
    for label, source in (("tma_copy example @ 64 MiB", EXAMPLE), ("bulk example @ 64 MiB", BULK_EXAMPLE)):
        results[label] = measure(label, tmalang.compile(source), small_src, small_dst, t_small, small_moved, args)

    library = lambda s, d: tmalang.copy(s, d)   # noqa: E731  (tmalang.copy: the box fits the layout)
    results["tmalang.copy"] = measure("tmalang.copy", library, src, dst, t_torch, moved, args)
    results["tmalang.copy @ 64 MiB"] = measure("tmalang.copy @ 64 MiB", library, small_src, small_dst, t_small,
                                              small_moved, args)
    row_src, row_dst = src.reshape(-1)[:1 << 20].reshape(1, -1), dst.reshape(-1)[:1 << 20].reshape(1, -1)
    row_moved = 2 * row_src.numel() * row_src.element_size()   # 1 x 1,048,576 f32: issue 31's one-row case
    t_row = median_ms(lambda: row_dst.copy_(row_src), args.samples, args.batch)
    results["torch copy_ @ 1 x 1,048,576"] = {"ms": t_row, "TB/s": row_moved / t_row / 1e9}
    results["tma_copy example @ 1 x 1,048,576"] = measure("tma_copy example @ 1 x 1,048,576", tmalang.compile(EXAMPLE),
                                                         row_src, row_dst, t_row, row_moved, args)
    results["tmalang.copy @ 1 x 1,048,576"] = measure("tmalang.copy @ 1 x 1,048,576", library, row_src, row_dst, t_row,
                                                     row_moved, args)

    report = {
        "benchmark": "tma_copy 1 GiB f32 vs torch copy_",
        "gpu": torch.cuda.get_device_name(),
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "bytes_moved_per_copy": moved,
        "method": f"median of {args.samples} samples, each {args.batch} back-to-back launches timed with CUDA events",
        "results": results,
    }
    print(f"{'variant':<36} {'ms':>8} {'TB/s':>7} {'vs torch':>9}")
    for label, r in results.items():
        print(f"{label:<36} {r['ms']:8.3f} {r['TB/s']:7.3f} {r.get('ratio_vs_torch', 1.0):9.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

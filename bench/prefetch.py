"""Prefetch to L2 and L2 cache policies, measured: where prefetch helps, and that it costs the
GEMM nothing. Same run, same GPU, contenders timed in turns.

1. blocksum (examples/blocksum.tma: a 64-row band of x per CTA, streamed along K through a ring)
   with a shallow 2-stage ring, without and with `prefetch X[m, k + D]` issued ahead of the loads
   (examples/blocksum_prefetch.tma is D = 4 with evict_first and `prefetch tensormaps`), next to
   the 4-stage example. Figures are bytes of x read per second. Shapes: one 64-row band per SM
   (132 CTAs), and half the SMs busy (66 bands), where one CTA's latency bounds its stream.
2. The persistent wgmma GEMM (examples/gemm_sm90.tma) at 8192³ bf16 against itself with tensor
   maps prefetched, with L2 policies (A and B evict_last, C evict_first), and with A prefetched
   8 K-slices ahead: no variant may be slower.

Each sample times a batch of back-to-back launches between two CUDA events (one untimed launch
enqueued first, so the start event fires on a busy GPU); the figure is the median over the
samples after warm-up. Every variant's result is checked bit for bit against the plain kernel.

    python bench/prefetch.py --out bench/results/prefetch-<date>-h100.json     (about 30 s)
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as `python bench/prefetch.py`, this file's folder heads sys.path, where bench/copy.py would
# shadow the standard library's `copy` module (which lark and torch import): drop the folder.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import datetime
import json

import torch

import tmalang

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import timed_in_turns  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BLOCKSUM = (ROOT / "examples" / "blocksum.tma").read_text()
BLOCKSUM_PREFETCH = (ROOT / "examples" / "blocksum_prefetch.tma").read_text()
GEMM = (ROOT / "examples" / "gemm_sm90.tma").read_text()
PREFETCH_LINE = "                elect { prefetch X[m, k + 4] }\n"


def blocksum_variant(stages: int, ahead: int, hint: bool = True, maps: bool = True) -> str:
    """blocksum_prefetch with `stages` ring stages, prefetching `ahead` slices ahead (0: none)."""
    src = BLOCKSUM_PREFETCH.replace("ring[2]", f"ring[{stages}]")
    src = src.replace(PREFETCH_LINE, PREFETCH_LINE.replace("k + 4", f"k + {ahead}") if ahead else "")
    src = src if hint else src.replace(" cache evict_first", "")
    return src if maps else src.replace("    prefetch tensormaps\n", "")


BLOCKSUM_VARIANTS = {
    "blocksum example (ring 4, no prefetch)": BLOCKSUM,
    "ring 2, no prefetch": blocksum_variant(2, 0, hint=False, maps=False),
    "ring 2, prefetch 4 ahead, evict_first, tensormaps (the example)": BLOCKSUM_PREFETCH,
    "ring 2, prefetch 4 ahead only": blocksum_variant(2, 4, hint=False, maps=False),
    "ring 2, prefetch 8 ahead": blocksum_variant(2, 8),
    "ring 2, no prefetch, evict_first only": blocksum_variant(2, 0, maps=False),
    "ring 4, prefetch 8 ahead": blocksum_variant(4, 8),
}


def gemm_variant(maps: bool, hints: bool, ahead: bool) -> str:
    src = GEMM
    if maps:
        src = src.replace("    grid persistent\n", "    grid persistent\n    prefetch tensormaps\n")
    if hints:
        src = _edit(src, "box A = a[BM, BK] swizzle SWIZZLE", "box A = a[BM, BK] swizzle SWIZZLE cache evict_last")
        src = _edit(src, "box B = b[BN, BK] swizzle SWIZZLE", "box B = b[BN, BK] swizzle SWIZZLE cache evict_last")
        src = _edit(src, "box C = c[BM, (BN / 4)] swizzle CSWIZZLE",
                    "box C = c[BM, (BN / 4)] swizzle CSWIZZLE cache evict_first")
    if ahead:
        src = _edit(src, "    box B = b[BN, BK]", "    box Ahead = a[BM, BK] swizzle SWIZZLE\n    box B = b[BN, BK]")
        src = _edit(src, "            for k in steps(K, BK) {\n                produce",
                    "            for k in steps(K, BK) {\n                elect { prefetch Ahead[m, k + 8] }\n"
                    "                produce")
    return src


def _edit(src: str, old: str, new: str) -> str:
    """One edit of the example's text, which must still hold `old` (else the variant would
    silently be the example)."""
    assert old in src, old
    return src.replace(old, new, 1)


GEMM_VARIANTS = {
    "gemm_sm90 example": GEMM,
    "+ prefetch tensormaps": gemm_variant(True, False, False),
    "+ tensormaps, A/B evict_last, C evict_first": gemm_variant(True, True, False),
    "+ tensormaps, policies, A prefetched 8 slices ahead": gemm_variant(True, True, True),
}


def blocksum_rows(rounds: int) -> list[dict]:
    kernels = {label: tmalang.compile(src) for label, src in BLOCKSUM_VARIANTS.items()}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for bands, k in ((sms, 16384), (sms // 2, 32768)):
        m = 64 * bands
        xs = [torch.randn(m, k, device="cuda") for _ in range(2)]
        out = torch.empty(m, 64, device="cuda")
        first = next(iter(kernels.values()))
        first(xs[0], out)
        reference = out.clone()
        runs = {}
        for label, kernel in kernels.items():
            out.fill_(float("nan"))
            kernel(xs[0], out)
            torch.cuda.synchronize()
            assert torch.equal(out, reference), f"blocksum {label}: result differs from the example"
            runs[label] = lambda i, kernel=kernel: kernel(xs[i], out)
        read = m * k * 4
        ms = timed_in_turns(runs, rounds, batch=10)
        base = ms["ring 2, no prefetch"]
        rows.append({"shape": [m, k], "bands": bands, "bytes_read": read,
                     "variants": {label: {"ms": t, "TB/s": read / t / 1e9, "speedup_vs_ring2_no_prefetch": base / t}
                                  for label, t in ms.items()}})
        print(f"blocksum {m}x{k} ({bands} bands):")
        for label, t in ms.items():
            print(f"  {label:<66} {t:7.3f} ms {read / t / 1e9:6.3f} TB/s  {base / t:5.3f}x")
    return rows


def gemm_rows(rounds: int, size: int = 8192) -> dict:
    kernels = {label: tmalang.compile(src) for label, src in GEMM_VARIANTS.items()}
    sets = [(torch.randn(size, size, device="cuda").to(torch.bfloat16),
             torch.randn(size, size, device="cuda").to(torch.bfloat16)) for _ in range(2)]
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    runs = {}
    reference = None
    for label, kernel in kernels.items():
        c.fill_(float("nan"))
        kernel(*sets[0], c)
        torch.cuda.synchronize()
        reference = c.clone() if reference is None else reference
        assert torch.equal(c.view(torch.int16), reference.view(torch.int16)), f"gemm {label}: bits differ"
        runs[label] = lambda i, kernel=kernel: kernel(*sets[i], c)
    flops = 2 * size ** 3
    ms = timed_in_turns(runs, rounds, batch=5)
    base = ms["gemm_sm90 example"]
    print(f"gemm {size}^3 bf16:")
    for label, t in ms.items():
        print(f"  {label:<66} {t:7.3f} ms {flops / t / 1e9:6.0f} TFLOP/s  {base / t:5.3f}x")
    return {"shape": [size] * 3, "variants": {label: {"ms": t, "tflops": flops / t / 1e9, "speedup_vs_example": base / t}
                                              for label, t in ms.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    report = {
        "benchmark": "L2 prefetch and cache policies: blocksum with a shallow ring, and the wgmma GEMM (bench/prefetch.py)",
        "gpu": torch.cuda.get_device_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "method": f"median of {args.rounds} event-timed batches per variant after warm-up, variants timed in turns",
        "blocksum": blocksum_rows(args.rounds),
        "gemm": gemm_rows(args.rounds),
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

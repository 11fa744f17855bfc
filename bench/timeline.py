"""What the hardware timeline costs gemm_sm90 at 8192³: the plain kernel against the kernel
compiled with the stamps, (a) not recording (every CTA only tests whether it records) and (b)
recording 1 and 2 CTAs (a fresh buffer armed before each launch, outside the timed events). Each
is the median of CUDA-event-timed single launches after warm-up. The stamped build's result is
checked against the plain one bit for bit.

    python bench/timeline.py --out bench/results/timeline-<date>-h100.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402

import tmalang  # noqa: E402
from tmalang.runtime import timeline  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def launch_ms(fn, runs: int) -> float:
    """Median of `runs` event-timed single launches, after warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return statistics.median(_timed(fn) for _ in range(runs))


def _timed(fn) -> float:
    """Milliseconds of one launch between CUDA events."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--runs", type=int, default=31)
    args = parser.parse_args()
    size = 8192
    a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    plain_out, timed_out = (torch.empty(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    kernel = tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma")
    kernel.profile(a, b, timed_out, ctas=1)      # compiles and loads the stamped build
    stamped = kernel._profiled
    kernel(a, b, plain_out)
    torch.cuda.synchronize()
    assert torch.equal(plain_out, timed_out), "the stamps changed the result"
    rows = {"plain": launch_ms(lambda: kernel(a, b, plain_out), args.runs),
            "stamped, not recording": launch_ms(lambda: stamped(a, b, timed_out), args.runs)}
    module = stamped._load(0).module
    for ctas in (1, 2):
        times = []
        for _ in range(max(5, args.runs // 3)):
            buffer = timeline.arm(module, stamped.manifest, ctas, capacity=1 << 16)
            times.append(_timed(lambda: stamped(a, b, timed_out)))   # armed before, read after
            timeline.read(buffer, stamped.manifest)
        timeline.disarm(module)
        rows[f"recording {ctas} CTA(s)"] = statistics.median(times)
    flops = 2 * size ** 3
    report = {
        "benchmark": "the hardware timeline's cost on gemm_sm90 at 8192^3 (examples/gemm_sm90.tma)",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "method": f"median of CUDA-event-timed single launches after warm-up ({args.runs}; recording: "
                  f"{max(5, args.runs // 3)}, each with a fresh buffer armed before and read after the timed launch)",
        "results": {name: {"ms": ms, "tflops": flops / ms / 1e9, "vs_plain": ms / rows["plain"] - 1}
                    for name, ms in rows.items()},
    }
    for name, r in report["results"].items():
        print(f"{name}: {r['ms']:.3f} ms  {r['tflops']:.0f} TFLOP/s  {100 * r['vs_plain']:+.2f}%", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

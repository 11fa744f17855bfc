"""Interpreter speed: wall time and simulated events per second on the examples.

An event is one scheduler step: an op of one warp, or a TMA transfer landing. The brief's
target: a 2048x2048 tma_copy verified in under 5 s on a 2-core CPU.

    python bench/interp.py --out bench/results/interp-<date>.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import datetime
import json
import platform
import statistics
import time

import numpy as np

import tmalang
from tmalang.interp import machine

ROOT = Path(__file__).resolve().parents[1]
CASES = [("tma_copy", (2048, 2048)), ("saxpy", (2048, 2048)), ("copy_explicit", (1024, 1024))]


def inputs(name: str, shape, rng):
    arrays = [rng.standard_normal(shape, dtype=np.float32) for _ in range(2 if name == "saxpy" else 1)]
    out = np.zeros(shape, dtype=np.float32)
    return ([np.float32(0.5)] if name == "saxpy" else []) + arrays + [out]


def count_steps(run) -> int:
    """Run once, counting scheduler steps through the CTA constructor."""
    steps, original = [], machine.CTA.__init__

    def counting_init(self, *a, **k):
        original(self, *a, **k)
        steps.append(self)

    machine.CTA.__init__ = counting_init
    try:
        run()
    finally:
        machine.CTA.__init__ = original
    return sum(c.step for c in steps)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    results = {}
    for name, shape in CASES:
        kernel = tmalang.compile_file(ROOT / "examples" / f"{name}.tma")
        data = inputs(name, shape, rng)
        steps = count_steps(lambda: kernel.interpret(*data))
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            kernel.interpret(*data)
            times.append(time.perf_counter() - start)
        wall = statistics.median(times)
        results[f"{name} {shape[0]}x{shape[1]}"] = {"seconds": wall, "events": steps, "events_per_second": steps / wall}
    report = {"benchmark": "reference interpreter", "date": datetime.date.today().isoformat(),
              "machine": f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores",
              "python": platform.python_version(), "results": results}
    for label, r in results.items():
        print(f"{label:<28} {r['seconds']:7.3f} s  {r['events']:>8} events  {r['events_per_second']:>10.0f} events/s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

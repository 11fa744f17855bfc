"""Every trip count, example by example: what `prove_every_trip_count` shows and what it costs (issue 28).

For every example (its target as tests/conftest.py picks it), every kernel in it and every
symbolic dim: the wall time of `tmalang.verify.trip_proof.prove_every_trip_count`, whether it
showed every trip count (and from which launches, with how many trips per tile per CTA), or the
trip counts it ran and why the argument did not apply, or the launch that failed.

    python bench/verify_trip_counts.py [--budget 180] [--out FILE.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import datetime
import json
import os
import platform
import re
import time

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import tmalang                                   # noqa: E402
from conftest import EXAMPLES, example_arch      # noqa: E402
from tmalang.verify.launches import units        # noqa: E402
from tmalang.verify.trip_proof import prove_every_trip_count   # noqa: E402


def measure(path: Path, kernel_name: str, dim: str, budget: float) -> dict:
    kernel = tmalang.compile_file(path, arch=example_arch(path), kernel=kernel_name)
    start = time.perf_counter()
    proof = prove_every_trip_count(kernel._c.ir, kernel.manifest, dim, budget=budget)
    seconds = time.perf_counter() - start
    return {"example": path.stem, "kernel": kernel_name, "arch": example_arch(path), "dim": dim,
            "seconds": round(seconds, 2), "every_trip_count": proof.every_trip_count,
            "failed_at": proof.failed[0] if proof.failed else None, "trip_counts_run": sorted(proof.runs),
            "trips_per_launch": proof.period, "pumped_from": proof.t0, "why_not": proof.why or None,
            "summary": proof.summary()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=180.0, help="seconds of runs per dim")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for path in sorted(EXAMPLES):
        for name in re.findall(r"^\s*kernel (\w+)", path.read_text(), re.M):
            ir = tmalang.compile_file(path, arch=example_arch(path), kernel=name)._c.ir
            for dim in sorted(units(ir)):
                rows.append(measure(path, name, dim, args.budget))
                print(f"{rows[-1]['seconds']:7.1f} s  {path.stem}/{name} {rows[-1]['summary']}", flush=True)
    shown = sum(r["every_trip_count"] for r in rows)
    report = {"date": datetime.date.today().isoformat(), "machine": f"{platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} cores, no GPU (the interpreter)", "python": platform.python_version(),
              "dims": len(rows), "every_trip_count": shown, "failed": sum(r["failed_at"] is not None for r in rows),
              "total_seconds": round(sum(r["seconds"] for r in rows), 1), "rows": rows}
    print(f"{shown} of {len(rows)} dims shown for every trip count; {report['total_seconds']} s in all")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

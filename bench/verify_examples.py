"""What `verify` costs, example by example, and against a cold compile of gemm_sm90 (issue 28).

For every example (its target as tests/conftest.py picks it, inputs from tests/references.py at
each shape), on 1 and 3 CTAs: the wall time of `Kernel.verify` and of the interpreter run alone
(one schedule, the run verify records), the recorded steps and agents, and the verdict. Then a
cold compile of examples/gemm_sm90.tma (a fresh process, the compile cache off: TMALANG_CACHE=0;
the parser's tables built by a first, small compile, as bench/compile_times.py counts "cold")
against verify of that kernel at a small launch: the issue asks whether `verify` can run by
default in tmalang.compile if it adds under 20% to that compile.

    python bench/verify_examples.py [--shapes 200x260,64x64] [--runs 3] [--out FILE.json]
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
import statistics
import subprocess
import time

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import tmalang                                   # noqa: E402
from conftest import EXAMPLES, example_arch      # noqa: E402
from references import CASES                     # noqa: E402

GEMM = ROOT / "examples" / "gemm_sm90.tma"
SMALL_GEMM_SHAPE = (256, 256)

COLD_COMPILE = f"""
import json, time
import tmalang
tmalang.compile_file({str(ROOT / 'examples' / 'tma_copy.tma')!r})    # the parser's tables, once per process
start = time.perf_counter()
tmalang.compile_file({str(GEMM)!r})
print(json.dumps(time.perf_counter() - start))
"""


def median_time(run, runs: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def measure(path: Path, shape, ctas: int, runs: int) -> dict:
    kernel = tmalang.compile_file(path, arch=example_arch(path))
    args, _ = CASES[kernel.name](np.random.default_rng(5), shape)
    interp_s, _ = median_time(lambda: kernel.interpret(*_fresh(args), ctas=ctas), runs)
    verify_s, verdict = median_time(lambda: kernel.verify(*args, ctas=ctas), runs)
    return {"example": path.stem, "arch": example_arch(path), "shape": list(shape), "ctas": ctas,
            "verify_s": round(verify_s, 4), "interpret_s": round(interp_s, 4),
            "verify_over_interpret": round(verify_s / interp_s, 2) if interp_s else None,
            "steps": verdict.states, "agents": verdict.agents, "verified": verdict.verified,
            "error": verdict.error.code if verdict.error else None, "not_covered": verdict.not_covered,
            "verdict": verdict.summary()}


def _fresh(args) -> list:
    """The interpreter writes its outputs: each run gets copies, laid out as the originals."""
    from references import padded_copy
    return [padded_copy(a) if isinstance(a, np.ndarray) else a for a in args]


def cold_compile_seconds(runs: int) -> list[float]:
    env = {**os.environ, "TMALANG_CACHE": "0"}
    return [json.loads(subprocess.run([sys.executable, "-c", COLD_COMPILE], capture_output=True, text=True,
                                      check=True, env=env, cwd=ROOT).stdout) for _ in range(runs)]


def gemm_cost(runs: int) -> dict:
    compiles = cold_compile_seconds(runs)
    compile_s = statistics.median(compiles)
    small = {}
    for ctas in (1, 3):
        row = measure(GEMM, SMALL_GEMM_SHAPE, ctas, runs)
        small[str(ctas)] = {**row, "verify_over_cold_compile": round(row["verify_s"] / compile_s, 3)}
    return {"cold_compile_s": round(compile_s, 4), "cold_compile_runs_s": [round(c, 4) for c in compiles],
            "how": "fresh process, TMALANG_CACHE=0, after a first compile of tma_copy (parser tables built)",
            "verify_small_launch": small, "threshold": 0.20,
            "under_threshold": all(r["verify_over_cold_compile"] < 0.20 for r in small.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="200x260", help="comma-separated MxN shapes (default 200x260)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per figure (median)")
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in options.shapes.split(",")]
    rows = []
    for path in EXAMPLES:
        for shape in shapes:
            for ctas in (1, 3):
                row = measure(path, shape, ctas, options.runs)
                rows.append(row)
                print(f"{row['example']:28s} {shape} ctas={ctas}: verify {row['verify_s']:.3f}s, "
                      f"interpret {row['interpret_s']:.3f}s, {row['steps']} steps, {row['agents']} agents: "
                      f"{row['verdict']}", flush=True)
    gemm = gemm_cost(options.runs)
    print(f"gemm_sm90 cold compile {gemm['cold_compile_s']:.3f}s; verify at {SMALL_GEMM_SHAPE}: " +
          ", ".join(f"{c} CTA(s) {r['verify_s']:.3f}s ({100 * r['verify_over_cold_compile']:.1f}%)"
                    for c, r in gemm["verify_small_launch"].items()))
    result = {"benchmark": "verify_examples", "date": datetime.date.today().isoformat(),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (cpu2 box, no GPU)",
              "python": platform.python_version(), "runs": options.runs, "results": rows,
              "total_verify_s": round(sum(r["verify_s"] for r in rows), 3), "gemm_sm90_cost": gemm}
    out = options.out or ROOT / "bench" / "results" / f"verify-examples-{result['date']}-cpu2.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

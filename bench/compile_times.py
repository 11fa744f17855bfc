"""How long tmalang takes before a kernel runs: `import tmalang`, a cold compile of
examples/gemm_sm90.tma to PTX in-process (and its stages), and `tmalangc` cold, warm (answered by
the whole-compile cache) and `--help` for scale. Every figure is the median of fresh processes.
"Cold" is a first compile of the kernel: an empty compile cache, but the parser's tables already
built (once per install, like the .pyc files).

    python bench/compile_times.py [--runs 7] [--json out.json]

No GPU needed; the figures in README.md were taken on the GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "examples" / "gemm_sm90.tma"

IMPORT = "import time; t = time.perf_counter(); import tmalang; print(time.perf_counter() - t)"
COMPILE = """
import time
from tmalang.compiler import compile_source, Options
from tmalang.passes import PassLog
text = open(PATH).read()
log = PassLog()
t = time.perf_counter()
compile_source(text, PATH, Options(log=log), until=UNTIL)
total = time.perf_counter() - t
import json
print(json.dumps({"total": total, "stages": dict((n, s) for n, s in log.timings)}))
"""


def python(code: str, env: dict) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout


def wall(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, env=env)
    return time.perf_counter() - start


def median_ms(values) -> float:
    return round(statistics.median(values) * 1e3, 1)


def fresh_cache(seed: Path) -> str:
    """An empty compile cache holding only the parser's tables (built once per install, as the
    .pyc files are): what a first compile of a new kernel meets."""
    folder = Path(tempfile.mkdtemp(prefix="tmalang-bench-cache-"))
    for tables in seed.glob("parser-*.pickle"):
        shutil.copy(tables, folder)
    return str(folder)


def measure(runs: int) -> dict:
    seed = Path(tempfile.mkdtemp(prefix="tmalang-bench-seed-"))
    env = {**os.environ, "TMALANG_CACHE_DIR": str(seed), "PYTHONDONTWRITEBYTECODE": "0"}
    tmalangc = [sys.executable, "-m", "tmalang"]
    out = str(seed / "g.ptx")
    python(IMPORT, env)                        # byte-compile once, as an installed package is
    subprocess.run([*tmalangc, str(GEMM), "-o", out], check=True, env=env)   # and build the parser's tables
    results = {"import_tmalang_ms": median_ms(float(python(IMPORT, env)) for _ in range(runs))}
    for until in ("ptx", "cubin"):
        code = COMPILE.replace("PATH", repr(str(GEMM))).replace("UNTIL", repr(until))
        runs_data = [json.loads(python(code, {**env, "TMALANG_CACHE_DIR": fresh_cache(seed)})) for _ in range(runs)]
        results[f"in_process_to_{until}_ms"] = median_ms(r["total"] for r in runs_data)
        if until == "ptx":
            results["stages_ms"] = {name: median_ms(r["stages"][name] for r in runs_data)
                                    for name in runs_data[0]["stages"]}
    results["tmalangc_help_ms"] = median_ms(wall([*tmalangc, "--help"], env) for _ in range(runs))
    results["tmalangc_cold_ptx_ms"] = median_ms(
        wall([*tmalangc, str(GEMM), "-o", out], {**env, "TMALANG_CACHE_DIR": fresh_cache(seed)}) for _ in range(runs))
    results["tmalangc_warm_ptx_ms"] = median_ms(wall([*tmalangc, str(GEMM), "-o", out], env) for _ in range(runs))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    results = {"date": date.today().isoformat(), "machine": platform.node(), "cpu": platform.processor(),
               "python": platform.python_version(), "runs": args.runs, **measure(args.runs)}
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()

"""Does the TMA copy trail torch `copy_` because its stores are serialised? tmalang.copy's bulk
kernel (tmalang/library/copy_sm90.tma, copy_rows) waits `cp.async.bulk.wait_group.read 0` after
each store before it frees the slot: one store in flight per CTA. This benchmark edits that wait
in the PTX to `read N` (N = 1..3: up to N+1 stores in flight), at several ring depths and chunk
sizes, and times each against torch `copy_` in the same run, at 1 GiB and 64 MiB of f32.

The edited kernels free a slot while a store may still read it: they are for timing only, and
their outputs are not checked. (Measured on an H200, bench/results/copy-store-depth-2026-11-29-
h200.json: every variant 0.89-0.95x torch, with no trend in N, the stages or the chunk: the store
depth is not the limit.)

    python bench/copy_store_depth.py --out bench/results/copy-store-depth-<date>-h200.json
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
from timing import timed_in_turns  # noqa: E402

import tmalang  # noqa: E402
from tmalang.backend import ptxas  # noqa: E402
from tmalang.library.copy import SOURCE  # noqa: E402
from tmalang.runtime.launch import Launcher  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    source = SOURCE.read_text()
    ratios = {}
    for nbytes in (1 << 30, 64 << 20):
        x = torch.randn(nbytes // 4, device="cuda")
        y = torch.empty_like(x)
        for chunk in (4096, 2048):
            for stages in (3, 4, 6, 8, 12):
                kernel = tmalang.compile(source, kernel="copy_rows", constants=dict(T="u32", CHUNK=chunk, STAGES=stages))
                for depth in range(min(4, stages)):
                    ptx = kernel.ptx.replace("cp.async.bulk.wait_group.read 0;", f"cp.async.bulk.wait_group.read {depth};")
                    launch = Launcher(kernel.manifest, ptxas.assemble(ptx, kernel.manifest.arch)[0])
                    src, dst = x.view(torch.uint32).view(-1, chunk), y.view(torch.uint32).view(-1, chunk)
                    name = f"{nbytes >> 20} MiB, chunk {chunk} u32, {stages} stages, wait_group.read {depth}"
                    times = timed_in_turns({"torch": lambda i: y.copy_(x), name: lambda i: launch(src, dst)}, 30, 10)
                    ratios[name] = times["torch"] / times[name]
                    print(f"{name}: {ratios[name]:.3f}x torch", flush=True)
    report = {"benchmark": "bulk copy with up to N+1 stores in flight (timing only) vs torch copy_",
              "gpu": torch.cuda.get_device_name(), "date": str(datetime.date.today()),
              "method": "bench/timing.py timed_in_turns: 30 rounds of 10 back-to-back calls, each variant in turns "
                        "with torch copy_", "ratios": ratios}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()

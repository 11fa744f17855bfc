"""Host cost of a saxpy launch from Python, per launch, on the GPU.

The figure that matters is the repeat launch with torch tensors: the same tensors as a recent
launch take the fast path (no binding, no tensor-map encoding), and it must not get slower. For
the record the script also times the same launch with every array handed over through DLPack
only and through the CUDA array interface only (wrapper objects around the same tensors): those
bind on every launch; CUDA-array-interface wrappers through cuda.core's StridedMemoryView where
it is installed and through tmalang's own reader with cuda.core hidden, DLPack wrappers through
tmalang's reader (bench/results/repeat-launch-2026-11-23-h100.json, taken when DLPack also went
through cuda.core, shows why: 487 µs per launch against 298). Their first launch is timed on its own: the first
one in the process also imports cuda.core.

Each sample is N back-to-back launches timed with perf_counter and closed by a synchronize; the
array is small enough that the GPU keeps up with the host, so a sample measures the host. The
reported figure is the median over samples, after warm-up.

    python bench/repeat_launch.py bench/results/repeat-launch-<date>-h100.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import tmalang
from tmalang.contract import arrays

ROOT = Path(__file__).resolve().parents[1]


class DLPackOnly:
    """A torch tensor seen only through DLPack."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.tensor.__dlpack__(**kwargs)


class CudaArrayOnly:
    """A torch tensor seen only through the CUDA array interface v3, naming `stream` as the
    stream of its last write."""

    def __init__(self, tensor, stream):
        self.__cuda_array_interface__ = dict(
            tensor.__cuda_array_interface__, version=3, stream=stream.cuda_stream
        )


def per_launch_us(launch, launches: int, samples: int, warmup: int) -> dict:
    """Median (and spread) over `samples` of the wall time of `launches` launches, per launch."""
    for _ in range(warmup):
        launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(launches):
            launch()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / launches * 1e6)
    return {"median_us": statistics.median(times), "min_us": min(times), "max_us": max(times)}


def first_launch_us(launch) -> float:
    """The host time of one call (not waiting for the GPU)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    launch()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed * 1e6


def check(kernel, wrap, stream) -> None:
    """One launch through `wrap` computes out = 1.5 x + y exactly (the path timed is a working one)."""
    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    out = torch.full((64, 64), float("nan"), device="cuda")
    kernel(1.5, *(wrap(t) for t in (x, y, out)), stream=stream)
    torch.cuda.synchronize()
    expected = np.float32(1.5) * x.cpu().numpy() + y.cpu().numpy()
    assert np.array_equal(out.cpu().numpy(), expected), "wrong result"


def wrapped_runs(kernel, tensors, stream, side, args, results, firsts) -> None:
    """Repeat cost of the DLPack and CUDA array interface wrappers, and their first launch where
    `firsts` is a dict to record it in."""
    kinds = {
        "dlpack": lambda t: DLPackOnly(t),
        "cai v3, producer on the launch stream": lambda t: CudaArrayOnly(t, stream),
        "cai v3, producer on another stream": lambda t: CudaArrayOnly(t, side),
    }
    label = "cuda.core" if arrays.strided_memory_view_class() is not None else "tmalang readers"
    for kind, wrap in kinds.items():
        if kind == "dlpack" and firsts is None:
            continue   # DLPack never goes through cuda.core (contract/arrays.py): measured once
        name = "tmalang reader" if kind == "dlpack" else label
        wrapped = [wrap(t) for t in tensors]
        launch = lambda: kernel(1.5, *wrapped, stream=stream)   # noqa: E731
        if firsts is not None:
            firsts[kind] = first_launch_us(launch)
        check(kernel, wrap, stream)
        results[f"{kind} ({name}), repeat"] = per_launch_us(
            launch, args.launches // 4, args.samples, args.warmup // 4
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the JSON results")
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--launches", type=int, default=2000, help="launches per sample (torch)")
    parser.add_argument("--samples", type=int, default=21)
    parser.add_argument("--warmup", type=int, default=400)
    args = parser.parse_args()

    kernel = tmalang.compile_file(ROOT / "examples" / "saxpy.tma")
    shape = (args.rows, args.cols)
    x, y = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
    out = torch.empty(shape, device="cuda")
    stream, side = torch.cuda.current_stream(), torch.cuda.Stream()
    core_imported_before = "cuda.core" in sys.modules

    results, firsts = {}, {}
    check(kernel, lambda t: t, None)
    results["torch tensors, repeat (fast path)"] = per_launch_us(
        lambda: kernel(1.5, x, y, out), args.launches, args.samples, args.warmup
    )
    results["torch tensors, repeat, stream=torch stream"] = per_launch_us(
        lambda: kernel(1.5, x, y, out, stream=stream), args.launches, args.samples, args.warmup
    )
    wrapped_runs(kernel, (x, y, out), stream, side, args, results, firsts)
    core = arrays.strided_memory_view_class()
    if core is not None:   # the same wrappers through tmalang's own readers, for comparison
        arrays.StridedMemoryView = None
        wrapped_runs(kernel, (x, y, out), stream, side, args, results, None)
        arrays.StridedMemoryView = core

    import cuda.bindings

    report = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "shape": list(shape),
        "launches_per_sample_torch": args.launches,
        "launches_per_sample_wrapped": args.launches // 4,
        "samples": args.samples,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda_bindings": cuda.bindings.__version__,
        "cuda_core": _cuda_core_version(),
        "cuda_core_imported_before_first_wrapped_launch": core_imported_before,
        "per_launch": results,
        "first_wrapped_launch_us": firsts,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for name, r in results.items():
        print(f"{name:60s} {r['median_us']:8.2f} µs/launch (min {r['min_us']:.2f})")
    for name, t in firsts.items():
        print(f"first launch, {name:46s} {t:8.1f} µs")


def _cuda_core_version() -> str | None:
    try:
        import cuda.core
    except ImportError:
        return None
    return cuda.core.__version__


if __name__ == "__main__":
    main()

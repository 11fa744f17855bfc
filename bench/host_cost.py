"""Host cost per repeat call: `tmalang.gemm` (with and without `out`, and an `out` whose rows TMA
cannot write), `Kernel.__call__`, a `launch_repeatable` launch, `as_torch_op`, `tmalang.conv2d` and
`tmalang.copy`, against torch.matmul, torch.add, cuDNN's conv2d and Tensor.copy_ in the same run
(issue 31).

Each sample queues N calls behind a spin kernel (torch.cuda._sleep) that keeps the GPU busy for
longer than the host needs to queue them, and times the loop alone with perf_counter: the GPU's
time per call never enters, only what the host spends per call. The contenders take turns within
each sample (host-cost-*-v4.json and earlier timed each alone, one after another). The figure is the
median over samples, after warm-up; every contender's output is checked against float64 first. Then each
tmalang path runs under cProfile: the functions that take the most of its own time, per call
(cProfile adds about a microsecond to every Python call, so these read high; their order is the
point).

    python bench/host_cost.py --out bench/results/host-cost-<date>-h100.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import cProfile  # noqa: E402
import io  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parent))
from timing import arguments, write_report  # noqa: E402

import tmalang  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CALLS = 400           # per sample: queued behind one spin, well inside the launch queue
SPIN_CYCLES = 300_000_000
METHOD = (f"host_us: median over samples of the wall time of {CALLS} back-to-back calls per call, queued "
          "behind a spin kernel that keeps the GPU busy, so the loop times the host alone; the contenders take "
          "turns within each sample; outputs checked "
          "against float64 first; profile: cProfile's own time per call of the costliest functions")


def host_us(contenders: dict, samples: int) -> dict[str, dict]:
    """Per contender: the median, min and max over samples of the host's time per call. The
    contenders take turns within each sample, so that drift in the host's speed (other processes,
    clocks) falls on all of them alike instead of on whoever ran last."""
    for fn in contenders.values():
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(samples):
        for name, fn in contenders.items():
            torch.cuda._sleep(SPIN_CYCLES)
            start = time.perf_counter()
            for _ in range(CALLS):
                fn()
            times[name].append((time.perf_counter() - start) / CALLS * 1e6)
            torch.cuda.synchronize()
    return {name: {"median_us": statistics.median(t), "min_us": min(t), "max_us": max(t)} for name, t in times.items()}


def profile(fn, calls: int = 2000) -> list[dict]:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = [{"function": f"{Path(file).name}:{line}({name})", "own_us_per_call": own / calls * 1e6,
             "calls_per_call": count / calls}
            for (file, line, name), (_, count, own, _, _) in stats.stats.items()]
    return sorted(rows, key=lambda r: -r["own_us_per_call"])[:12]


def relative_error(got, expected) -> float:
    return ((got.double() - expected).norm() / expected.norm()).item()


def small_calls():
    """The operands of the small calls both host benchmarks time (here and bench/host_parts.py):
    a 128³ bf16 GEMM's a, b and c, a 256² saxpy's x, y and o, the saxpy kernel and its repeatable
    launch."""
    a = torch.randn(128, 128, device="cuda").to(torch.bfloat16)
    b = torch.randn(128, 128, device="cuda").to(torch.bfloat16)
    c = torch.empty(128, 128, device="cuda", dtype=torch.bfloat16)
    x, y = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    o = torch.empty_like(x)
    saxpy = tmalang.compile_file(ROOT / "examples" / "saxpy.tma")
    return a, b, c, x, y, o, saxpy, saxpy.launch_repeatable(1.5, x, y, o)


def main() -> None:
    args = arguments(samples=9)
    a, b, c, x, y, o, saxpy, again = small_calls()
    op = saxpy.as_torch_op("saxpy_host_cost")
    xs = torch.randn(2, 64, 8, 8, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    ws = (torch.randn(64, 64, 3, 3, device="cuda") / 24).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    c_odd = torch.empty(128, 125, device="cuda", dtype=torch.bfloat16)   # rows of 250 bytes: C staged
    flat = torch.randn(1, 1 << 20, device="cuda").to(torch.bfloat16)
    flat_out = torch.empty(1, 1 << 20, device="cuda", dtype=torch.bfloat16)
    contenders = {
        "torch.add(out=)": (lambda: torch.add(x, y, out=o), lambda: (o, x.double() + y.double())),
        "torch.matmul": (lambda: torch.matmul(a, b), None),
        "torch.matmul(out=)": (lambda: torch.matmul(a, b, out=c), lambda: (c, a.double() @ b.double())),
        "tmalang.gemm": (lambda: tmalang.gemm(a, b), None),
        "tmalang.gemm(out=)": (lambda: tmalang.gemm(a, b, out=c), lambda: (c, a.double() @ b.double())),
        "tmalang.gemm(out=), K-major b": (lambda: tmalang.gemm(a, b.t(), out=c),
                                          lambda: (c, a.double() @ b.double().t())),
        "torch.matmul(out=), 125 columns": (lambda: torch.matmul(a, b[:, :125], out=c_odd),
                                            lambda: (c_odd, a.double() @ b[:, :125].double())),
        "tmalang.gemm(out=), 125 columns": (lambda: tmalang.gemm(a, b[:, :125], out=c_odd),
                                            lambda: (c_odd, a.double() @ b[:, :125].double())),
        "Kernel.__call__ (saxpy)": (lambda: saxpy(1.5, x, y, o), lambda: (o, 1.5 * x.double() + y.double())),
        "launch_repeatable (saxpy)": (again, lambda: (o, 1.5 * x.double() + y.double())),
        "as_torch_op (saxpy)": (lambda: op(1.5, x, y, o), lambda: (o, 1.5 * x.double() + y.double())),
        "F.conv2d (cuDNN)": (lambda: torch.nn.functional.conv2d(xs, ws, padding=1), None),
        "tmalang.conv2d": (lambda: tmalang.conv2d(xs, ws, padding=1), None),
        "Tensor.copy_ (1 x 1,048,576)": (lambda: flat_out.copy_(flat), lambda: (flat_out, flat.double())),
        "tmalang.copy (1 x 1,048,576)": (lambda: tmalang.copy(flat, flat_out), lambda: (flat_out, flat.double())),
    }
    conv = torch.nn.functional.conv2d(xs.double(), ws.double(), padding=1)
    errors = {"torch.matmul": relative_error(torch.matmul(a, b), a.double() @ b.double()),
              "tmalang.gemm": relative_error(tmalang.gemm(a, b), a.double() @ b.double()),
              "F.conv2d (cuDNN)": relative_error(torch.nn.functional.conv2d(xs, ws, padding=1), conv),
              "tmalang.conv2d": relative_error(tmalang.conv2d(xs, ws, padding=1), conv)}
    for name, (fn, check) in contenders.items():
        if check is not None:
            o.fill_(float("nan")), c.fill_(float("nan")), c_odd.fill_(float("nan")), flat_out.fill_(float("nan"))
            fn()
            got, expected = check()
            errors[name] = relative_error(got, expected)
    assert all(e < 1e-2 for e in errors.values()), errors
    rows = []
    timed = host_us({name: fn for name, (fn, _) in contenders.items()}, args.samples)
    for name, (fn, _) in contenders.items():
        row = {"call": name, "rel_err_vs_f64": errors[name], **timed[name]}
        if name.startswith(("tmalang", "Kernel", "launch", "as_torch_op")):
            row["profile"] = profile(fn)
        rows.append(row)
    matmul = {r["call"]: r["median_us"] for r in rows}
    for row in rows:
        row["vs_torch_matmul"] = matmul["torch.matmul"] / row["median_us"]
        row["vs_torch_matmul_out"] = matmul["torch.matmul(out=)"] / row["median_us"]
        print(f"{row['call']:32s} {row['median_us']:6.1f} us   torch.matmul / this {row['vs_torch_matmul']:.2f}x"
              f"   torch.matmul(out=) / this {row['vs_torch_matmul_out']:.2f}x", flush=True)
    write_report(args.out, "host cost per repeat call (128x128x128 bf16 GEMM, 256x256 saxpy, a 2x64x8x8 3x3 "
                 "conv2d with 64 filters, a 1 x 1,048,576 bf16 copy)", METHOD, rows)


if __name__ == "__main__":
    main()

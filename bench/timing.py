"""The three ways a user runs a kernel, timed alike for every contender of a benchmark.

- **cold L2** (`timed_flushed`): one call timed alone with CUDA events right after a 256 MiB
  write has flushed the L2: the GPU time of a call whose inputs come from device memory.
- **graph replay, warm L2** (`timed_graph_replays`): a batch of calls captured once in a CUDA
  graph and replayed; the inputs stay in the L2 across replays and no host work is timed.
- **eager, host included** (`timed_eager`): a batch of plain Python calls timed with the host's
  clock and closed by a synchronize: what a training loop that calls the kernel pays, launch
  overhead and argument binding included.

`three_ways(contenders, rounds, batch)` runs all three. A contender is `fn(i)`, where `i` (0 or 1)
picks one of the benchmark's two input sets. In every
method the contenders take turns within each round, so drift in the GPU's clocks (power,
temperature) falls on all of them alike instead of on whoever ran last.
"""

from __future__ import annotations

import statistics
import time

import warnings

import torch

FLUSH_BYTES = 256 << 20          # the H100's and H200's 50 MiB L2 holds none of the inputs after this
CALLS_PER_ROUND = 5
HEAD_START_CYCLES = 4_000_000    # ~2 ms of spinning before each round: the host queues the round's calls
METHOD = ("cold_l2_ms: median of single calls timed with CUDA events, each right after a 256 MiB "
          "L2 flush; graph_ms: median per call over replays of a CUDA graph of a batch of calls "
          "(warm L2); eager_ms: median per call of a batch of Python calls timed with the host's "
          "clock and closed by a synchronize (launch and binding included). Contenders take turns "
          "within each round")


def warm_up(contenders: dict) -> None:
    for fn in contenders.values():
        for i in range(3):
            fn(i % 2)
    torch.cuda.synchronize()


def timed_flushed(contenders: dict, rounds: int) -> dict[str, float]:
    """Median milliseconds of one call of each contender, timed alone with CUDA events right
    after the L2 is flushed (as triton.testing.do_bench does). The flush keeps the GPU busy while
    the host prepares the call, and each round starts behind a ~2 ms spin kernel, so the host has
    queued the round's calls before the GPU reaches them: the events time the GPU's work alone,
    whatever the host's cost per call. That is the time a call costs in a stream of real work,
    where the host runs ahead."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    warm_up(contenders)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            events = []
            torch.cuda._sleep(HEAD_START_CYCLES)
            for i in range(CALLS_PER_ROUND):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                flush.zero_()
                start.record()
                fn(i % 2)
                stop.record()
                events.append((start, stop))
            torch.cuda.synchronize()
            times[name] += [start.elapsed_time(stop) for start, stop in events]
    return {name: statistics.median(t) for name, t in times.items()}


def timed_in_turns(contenders: dict, rounds: int, batch: int) -> dict[str, float]:
    """Median per-call milliseconds of back-to-back batches timed with CUDA events (warm L2
    where the inputs fit). Each batch enqueues one untimed call first, so the start event fires
    when the GPU is already busy: the host's launch work overlaps the GPU instead of being timed
    as idle time."""
    warm_up(contenders)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name, fn in contenders.items():
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            fn(1)
            start.record()
            for i in range(batch):
                fn((r * batch + i) % 2)
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop) / batch)
    return {name: statistics.median(t) for name, t in times.items()}


def captured(fn, batch: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `batch` calls of fn(0), warmed up on a side stream first as torch asks.
    A contender with a `capture_stream` is captured on it: autograd runs a backward on the stream
    its forward ran on, so a backward alone can be captured only on that stream."""
    side = getattr(fn, "capture_stream", None) or torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=getattr(fn, "capture_stream", None)):
        for _ in range(batch):
            fn(0)
    return graph


def timed_graph_replays(contenders: dict, rounds: int, batch: int) -> dict[str, float]:
    """Median per-call milliseconds of replays of a graph of `batch` calls. A peer that cannot be
    captured (it reads from the device on the host, say) gets no time in this way; ours must."""
    graphs = {}
    for name, fn in contenders.items():
        try:
            graphs[name] = captured(fn, batch)
        except Exception as error:
            if name == "tmalang":
                raise
            torch.cuda.synchronize()
            print(f"  {name}: not capturable in a CUDA graph ({type(error).__name__}: "
                  f"{(str(error).splitlines() or [''])[0]})", flush=True)
    for graph in graphs.values():
        graph.replay()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(rounds):
        for name, graph in graphs.items():
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop) / batch)
    return {name: statistics.median(t) for name, t in times.items()}


def timed_eager(contenders: dict, rounds: int, batch: int) -> dict[str, float]:
    """Median per-call milliseconds of `batch` plain calls on the host's clock, closed by a
    synchronize: the host's launch cost counts whenever it exceeds the GPU's time."""
    warm_up(contenders)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        for name, fn in contenders.items():
            torch.cuda.synchronize()
            began = time.perf_counter()
            for i in range(batch):
                fn((r * batch + i) % 2)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - began) * 1e3 / batch)
    return {name: statistics.median(t) for name, t in times.items()}


WAYS = {"cold_l2_ms": lambda c, rounds, batch: timed_flushed(c, rounds),
        "graph_ms": timed_graph_replays,
        "eager_ms": timed_eager}


def first_runs(runs: dict, result: dict, error_of) -> None:
    """Run each contender once (`run(0)`): a peer that raises is recorded in `result` as unsupported,
    with the warnings it gave (SDPA says why it declines in warnings), and dropped from `runs`; each
    other gets {"rel_err_vs_f32": error_of(its output)}. Ours ("tmalang") raising is an error."""
    for name, run in list(runs.items()):
        with warnings.catch_warnings(record=True) as why:
            warnings.simplefilter("always")
            try:
                out = run(0)
                torch.cuda.synchronize()
            except Exception as error:
                if name == "tmalang":
                    raise
                reasons = [str(w.message) for w in why] + [f"{type(error).__name__}: {error}"]
                result[name] = {"unsupported": [reason.splitlines()[0] for reason in reasons if reason]}
                del runs[name]
                continue
        result[name] = {"rel_err_vs_f32": error_of(out)}


def three_ways(contenders: dict, rounds: int, batch: int) -> dict[str, dict[str, float]]:
    """{contender: {"cold_l2_ms", "graph_ms", "eager_ms"}}."""
    result: dict[str, dict[str, float]] = {name: {} for name in contenders}
    for way, timed in WAYS.items():
        for name, ms in timed(contenders, rounds, batch).items():
            result[name][way] = ms
    return result


def timed_row(runs: dict, result: dict, flops: float, rounds: int, label: str, rate: str = "tflops",
              batch: int | None = None) -> dict:
    """Time every contender of `runs` three ways (batches of about 2 TFLOP unless `batch`), add the
    times and the work per second (`rate`: TFLOP/s of `flops`, or TB/s where the work is bytes) to
    `result`, ours ("tmalang", where it ran) against each peer and the best, and print the row's
    line. Other contenders named tmalang_* (another of our kernels) are compared with ours but are
    not peers. Returns `result`."""
    batch = batch or max(3, int(2e12 // flops))
    for name, times in three_ways(runs, rounds, batch).items():
        result[name].update(times, **{rate: rates(flops, times)})
    peers = [name for name in runs if not name.startswith("tmalang")]
    if "tmalang" in runs and peers:
        versus(result, peers)
    for name in runs:
        if name.startswith("tmalang_") and "tmalang" in runs:
            result[f"tmalang_vs_{name}"] = ratios(result["tmalang"], result[name])
    print(report_line(label, result), flush=True)
    return result


def arguments(samples: int = 15, extra=None):
    """A benchmark's command line: --out (the JSON to write) and --samples (rounds per way);
    `extra(parser)` adds a benchmark's own."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=samples)
    if extra:
        extra(parser)
    return parser.parse_args()


def write_report(out, benchmark: str, method: str, rows: list) -> None:
    """The benchmark's JSON at `out` (if given): what it measures, the GPU, the date, torch's
    version, how it measures (METHOD first) and its rows."""
    import datetime
    import json

    report = {"benchmark": benchmark, "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
              "torch": torch.__version__, "method": method, "results": rows}
    if out:
        out.write_text(json.dumps(report, indent=2) + "\n")


def ratios(ours: dict, peer: dict) -> dict[str, float]:
    """Speed of `ours` over `peer` in each way (above 1: ours is faster)."""
    return {way.removesuffix("_ms"): peer[way] / ours[way] for way in WAYS if way in ours and way in peer}


def versus(result: dict, peers: list[str], ours: str = "tmalang") -> None:
    """Into `result` (contender -> its times): ours against each peer, the fastest peer in each way
    (`best_peer`), and ours against that peer (`tmalang_vs_best`)."""
    for peer in peers:
        result[f"{ours}_vs_{peer}"] = ratios(result[ours], result[peer])
    best = {way: min((p for p in peers if way in result[p]), key=lambda p: result[p][way])
            for way in WAYS if any(way in result[p] for p in peers)}
    result["best_peer"] = {way.removesuffix("_ms"): p for way, p in best.items()}
    result[f"{ours}_vs_best"] = ratios(result[ours], {way: result[p][way] for way, p in best.items()})


def report_line(label: str, result: dict) -> str:
    """One line of a benchmark's log: every `*_vs_*` ratio of the row, in every way."""
    return f"{label}  " + "  ".join(f"{k}: {summary(v)}" for k, v in result.items() if "_vs_" in k)


def rates(work: float, times: dict[str, float], unit: float = 1e9) -> dict[str, float]:
    """work per second / unit in each way (TFLOP/s for flops with the default unit)."""
    return {way.removesuffix("_ms"): work / ms / unit for way, ms in times.items()}


def summary(ratio: dict[str, float]) -> str:
    """'cold_l2 1.012x graph 0.998x eager 1.004x'"""
    return " ".join(f"{way} {value:.3f}x" for way, value in ratio.items())

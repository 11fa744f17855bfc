#!/usr/bin/env python3
"""Draw the pictures in docs/pictures/ from the compiler's and the interpreter's own data.

    python docs/pictures/make_pictures.py             # rewrite the files beside this script
    python docs/pictures/make_pictures.py --check     # exit 1 if a committed file is stale
    python docs/pictures/make_pictures.py --out DIR   # write them into DIR instead

Two kinds of picture, nothing drawn by hand:

- barriers_<kernel>.svg: the barrier schedule that `tmalangc --explain` prints, drawn over the
  first two laps round the kernel's pipeline ring. The script compiles the example to its final
  IR (the IR the backend lowers to PTX), finds each role's loop that waits on an mbarrier, and
  steps it symbolically: every `let` the loop runs, every wait with its stage and parity, every
  arrive, load and store, with the values the IR's own expressions give. An arrow joins the
  arrive that completes a phase to the wait that needs that phase.
- trace_gemm_sm90_h100.svg: the same drawing of a hardware timeline (Kernel.profile) that an
  H100 recorded, read from its committed JSON in bench/results.
- trace_<kernel>.svg: the Chrome trace-event JSON that the reference interpreter writes for a
  small run (`kernel.interpret(..., trace=t)`, `tmalangc run --trace`), drawn as a timeline: one
  track per warp, named after its role, one for the TMA engine, each op a box and each completed
  mbarrier phase a tick. It is the same JSON that Perfetto (ui.perfetto.dev) opens; the JSON is
  written beside the picture so you can open it there.

The output is deterministic, so tests/tools/test_pictures.py can check that the committed files are
what this script makes today.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

import tmalang
from tmalang.compiler import Options, compile_source
from tmalang.explain import explain
from tmalang.interp.machine import INT_OPS
from tmalang.interp.trace import ENGINE_TRACK, Trace
from tmalang.ir import exprs as ex
from tmalang.ir import ops

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GEMM_TIMELINE = ROOT / "bench" / "results" / "gemm_sm90-timeline-2026-11-23-h100.json"   # a hardware timeline

FONT = "font-family='DejaVu Sans Mono, Menlo, Consolas, monospace'"
SANS = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
# one colour per barrier, in declaration order; one per op name in the trace, in sorted order
BARRIER_COLOURS = ["#1f6fb4", "#d9730d", "#2e8b57", "#8e44ad", "#c0392b"]
SLICE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
                 "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"]


# ---- the barrier schedule ------------------------------------------------------------------

class Unknown(Exception):
    """An expression that needs a launch (a dim, a scalar, a special register) or an unset name."""


def value(e: ex.Expr, env: dict[str, int]) -> int:
    """An integer expression of the IR, with the interpreter's own integer operations."""
    if isinstance(e, ex.Const):
        return e.value
    if isinstance(e, ex.Var):
        if e.name not in env:
            raise Unknown(e.name)
        return env[e.name]
    if isinstance(e, ex.Neg):
        return -value(e.operand, env)
    if isinstance(e, ex.Bin):
        return INT_OPS[e.op](value(e.lhs, env), value(e.rhs, env))
    raise Unknown(str(e))


def assign(o: ops.Let | ops.Val, env: dict[str, int]) -> None:
    try:
        env[o.var] = value(o.value, env)
    except Unknown:
        env.pop(o.var, None)


@dataclass
class Event:
    """One barrier-related op of one step of a role's loop."""

    kind: str                 # "wait", "arrive" or "op" (a load, store or MMA, shown for context)
    text: str
    barrier: str = ""
    stage: int = -1
    parity: int = -1
    phase: int = 0            # wait: the phase it needs (-1: the one before the first); arrive: the one it completes


def waits_somewhere(o: ops.Op) -> bool:
    return any(isinstance(x, ops.MbarWait) for x in ops.walk([o]))


def ring_loop(region: list[ops.Op], env: dict[str, int]):
    """(loop, env): the innermost loop under `region` that waits on an mbarrier, and the integers
    that the lets before it set (those known without a launch: ring counters start at 0)."""
    env = dict(env)
    for o in region:
        if isinstance(o, (ops.Let, ops.Val)):
            assign(o, env)
        elif waits_somewhere(o):
            for inner in o.regions():
                found = ring_loop(inner, env)
                if found:
                    return found
            if isinstance(o, (ops.ForRange, ops.ForStep)):
                return o, env
    return None


def ref(r: ex.BufferRef, env: dict[str, int]) -> tuple[str, int]:
    return r.name, value(r.index, env)


def step(region: list[ops.Op], env: dict[str, int], out: list[Event]) -> None:
    """Run one iteration's ops symbolically, recording its barrier ops. An `if` whose condition
    needs a launch value counts as taken (the steady state of a long loop)."""
    for o in region:
        if isinstance(o, (ops.Let, ops.Val)):
            assign(o, env)
        elif isinstance(o, ops.If):
            try:
                taken = value(o.cond, env) != 0
            except Unknown:
                taken = True
            if taken:
                step(o.body, env, out)
        elif isinstance(o, ops.MbarWait):
            name, stage = ref(o.barrier, env)
            parity = value(o.parity, env)
            out.append(Event("wait", f"wait {short(name)}[{stage}] parity {parity}", name, stage, parity))
        elif isinstance(o, (ops.MbarArrive, ops.MbarArriveExpectTx, ops.MbarArriveCluster, ops.Tcgen05Commit)):
            name, stage = ref(o.barrier, env)
            if isinstance(o, ops.MbarArriveExpectTx):
                what = "arrive+tx"
            elif isinstance(o, ops.Tcgen05Commit):
                what = "tcgen05.commit"
            elif isinstance(o, ops.MbarArriveCluster):
                what = "arrive.cluster"
            else:
                what = "arrive"
            tail = f" {value(o.bytes, env)} B" if isinstance(o, ops.MbarArriveExpectTx) else ""
            out.append(Event("arrive", f"{what} {short(name)}[{stage}]{tail}", name, stage))
        elif isinstance(o, ops.TmaLoad):
            name, stage = ref(o.dest, env)
            out.append(Event("op", f"load {o.box} -> {short(name)}[{stage}]" + (" multicast" if o.multicast else "")))
        elif isinstance(o, ops.TmaStore):
            name, stage = ref(o.source, env)
            out.append(Event("op", f"store {o.box} <- {short(name)}[{stage}]"))
        elif isinstance(o, (ops.Wgmma, ops.Tcgen05Mma)):
            out.append(Event("op", "wgmma" if isinstance(o, ops.Wgmma) else "tcgen05.mma"))
        else:
            for inner in o.regions():
                step(inner, env, out)


def short(name: str) -> str:
    """`ring.full` -> `full`: the pipeline's name is in the picture's title."""
    return name.split(".", 1)[1] if "." in name else name


def schedule(kernel: ops.KernelOp, steps: int) -> list[tuple[str, list[list[Event]]]]:
    """Each role with a ring loop: its events in each of the first `steps` iterations."""
    lanes = []
    for role in ops.roles(kernel):
        found = ring_loop(role.body, {})
        if found is None:
            continue
        loop, env = found
        counter = loop.var if isinstance(loop, ops.ForRange) else loop.count
        if isinstance(loop, ops.ForStep):
            env.pop(loop.var, None)        # the strided tile index needs the launch
        iterations = []
        for i in range(steps):
            env[counter] = i
            events: list[Event] = []
            step(loop.body, env, events)
            iterations.append(events)
        lanes.append((role.symbol, iterations))
    return lanes


def number_phases(lanes) -> None:
    """Arrive k of a role on a barrier stage completes phase k of it (the role's arrive sites make
    up the barrier's count together). Wait j of a role on a stage, with parity p, needs phase j
    when p is j's parity, else phase j - 1: the phase before the first counts as complete, so a
    producer's first wait on a fresh `empty` barrier passes at once."""
    for _, iterations in lanes:
        arrived: dict[tuple[str, int], int] = {}
        waited: dict[tuple[str, int], int] = {}
        for events in iterations:
            for e in events:
                key = (e.barrier, e.stage)
                if e.kind == "arrive":
                    e.phase = arrived.get(key, 0)
                    arrived[key] = e.phase + 1
                elif e.kind == "wait":
                    j = waited.get(key, 0)
                    waited[key] = j + 1
                    e.phase = j if (j & 1) == e.parity else j - 1


def barrier_svg(example: str, laps: int = 2) -> str:
    path = ROOT / "examples" / example
    c = compile_source(path.read_text(), f"examples/{example}", Options(), until="ir")
    kernel = c.ir
    bars = list(ops.decls(kernel, ops.MbarrierDecl).values())
    stages = max(b.stages for b in bars)
    steps = laps * stages
    lanes = schedule(kernel, steps)
    number_phases(lanes)
    track = {b.symbol: i for i, b in enumerate(bars)}
    colour = {b.symbol: BARRIER_COLOURS[i % len(BARRIER_COLOURS)] for i, b in enumerate(bars)}
    table = explain(kernel, c.target, c.manifest.grid).splitlines()
    start = next(i for i, line in enumerate(table) if line.startswith("barrier "))
    end = next((i for i in range(start, len(table)) if not table[i].strip()), len(table))
    table = table[start:end]

    # the arrows: (source box, target box, barrier, label), found before the layout sizes the bands
    found = []
    arrivals = {}
    for k, (_, iterations) in enumerate(lanes):
        for i, events in enumerate(iterations):
            for j, e in enumerate(events):
                if e.kind == "arrive":
                    arrivals.setdefault((e.barrier, e.stage, e.phase), []).append((k, i, j))
    for k, (_, iterations) in enumerate(lanes):
        for i, events in enumerate(iterations):
            for j, e in enumerate(events):
                if e.kind == "wait" and e.phase >= 0:
                    for src in arrivals.get((e.barrier, e.stage, e.phase), []):
                        found.append((src, (k, i, j), e.barrier, f"{short(e.barrier)}[{e.stage}] phase {e.phase}"))
    # an arrow that changes column runs along the band between the lanes, each on a row of its own
    crossing = sorted((a for a in found if a[0][1] != a[1][1]), key=lambda a: (a[0][1], a[1][1], track[a[2]]))
    band_row = {id(a): n for n, a in enumerate(crossing)}

    # geometry: a column per step of the ring loop: its boxes, then a gap with one track per barrier
    left, box_w, box_h, gap = 120, 172, 20, 4
    col_w = box_w + 8 + 10 * len(bars) + 6
    rows = max(len(events) for _, its in lanes for events in its)
    lane_h = 14 + rows * (box_h + gap) + 6
    table_top = 62
    lanes_top = table_top + 16 * len(table) + 64
    between = 30 + 12 * len(crossing) + 10
    width = left + steps * col_w + 110
    lane_y = [lanes_top + k * (lane_h + between) for k in range(len(lanes))]
    height = lane_y[-1] + lane_h + 112

    def box(key):
        k, i, j = key
        return left + i * col_w + 4, lane_y[k] + 12 + j * (box_h + gap)

    def gap_x(column: int, barrier: str) -> float:
        """The barrier's track in the gap right of `column` (column -1: the margin left of column 0)."""
        return left + column * col_w + box_w + 12 + 10 * track[barrier]

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}'>",
           "<defs>" + "".join(
               f"<marker id='head{i}' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='6' markerHeight='6' "
               f"orient='auto'><path d='M0,0 L10,5 L0,10 z' fill='{colour[b.symbol]}'/></marker>"
               for i, b in enumerate(bars)) + "</defs>",
           f"<rect width='{width}' height='{height}' fill='white'/>",
           f"<text x='16' y='26' {SANS} font-size='17' font-weight='bold'>{escape(f'examples/{example}')}: "
           f"the barrier schedule the compiler derived, first {laps} laps of the ring</text>",
           f"<text x='16' y='46' {SANS} font-size='12' fill='#444'>From the final IR (what the backend "
           "lowers to PTX), stepped symbolically. The table is what `tmalangc --explain` prints:</text>"]
    for i, line in enumerate(table):
        out.append(f"<text x='24' y='{table_top + 14 + 16 * i}' {FONT} font-size='12' xml:space='preserve'>"
                   f"{escape(line)}</text>")

    # column headers: one column per iteration of the ring loop, with its slot and lap
    head_y = lanes_top - 30
    for i in range(steps):
        x = left + i * col_w
        lap = i // stages
        fill = "#f3f6fa" if lap % 2 == 0 else "#fbf7f0"
        out.append(f"<rect x='{x}' y='{head_y - 16}' width='{col_w - 2}' height='{lane_y[-1] + lane_h - head_y + 20}' "
                   f"fill='{fill}'/>")
        out.append(f"<text x='{x + 6}' y='{head_y}' {SANS} font-size='12'><tspan font-weight='bold'>slot {i % stages}"
                   f"</tspan> · lap {lap} · step {i}</text>")

    # lanes and their boxes
    for k, (role, iterations) in enumerate(lanes):
        y0 = lane_y[k]
        out.append(f"<text x='12' y='{y0 + 30}' {SANS} font-size='14' font-weight='bold'>{escape(role)}</text>")
        out.append(f"<text x='12' y='{y0 + 48}' {SANS} font-size='11' fill='#555'>role</text>")
        out.append(f"<line x1='{left}' y1='{y0 + 2}' x2='{left + steps * col_w}' y2='{y0 + 2}' stroke='#999' stroke-dasharray='2,3'/>")
        for i, events in enumerate(iterations):
            for j, e in enumerate(events):
                x, y = box((k, i, j))
                stroke = colour.get(e.barrier, "#888")
                fill = "#ffffff" if e.kind != "op" else "#eeeeee"
                dash = " stroke-dasharray='4,3'" if e.kind == "wait" and e.phase < 0 else ""
                width_px = 2 if e.kind != "op" else 1
                out.append(f"<g><title>{escape(describe(e))}</title><rect x='{x}' y='{y}' width='{box_w}' "
                           f"height='{box_h}' rx='3' fill='{fill}' stroke='{stroke}' stroke-width='{width_px}'{dash}/>"
                           f"<text x='{x + 5}' y='{y + 14}' {FONT} font-size='10.5'>{escape(e.text)}</text></g>")

    # arrows, drawn over the boxes: out of the arrive's right edge into its barrier's track in the
    # gap, along the gap (and, changing column, along its row of the band), into the wait's side
    for a in found:
        src, dst, barrier, label = a
        (sx, sy), (dx, dy) = box(src), box(dst)
        y1, y2 = sy + box_h / 2, dy + box_h / 2
        g1 = gap_x(src[1], barrier)
        if src[1] == dst[1]:
            points = [(sx + box_w, y1), (g1, y1), (g1, y2), (dx + box_w, y2)]
            lx, ly = g1 + 4, lane_y[min(src[0], dst[0])] + lane_h + 16 if src[0] != dst[0] else (y1 + y2) / 2
        else:
            upper, lower = sorted((src[0], dst[0]))
            band = lane_y[upper] + lane_h + 34 + 12 * band_row[id(a)]
            g2 = gap_x(dst[1] - 1, barrier)
            points = [(sx + box_w, y1), (g1, y1), (g1, band), (g2, band), (g2, y2), (dx, y2)]
            lx, ly = g1 + 6, band - 2
        path = " ".join(f"{'M' if n == 0 else 'L'}{x:.1f},{y:.1f}" for n, (x, y) in enumerate(points))
        stroke = colour[barrier]
        out.append(f"<g><title>{escape(label)}</title><path d='{path}' fill='none' stroke='{stroke}' "
                   f"stroke-width='1.5' stroke-linejoin='round' marker-end='url(#head{track[barrier]})'/>"
                   f"<text x='{lx:.1f}' y='{ly:.1f}' {SANS} font-size='10' fill='{stroke}' stroke='white' "
                   f"stroke-width='3' paint-order='stroke'>{escape(label)}</text></g>")

    # legend
    ly = lane_y[-1] + lane_h + 30
    items = [(colour[b.symbol], f"{b.symbol}: {b.stages} stages, count {b.count}"
              + (f", {b.tx_bytes} tx bytes" if b.tx_bytes else "")) for b in bars]
    x = 16
    for fill, text in items:
        out.append(f"<rect x='{x}' y='{ly - 11}' width='14' height='14' fill='{fill}'/>"
                   f"<text x='{x + 20}' y='{ly + 1}' {SANS} font-size='12'>{escape(text)}</text>")
        x += 30 + 7 * len(text)
    out.append(f"<rect x='{x}' y='{ly - 11}' width='24' height='14' fill='white' stroke='#555' stroke-dasharray='4,3'/>"
               f"<text x='{x + 30}' y='{ly + 1}' {SANS} font-size='12'>a wait for the phase before the first: "
               "it passes at once on a fresh barrier</text>")
    notes = ["An arrow runs from the arrive that completes a phase (for a full barrier, with the TMA bytes that "
             "arrive+tx announced) to the wait that needs that phase. One arrive box is all the arrivals one op "
             "makes in a step: the barrier's count.",
             "A wait with parity p needs the latest phase of parity p. Grey boxes: the copies and MMAs in between. "
             "Hover a box or an arrow for details."]
    for n, note in enumerate(notes):
        out.append(f"<text x='16' y='{ly + 26 + 18 * n}' {SANS} font-size='12' fill='#444'>{escape(note)}</text>")
    out.append(f"<text x='16' y='{ly + 66}' {SANS} font-size='11' fill='#777'>generated by "
               "docs/pictures/make_pictures.py from the compiler's IR; do not edit by hand</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def describe(e: Event) -> str:
    if e.kind == "wait":
        needs = "the phase before the first (passes at once)" if e.phase < 0 else f"phase {e.phase}"
        return f"mbar_wait {e.barrier}[{e.stage}] parity {e.parity}: needs {needs}"
    if e.kind == "arrive":
        return f"{e.text}: completes phase {e.phase} of {e.barrier}[{e.stage}]"
    return e.text


# ---- the interpreter's trace ---------------------------------------------------------------

def saxpy_trace(dims=(100, 130), seed=1) -> Trace:
    """The trace of saxpy on one CTA, odd shape, random latencies from `seed`; out is checked."""
    path = ROOT / "examples" / "saxpy.tma"
    kernel = tmalang.compile(path.read_text(), name="examples/saxpy.tma")   # a relative name: the
    m, n = dims                                                              # trace quotes it
    rng = np.random.default_rng(0)

    def padded() -> np.ndarray:       # rows padded to 16 bytes, as TMA needs; values random
        base = np.zeros((m, -(-n // 4) * 4), np.float32)
        base[:, :n] = rng.standard_normal((m, n))
        return base[:, :n]

    x, y, out = padded(), padded(), padded()
    trace = Trace()
    kernel.interpret(np.float32(1.5), x, y, out, seed=seed, ctas=1, trace=trace)
    assert np.array_equal(out, np.float32(1.5) * x + y)
    return trace


INTERPRETER_ABOUT = (
    "A rendering of the interpreter's Chrome trace-event JSON, the file Perfetto (ui.perfetto.dev) opens: one "
    "track per warp, named after its role, and one for the TMA engine.",
    "Time is the interpreter's scheduler step. A wait's box spans the steps it was blocked; a copy's box on the "
    "engine spans issue to landing; ticks mark completed mbarrier phases.")
HARDWARE_ABOUT = (
    "A rendering of the hardware timeline's Chrome trace-event JSON (Kernel.profile on an H100), the file "
    "Perfetto opens: one track per warp, named after its role.",
    "Time is microseconds of %globaltimer. A wait's box spans its first try to its end; a mark at the top of a "
    "track is an issue or an arrival (TMA load, wgmma commit, mbarrier arrive).")


def trace_svg(trace: Trace, caption: str, about: tuple[str, str] = INTERPRETER_ABOUT, unit: str = "scheduler step",
              source: str = "the interpreter's trace") -> str:
    events = trace.events
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    cta_names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    slices: dict[tuple, list[dict]] = {key: [] for key in names}
    for e in events:
        if e["ph"] == "X":
            slices.setdefault((e["pid"], e["tid"]), []).append(e)
    instants = [e for e in events if e["ph"] == "i"]
    end = max([e["ts"] + e["dur"] for e in events if e["ph"] == "X"] + [e["ts"] for e in instants])
    kinds = sorted({e["name"] for e in events if e["ph"] == "X"})
    marks = sorted({e["name"] for e in instants if e["tid"] != ENGINE_TRACK})     # issues on warp tracks
    colour = {name: SLICE_COLOURS[i % len(SLICE_COLOURS)] for i, name in enumerate(kinds + marks)}

    def depths(track: list[dict]) -> list[tuple[dict, int]]:
        """First-fit rows, as Perfetto stacks them: a slice inside another sits one row lower."""
        rows: list[list[tuple[int, int]]] = []
        placed = []
        for e in sorted(track, key=lambda e: (e["ts"], -e["dur"])):
            a, b = e["ts"], e["ts"] + e["dur"]
            for d, row in enumerate(rows):
                if all(b <= s or a >= t for s, t in row):
                    row.append((a, b))
                    break
            else:
                d = len(rows)
                rows.append([(a, b)])
            placed.append((e, d))
        return placed

    left, plot_w, row_h = 190, 1160, 13
    scale = plot_w / end
    order = sorted(names, key=lambda key: (key[0], key[1] == ENGINE_TRACK, key[1]))
    laid = {key: depths(slices[key]) for key in order}
    heights = {key: 10 + row_h * max([d + 1 for _, d in laid[key]] + [1]) for key in order}
    top = 88
    y = top
    track_y = {}
    for key in order:
        track_y[key] = y
        y += heights[key] + 4
    legend_y = y + 44
    per_row = 6
    height = legend_y + 22 * (-(-(len(kinds) + len(marks) + 1) // per_row)) + 40
    width = left + plot_w + 30

    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}'>",
           f"<rect width='{width}' height='{height}' fill='white'/>",
           f"<text x='16' y='26' {SANS} font-size='17' font-weight='bold'>{escape(caption)}</text>",
           f"<text x='16' y='46' {SANS} font-size='12' fill='#444'>{escape(about[0])}</text>",
           f"<text x='16' y='62' {SANS} font-size='12' fill='#444'>{escape(about[1])}</text>"]
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000) if end / s <= 14)
    axis_y = y + 6
    for t in range(0, int(end) + 1, step):
        x = left + t * scale
        out.append(f"<line x1='{x:.1f}' y1='{top - 6}' x2='{x:.1f}' y2='{axis_y}' stroke='#e4e4e4'/>"
                   f"<text x='{x:.1f}' y='{axis_y + 14}' {SANS} font-size='10' fill='#555' "
                   f"text-anchor='middle'>{t}</text>")
    out.append(f"<text x='{left + plot_w / 2:.1f}' y='{axis_y + 30}' {SANS} font-size='11' fill='#555' "
               f"text-anchor='middle'>{escape(unit)}</text>")
    for key in order:
        ty = track_y[key]
        pid, tid = key
        label = names[key] if len(cta_names) == 1 else f"{cta_names[pid]}: {names[key]}"
        band = "#f7f7f7" if tid != ENGINE_TRACK else "#fff6e8"
        out.append(f"<rect x='{left}' y='{ty}' width='{plot_w}' height='{heights[key]}' fill='{band}'/>"
                   f"<text x='{left - 8}' y='{ty + 14}' {SANS} font-size='12' text-anchor='end'>{escape(label)}</text>")
        for e, d in laid[key]:
            x = left + e["ts"] * scale
            w = max(e["dur"] * scale, 1.0)
            ey = ty + 5 + d * row_h
            where = e["args"].get("at", "")
            extra = f", {e['args']['bytes']} bytes" if "bytes" in e["args"] else ""
            span = f"steps {e['ts']}..{e['ts'] + e['dur']}" if unit == "scheduler step" else \
                f"{e['ts']:.3f}..{e['ts'] + e['dur']:.3f} {unit}"
            tip = f"{e['name']}: {span}{extra} ({where})"
            text = ""
            if w > 7 * len(e["name"]) + 4:
                text = (f"<text x='{x + 2:.1f}' y='{ey + 9}' {SANS} font-size='9' fill='#111'>"
                        f"{escape(e['name'])}</text>")
            out.append(f"<g><title>{escape(tip)}</title><rect x='{x:.2f}' y='{ey}' width='{w:.2f}' "
                       f"height='{row_h - 2}' fill='{colour[e['name']]}' stroke='#333' stroke-width='0.3'/>{text}</g>")
        for e in (i for i in instants if (i["pid"], i["tid"]) == key and tid != ENGINE_TRACK):
            x = left + e["ts"] * scale
            out.append(f"<g><title>{escape(e['name'])} at {e['ts']:.3f} {unit} ({escape(e['args'].get('at', ''))})"
                       f"</title><rect x='{x - 0.6:.2f}' y='{ty}' width='1.2' height='5' fill='{colour[e['name']]}'/></g>")
        if tid == ENGINE_TRACK:
            for e in (i for i in instants if (i["pid"], i["tid"]) == key):
                x = left + e["ts"] * scale
                out.append(f"<g><title>{escape(e['name'])} at step {e['ts']}</title>"
                           f"<path d='M{x - 3.5:.1f},{ty - 2} L{x + 3.5:.1f},{ty - 2} L{x:.1f},{ty + 5} z' "
                           f"fill='#c0392b'/></g>")
    for i, name in enumerate(kinds + marks):
        lx = 16 + (i % per_row) * 200
        ly = legend_y + 22 * (i // per_row)
        box = 12 if name in kinds else 5
        out.append(f"<rect x='{lx}' y='{ly - 10}' width='14' height='{box}' fill='{colour[name]}' stroke='#333' "
                   f"stroke-width='0.3'/><text x='{lx + 20}' y='{ly}' {FONT} font-size='11'>{escape(name)}</text>")
    if any(e["tid"] == ENGINE_TRACK for e in instants):
        lx = 16 + (len(kinds + marks) % per_row) * 200
        ly = legend_y + 22 * (len(kinds + marks) // per_row)
        out.append(f"<path d='M{lx},{ly - 10} L{lx + 10},{ly - 10} L{lx + 5},{ly} z' fill='#c0392b'/>"
                   f"<text x='{lx + 20}' y='{ly}' {SANS} font-size='11'>mbarrier phase completed</text>")
    out.append(f"<text x='16' y='{height - 12}' {SANS} font-size='11' fill='#777'>generated by "
               f"docs/pictures/make_pictures.py from {escape(source)}; do not edit by hand</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def hardware_trace(path: Path, cta: int = 0) -> Trace:
    """One CTA's tracks of a committed hardware timeline (bench/results)."""
    events = json.loads(path.read_text())["traceEvents"]
    return Trace(events=[e for e in events if e["pid"] == cta])


# ---- driver ------------------------------------------------------------------------------

def pictures() -> dict[str, str]:
    """Every file this script makes: name -> text."""
    trace = saxpy_trace()
    return {
        "barriers_tma_copy.svg": barrier_svg("tma_copy.tma"),
        "barriers_gemm_sm90.svg": barrier_svg("gemm_sm90.tma"),
        "trace_saxpy.svg": trace_svg(trace, "examples/saxpy.tma on the interpreter: M = 100, N = 130, "
                                            "one CTA, seed 1"),
        "trace_saxpy.json": json.dumps({"traceEvents": trace.events, "displayTimeUnit": "ns"}, indent=0) + "\n",
        "trace_gemm_sm90_h100.svg": trace_svg(
            hardware_trace(GEMM_TIMELINE), "examples/gemm_sm90.tma on an H100 (Kernel.profile): 2048 x 1536 x 1000, "
            "CTA 0: one 128 x 256 tile, 16 K-steps", HARDWARE_ABOUT, "microseconds", str(GEMM_TIMELINE.relative_to(ROOT))),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write into (default: beside this script)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file differs from its output")
    args = parser.parse_args(argv)
    stale = []
    for name, text in pictures().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print("stale: " + ", ".join(stale) + " (run python docs/pictures/make_pictures.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`tmalangc run FILE --interpret|--gpu`: run a kernel on random inputs, on the reference
interpreter or on the GPU.

    tmalangc run examples/tma_copy.tma --interpret --dims M=300,N=200 [--seed S --explore N] [--trace t.json]
        [-D NAME=VALUE ...]
    tmalangc run examples/gemm_sm90.tma --gpu --dims M=1000,N=1000,K=512 [--trace t.json --ctas 2] [--watchdog]

The interpreter reports the protocol verdict (exit 0) or the violation as a located diagnostic
(exit 1). On the GPU, --trace writes the hardware timeline of the first --ctas CTAs
(Kernel.profile) in the interpreter's trace format, and --watchdog turns a hang into E218.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import numpy as np

from . import defines
from ..api import compile as compile_kernel
from ..contract.binding import check_extent
from ..contract.manifest import TensorArg
from ..contract.random_inputs import DEFAULT_DIM, random_inputs as _random_inputs
from ..diagnostics import TmalangError, error
from .files import check_outputs, read_source, write_file
from ..contract.trace import Trace
from ..targets.arch import DEFAULT, TARGETS
from ..targets.dtypes import NUMPY



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tmalangc run", description="Run a kernel on random inputs.")
    p.add_argument("file")
    engine = p.add_mutually_exclusive_group(required=True)
    engine.add_argument("--interpret", action="store_true", help="run on the reference interpreter (CPU)")
    engine.add_argument("--gpu", action="store_true", help="run on the GPU")
    p.add_argument("--dims", default="", help="symbolic dims, e.g. M=300,N=200 (default 256 each)")
    p.add_argument("--kernel")
    p.add_argument("--arch", default=DEFAULT.name, choices=list(TARGETS),
                   help="the target the kernel is written for (tcgen05 and tmem need one that has them)")
    p.add_argument("--seed", type=int, help="randomise interleavings and TMA latency")
    p.add_argument("--explore", type=int, default=0, help="run N schedules starting at --seed")
    p.add_argument("--ctas", type=int, help="CTAs to simulate for a persistent grid (default 2); with --gpu "
                   "--trace: CTAs to record (default 1)")
    p.add_argument("--trace", type=Path, help="write a Chrome/Perfetto trace of the run")
    p.add_argument("--watchdog", action=argparse.BooleanOptionalAction, default=None,
                   help="with --gpu: a hang stops the kernel and reports the barrier (E218)")
    defines.add_option(p)
    return p


def run_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_options(parser, args)
    dims = _parse_dims(parser, args.dims)
    constants = defines.parse(parser, args.defines)
    try:
        if args.trace:
            check_outputs([args.trace])
        kernel = compile_kernel(read_source(args.file), arch=args.arch, kernel=args.kernel, name=args.file,
                                constants=constants, watchdog=args.watchdog, _binder="-D")
        _check_memory(kernel.manifest, dims)
        inputs = _random_inputs(kernel.manifest, dims, np.random.default_rng(args.seed or 0))
        if args.gpu:
            return _run_on_gpu(kernel, inputs, dims, args)
        trace = Trace() if args.trace else None
        kernel.interpret(*inputs, dims=dims, seed=args.seed, explore=args.explore, ctas=args.ctas, trace=trace)
        if trace is not None:
            write_file(args.trace, trace.to_json())
    except TmalangError as exc:
        print(exc.report(), file=sys.stderr)
        return 1
    schedules = max(1, args.explore)
    print(f"{kernel.name}: protocol ok over {schedules} schedule(s) with "
          + ", ".join(f"{k}={v}" for k, v in dims.items()))
    return 0


def _run_on_gpu(kernel, inputs: list, dims: dict[str, int], args) -> int:
    if args.trace:
        trace = kernel.profile(*inputs, dims=dims, ctas=args.ctas or 1)
        write_file(args.trace, trace.to_json())
    else:
        kernel(*inputs, dims=dims)
    recorded = f"; the timeline of {args.ctas or 1} CTA(s) is in {args.trace}" if args.trace else ""
    print(f"{kernel.name}: ran on the GPU with " + ", ".join(f"{k}={v}" for k, v in dims.items()) + recorded)
    return 0


def _check_options(parser, args) -> None:
    """Usage errors (exit 2) for values no run can use."""
    if args.gpu and (args.seed is not None or args.explore):
        parser.error("--seed and --explore choose the interpreter's schedules; the GPU has its own")
    if args.interpret and args.watchdog:
        parser.error("--watchdog is for --gpu: the interpreter reports every hang already (E401)")
    if args.seed is not None and args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    if args.explore < 0:
        parser.error(f"--explore must be >= 0, got {args.explore}")
    if args.ctas is not None and args.ctas < 1:
        parser.error(f"--ctas must be >= 1, got {args.ctas}")


def _parse_dims(parser, text: str) -> dict[str, int]:
    dims = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        value = value.strip()
        if not name.strip() or not re.fullmatch(r"[0-9]{1,19}", value):
            parser.error(f"--dims: expected NAME=INT, got '{item}'")
        dims[name.strip()] = int(value)
    return dims


def _check_memory(manifest, dims: dict[str, int]) -> None:
    """Refuse dims out of range (E206) or whose inputs cannot fit in memory (E009) before allocating.

    The interpreter keeps a copy of every tensor per run, so a run needs about three times the
    inputs' bytes.
    """
    total = 0
    for arg in manifest.args:
        if not isinstance(arg, TensorArg):
            continue
        count = NUMPY[arg.dtype].itemsize
        for axis, d in enumerate(arg.shape):
            extent = d if isinstance(d, int) else dims.get(d, DEFAULT_DIM)
            check_extent(extent, f"--dims {d}" if isinstance(d, str) else f"argument '{arg.name}': dim {axis}")
            count *= extent
        total += count
    available = _available_memory()
    if available is not None and 3 * total > available:
        raise error("E009", f"the random inputs for these dims need {3 * total / 2**30:.1f} GiB, more than the "
                    f"{available / 2**30:.1f} GiB of memory available", None, "choose smaller --dims")


def _available_memory() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


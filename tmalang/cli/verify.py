"""`tmalangc verify FILE`: every schedule of one launch, explored (tmalang.verify).

    tmalangc verify examples/tma_copy.tma --dims M=300,N=200 [--ctas 2] [--trace cx.json]
        [--method order|explore] [--states N]

Exit 0 with "verified: ..." when every schedule of the launch keeps the protocol; exit 1 with the
violation, in the interpreter's words and with the shortest schedule that reaches it (--trace
writes that schedule as a Perfetto trace); exit 3 when the search could not finish (its state
limit, or a kernel whose warps' paths depend on the schedule) and says what it did check.
--certificate F writes what a verified launch proved (tmalang/verify/certificate.py); python -m
tmalang.tools.certificate_check F re-validates it on its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from . import defines
from ..api import compile as compile_kernel
from ..diagnostics import TmalangError
from .files import check_outputs, read_source, write_file
from .run import _check_memory, _parse_dims, _random_inputs
from ..targets.arch import DEFAULT, TARGETS
from ..verify.explore import DEFAULT_STATE_LIMIT
from ..verify import METHODS, verify_sweep

NOT_FINISHED = 3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tmalangc verify", description="Explore every schedule of one launch.")
    p.add_argument("file")
    p.add_argument("--dims", default="", help="symbolic dims, e.g. M=300,N=200 (default 256 each)")
    p.add_argument("--kernel")
    p.add_argument("--arch", default=DEFAULT.name, choices=list(TARGETS))
    p.add_argument("--ctas", type=int, help="CTAs of a persistent grid (default 2)")
    p.add_argument("--method", choices=METHODS, default="order",
                   help="order: checks on one recorded run's happens-before order (default); explore: a search of "
                        "the states, exponential, for small launches")
    p.add_argument("--states", type=int, default=DEFAULT_STATE_LIMIT,
                   help="with --method explore: stop after this many states")
    p.add_argument("--trace", type=Path, help="write the counterexample's schedule as a Perfetto trace")
    p.add_argument("--certificate", type=Path,
                   help="write what was proved, for a verified launch, as JSON that python -m "
                        "tmalang.tools.certificate_check re-validates (nothing is written otherwise)")
    p.add_argument("--sweep", action="store_true",
                   help="verify a set of launches instead of one: every loop's trip count through a stated set, "
                        "with partial last boxes, on 1..3 CTAs; then, per dim, every trip count where the "
                        "pumping argument applies, or why not (--dims and --ctas then not allowed)")
    defines.add_option(p)
    return p


def verify_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.ctas is not None and args.ctas < 1:
        parser.error(f"--ctas must be >= 1, got {args.ctas}")
    if args.certificate and args.method != "order":
        parser.error("--certificate records the happens-before checks: leave --method at order")
    if args.states < 1:
        parser.error(f"--states must be >= 1, got {args.states}")
    dims = _parse_dims(parser, args.dims)
    if args.sweep and (dims or args.ctas):
        parser.error("--sweep chooses the launches: leave out --dims and --ctas")
    if args.sweep and args.certificate:
        parser.error("--certificate certifies one launch: leave out --sweep")
    try:
        if args.trace or args.certificate:
            check_outputs([f for f in (args.trace, args.certificate) if f])
        kernel = compile_kernel(read_source(args.file), arch=args.arch, kernel=args.kernel, name=args.file,
                                constants=defines.parse(parser, args.defines), _binder="-D")
        if args.sweep:
            return _report_sweep(kernel, verify_sweep(kernel._c.ir, kernel.manifest, states=args.states), args)
        _check_memory(kernel.manifest, dims)
        inputs = _random_inputs(kernel.manifest, dims, np.random.default_rng(0))
        verdict = kernel.verify(*inputs, dims=dims, ctas=args.ctas, states=args.states, certificate=args.certificate,
                                method=args.method)
    except TmalangError as exc:
        print(exc.report(), file=sys.stderr)
        return 1
    if verdict.error is not None:
        print(verdict.error.report(), file=sys.stderr)
        if args.trace and verdict.trace is not None:
            write_file(args.trace, verdict.trace.to_json())
        return 1
    print(f"{kernel.name}: {verdict.summary()}")
    if args.certificate:
        print(f"certificate written to {args.certificate}" if verdict.certificate is not None else
              "no certificate: the launch was not verified", file=sys.stdout if verdict.verified else sys.stderr)
    return 0 if verdict.verified else NOT_FINISHED


def _report_sweep(kernel, report: Sweep, args) -> int:
    failed = report.failed
    if failed is None:
        print(f"{kernel.name}: {report.summary()}")
        return 0
    launch, verdict = failed
    where = ", ".join(f"{k}={v}" for k, v in launch.dims.items()) + (f", ctas={launch.ctas}" if launch.ctas else "")
    if verdict.error is not None:
        print(f"{kernel.name}: the launch with {where} does not verify", file=sys.stderr)
        print(verdict.error.report(), file=sys.stderr)
        if args.trace and verdict.trace is not None:
            write_file(args.trace, verdict.trace.to_json())
        return 1
    print(f"{kernel.name}: the launch with {where}: {verdict.summary()}")
    return NOT_FINISHED

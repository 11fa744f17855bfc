"""`tmalangc run FILE --interpret`: run a kernel on the reference interpreter with random inputs.

    tmalangc run examples/tma_copy.tma --interpret --dims M=300,N=200 [--seed S --explore N] [--trace t.json]

Reports the protocol verdict (exit 0) or the violation as a located diagnostic (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from .api import compile as compile_kernel
from .backend.manifest import TensorArg
from .diagnostics import TmalangError
from .interp.trace import Trace
from .runtime.dtypes import NUMPY


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tmalangc run", description="Run a kernel on random inputs.")
    p.add_argument("file")
    p.add_argument("--interpret", action="store_true", required=True,
                   help="use the reference interpreter (the only engine of `run` so far)")
    p.add_argument("--dims", default="", help="symbolic dims, e.g. M=300,N=200 (default 256 each)")
    p.add_argument("--kernel")
    p.add_argument("--arch", default="sm_90a", choices=["sm_90a", "sm_100a"],
                   help="the target the kernel is written for (tcgen05 and tmem need sm_100a)")
    p.add_argument("--seed", type=int, help="randomise interleavings and TMA latency")
    p.add_argument("--explore", type=int, default=0, help="run N schedules starting at --seed")
    p.add_argument("--ctas", type=int, help="CTAs to simulate for a persistent grid (default 2)")
    p.add_argument("--trace", type=Path, help="write a Chrome/Perfetto trace of the run")
    return p


def run_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    dims = _parse_dims(parser, args.dims)
    try:
        kernel = compile_kernel(Path(args.file).read_text(), arch=args.arch, kernel=args.kernel, name=args.file)
        inputs = _random_inputs(kernel.manifest, dims, np.random.default_rng(args.seed or 0))
        trace = Trace() if args.trace else None
        kernel.interpret(*inputs, dims=dims, seed=args.seed, explore=args.explore, ctas=args.ctas, trace=trace)
    except OSError as exc:
        print(f"tmalangc: error: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 1
    except TmalangError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    if trace is not None:
        args.trace.write_text(trace.to_json())
    schedules = max(1, args.explore)
    print(f"{kernel.name}: protocol ok over {schedules} schedule(s) with "
          + ", ".join(f"{k}={v}" for k, v in dims.items()))
    return 0


def _parse_dims(parser, text: str) -> dict[str, int]:
    dims = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        if not value.isdigit():
            parser.error(f"--dims: expected NAME=INT, got '{item}'")
        dims[name.strip()] = int(value)
    return dims


def _random_inputs(manifest, dims: dict[str, int], rng) -> list:
    """Random tensors (rows padded to 16 bytes, as TMA needs) and scalars for every argument."""
    values = []
    for arg in manifest.args:
        dtype = NUMPY[arg.dtype]
        if not isinstance(arg, TensorArg):
            values.append(dtype.type(rng.integers(1, 5) if dtype.kind in "iu" else rng.standard_normal()))
            continue
        shape = [d if isinstance(d, int) else dims.setdefault(d, 256) for d in arg.shape]
        inner = -(-shape[-1] * dtype.itemsize // 16) * 16 // dtype.itemsize
        data = rng.integers(-50, 50, size=[*shape[:-1], inner]) if dtype.kind in "iu" else \
            rng.standard_normal([*shape[:-1], inner])
        values.append(data.astype(dtype)[..., : shape[-1]])
    return values

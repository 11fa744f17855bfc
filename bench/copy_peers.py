"""Is torch `copy_` a bar any kernel on the SMs can reach? For a dense same-dtype tensor, torch's
`copy_` is a driver memcpy (cudaMemcpyAsync, device to device), not a kernel of its own. This
benchmark times it in turns with copies that run on the SMs: torch's elementwise kernel
(`torch.mul(x, 1, out=y)`, the same bytes read and written), Triton copy kernels at several
block sizes (plain vectorized loads and stores), Triton copies through tensor descriptors with
TMA on one side, the other or both (which side holds a TMA copy back), and
`tmalang.copy`, at 1 GiB and 64 MiB of f32. Every output is checked first.

Bandwidth counts bytes read plus bytes written. Each sample is a batch of back-to-back calls
between CUDA events (timing.timed_in_turns); contenders take turns within each round.

    python bench/copy_peers.py --out bench/results/copy-peers-<date>-h200.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parent))
from timing import arguments, timed_in_turns, write_report  # noqa: E402

import tmalang  # noqa: E402

SIZES = {"1 GiB": 1 << 28, "64 MiB": 1 << 24}      # f32 elements
TRITON_BLOCKS = ((4096, 4), (8192, 8), (16384, 8), (32768, 16))   # (elements per program, warps)
METHOD = ("median per-call ms of back-to-back batches between CUDA events, contenders in turns "
          "(bench/timing.py timed_in_turns); TB/s counts bytes read plus written; outputs checked first")


@triton.jit
def _triton_copy(src, dst, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


@triton.jit
def _triton_tma_copy(src, dst, rows, TMA_LOAD: tl.constexpr, TMA_STORE: tl.constexpr, BR: tl.constexpr,
                     BC: tl.constexpr):
    """One [BR, BC] block of a [rows, BC] view; each side through TMA (a tensor descriptor) or plain
    vectorized loads and stores (which split the TMA copy's time between its two sides)."""
    first = tl.program_id(0) * BR
    offsets = (first + tl.arange(0, BR))[:, None].to(tl.int64) * BC + tl.arange(0, BC)[None, :]
    if TMA_LOAD:
        block = tl.make_tensor_descriptor(src, shape=[rows, BC], strides=[BC, 1], block_shape=[BR, BC]).load([first, 0])
    else:
        block = tl.load(src + offsets)
    if TMA_STORE:
        tl.make_tensor_descriptor(dst, shape=[rows, BC], strides=[BC, 1], block_shape=[BR, BC]).store([first, 0], block)
    else:
        tl.store(dst + offsets, block)


def triton_tma_copy(tma_load: bool, tma_store: bool, br: int = 32, bc: int = 256):
    def run(x, y):
        rows = x.numel() // bc
        _triton_tma_copy[(rows // br,)](x, y, rows, TMA_LOAD=tma_load, TMA_STORE=tma_store, BR=br, BC=bc,
                                        num_warps=8)
    return run


def triton_copy(block: int, warps: int):
    def run(x, y):
        _triton_copy[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), BLOCK=block, num_warps=warps)
    return run


def contenders(x, y) -> dict:
    runs = {"torch copy_ (driver memcpy)": lambda x, y: y.copy_(x),
            "torch.mul(x, 1, out=y) (SM kernel)": lambda x, y: torch.mul(x, 1.0, out=y)}
    for block, warps in TRITON_BLOCKS:
        runs[f"triton copy, {block} per program, {warps} warps"] = triton_copy(block, warps)
    for load, store in ((True, True), (True, False), (False, True)):
        sides = f"{'TMA' if load else 'plain'} load, {'TMA' if store else 'plain'} store"
        runs[f"triton 32x256 blocks, {sides}"] = triton_tma_copy(load, store)
    runs["tmalang.copy"] = lambda x, y: tmalang.copy(x, y)
    return runs


def main() -> None:
    args = arguments(samples=30)
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    rows = []
    for size_name, n in SIZES.items():
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        runs = contenders(x, y)
        for name, run in runs.items():
            y.fill_(float("nan"))
            run(x, y)
            assert torch.equal(x, y), name
        times = timed_in_turns({name: (lambda i, run=run: run(x, y)) for name, run in runs.items()},
                               args.samples, batch=10)
        memcpy = times["torch copy_ (driver memcpy)"]
        for name, ms in times.items():
            row = {"size": size_name, "contender": name, "ms": ms, "TB/s": 2 * 4 * n / ms / 1e9,
                   "vs_torch_copy_": memcpy / ms}
            rows.append(row)
            print(f"{size_name:7s} {name:45s} {ms * 1e3:8.1f} us {row['TB/s']:5.2f} TB/s "
                  f"{row['vs_torch_copy_']:.3f}x copy_", flush=True)
        del x, y
    write_report(args.out, "torch copy_ (a driver memcpy) against copies that run on the SMs: torch elementwise, "
                 "Triton, tmalang.copy; f32", METHOD, rows)


if __name__ == "__main__":
    main()

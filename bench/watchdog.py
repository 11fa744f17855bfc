"""What the watchdog costs: examples/gemm_sm90.tma and examples/attention_sm90.tma compiled with
and without it (`compile(..., watchdog=...)`), timed in the same run, in turns (bench/gemm.py's
method: medians of event-timed batches after warm-up, two input sets). cuBLAS / SDPA FLASH run
alongside as the yardstick. Both builds' results are checked against each other bit for bit
(the watchdog changes no arithmetic).

    python bench/watchdog.py --out bench/results/watchdog-<date>-h100.json
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
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from attention import ours  # noqa: E402
from timing import timed_in_turns  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GEMM_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (8192, 8192, 1024)]
ATTENTION_SHAPES = [((4, 16, 4096, 128), False), ((4, 16, 4096, 128), True), ((4, 32, 4096, 64), False)]
ATTENTION_KERNELS = {64: "flash_attention", 128: "flash_attention_hd128"}


def builds(path: Path, **options) -> dict[str, tmalang.Kernel]:
    return {name: tmalang.compile_file(path, watchdog=on, **options) for name, on in (("on", True), ("off", False))}


def summarize(result: dict, flops: int) -> dict:
    for name in ("on", "off", "reference"):
        result[name]["tflops"] = flops / result[name]["ms"] / 1e9
    result["watchdog_cost"] = result["on"]["ms"] / result["off"]["ms"] - 1
    return result


def gemm_row(shape, samples: int) -> dict:
    m, n, k = shape
    kernels = builds(ROOT / "examples" / "gemm_sm90.tma")
    sets = [(torch.randn(m, k, device="cuda").to(torch.bfloat16), torch.randn(n, k, device="cuda").to(torch.bfloat16))
            for _ in range(2)]
    outs = {name: torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for name in ("on", "off", "reference")}
    runs = {"reference": lambda i: torch.matmul(sets[i][0], sets[i][1].T, out=outs["reference"]),
            **{name: (lambda i, kern=kern, c=outs[name]: kern(sets[i][0], sets[i][1], c)) for name, kern in kernels.items()}}
    for run in runs.values():
        run(0)
    torch.cuda.synchronize()
    assert torch.equal(outs["on"], outs["off"]), "the watchdog changed the result"
    flops = 2 * m * n * k
    times = timed_in_turns(runs, samples, max(4, int(4e12 // flops)))
    result = summarize({"kernel": "gemm_sm90", "shape": list(shape), **{n_: {"ms": t} for n_, t in times.items()}}, flops)
    print(f"gemm {m}x{n}x{k}: off {result['off']['tflops']:.0f}  on {result['on']['tflops']:.0f} TFLOP/s  "
          f"cost {100 * result['watchdog_cost']:+.2f}%  (cuBLAS {result['reference']['tflops']:.0f})", flush=True)
    return result


def attention_row(shape, causal: bool, samples: int) -> dict:
    b, h, s, d = shape
    kernels = builds(ROOT / "examples" / "attention_sm90.tma", kernel=ATTENTION_KERNELS[d])
    sets = [tuple(torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)) for _ in range(2)]
    outs = {name: (torch.empty(b, h, s, d, device="cuda", dtype=torch.bfloat16),
                   torch.empty(b * h, -(-s // 4) * 4, device="cuda")[:, :s]) for name in kernels}

    def flash(i):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(*sets[i], is_causal=causal)

    runs = {"reference": flash,
            **{name: (lambda i, kern=kern, out=outs[name]: ours(kern)(*sets[i], causal, out)) for name, kern in kernels.items()}}
    for run in runs.values():
        run(0)
    torch.cuda.synchronize()
    assert torch.equal(outs["on"][0], outs["off"][0]), "the watchdog changed the result"
    flops = 4 * b * h * s * s * d // (2 if causal else 1)
    times = timed_in_turns(runs, samples, max(3, int(2e12 // flops)))
    result = summarize({"kernel": "attention_sm90", "shape": list(shape), "causal": causal,
                        **{n_: {"ms": t} for n_, t in times.items()}}, flops)
    print(f"attention {shape} causal={causal}: off {result['off']['tflops']:.0f}  on {result['on']['tflops']:.0f} "
          f"TFLOP/s  cost {100 * result['watchdog_cost']:+.2f}%  (FLASH {result['reference']['tflops']:.0f})", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", type=int, default=31)
    args = parser.parse_args()
    rows = [gemm_row(shape, args.samples) for shape in GEMM_SHAPES]
    rows += [attention_row(shape, causal, args.samples) for shape, causal in ATTENTION_SHAPES]
    report = {
        "benchmark": "the watchdog's cost: gemm_sm90 and attention_sm90 compiled with and without it, same run",
        "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "method": f"median of {args.samples} event-timed batches per build after warm-up, builds timed in turns "
                  "within each round; watchdog_cost = ms(on) / ms(off) - 1; reference: cuBLAS / SDPA FLASH",
        "results": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

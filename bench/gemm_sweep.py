"""Tile/stage variants of examples/gemm_sm90.tma at one shape, against cuBLAS in the same run.

Each variant is the example's text with the tile shape and ring depth substituted, so every
number here is a kernel the language expresses as written.

    python bench/gemm_sweep.py 8192
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm import median_ms  # noqa: E402

SOURCE = (Path(__file__).resolve().parents[1] / "examples" / "gemm_sm90.tma").read_text()
VARIANTS = {  # name: (tile N, stages, group, cluster with B multicast)
    "128x192, 4 stages, 2x1 cluster, B multicast (example)": (192, 4, 8, 2),
    "128x192, 4 stages, no cluster": (192, 4, 8, 1),
    "128x256, 3 stages, 2x1 cluster, B multicast": (256, 3, 8, 2),
    "128x128, 6 stages, 2x1 cluster, B multicast": (128, 6, 8, 2),
}


def variant(n: int, stages: int, group: int, cluster: int = 1) -> str:
    text = SOURCE.replace("b[192, 64]", f"b[{n}, 64]").replace("c[128, 192]", f"c[128, {n}]")
    text = text.replace("f32[128, 192]", f"f32[128, {n}]").replace("ring[4]", f"ring[{stages}]")
    text = text.replace(" grouped 8", f" grouped {group}" if group else "")
    if cluster == 1:
        text = text.replace("    cluster 2\n", "").replace(" multicast\n", "\n")
    return text


def main() -> None:
    for size in [int(x) for x in sys.argv[1:]] or [8192]:
        sweep(size)


def sweep(size: int) -> None:
    a = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    b = torch.randn(size, size, device="cuda").to(torch.bfloat16)
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    reference = a @ b.T
    flops = 2 * size ** 3
    t = median_ms(lambda i: torch.matmul(a, b.T, out=c), 10, 4)
    print(f"{size}^3 cuBLAS: {flops / t / 1e9:.0f} TFLOP/s")
    for name, params in VARIANTS.items():
        kernel = tmalang.compile(variant(*params))
        kernel(a, b, c)
        torch.cuda.synchronize()
        error = ((c.double() - reference.double()).norm() / reference.double().norm()).item()
        t = median_ms(lambda i: kernel(a, b, c), 10, 4)
        print(f"{name:<32} {flops / t / 1e9:6.0f} TFLOP/s  rel err {error:.1e}  smem {kernel.manifest.smem_bytes}")


if __name__ == "__main__":
    main()

"""fp8 attention forward: tmalang.attention on float8_e4m3fn operands (examples/attention_fp8_sm90.tma)
against SDPA's CUDNN and FLASH backends and tmalang's own bf16 forward on the same values in bf16,
in the same run. torch's SDPA has no fp8 path, so the peers run the bf16 operands: the ratio is
what a user gains by quantising to fp8. Head dim 128, the issue's shapes, causal and not.

tmalang's fp8 call is timed as a user makes it: it transposes V into the kernel's K-major
[B·HKV, 128, T] copy and writes the per-head scale rows in every call. Each contender's output is
checked against float32 SDPA on the dequantised values first (the first and last query heads).
Timed three ways (bench/timing.py).

    python bench/attention_fp8.py --out bench/results/attention-fp8-<date>-h100.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, arguments, first_runs, timed_row, write_report  # noqa: E402

SHAPES = [((4, 16, 4096, 128), 16), ((2, 16, 8192, 128), 16), ((16, 16, 1024, 128), 16),
          ((2, 24, 3000, 128), 24), ((4, 32, 4096, 128), 8)]


def sdpa(backend, q, k, v, causal):
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])


def row(shape, kv_heads: int, causal: bool, samples: int) -> dict:
    b, h, s, d = shape
    sets = []
    for _ in range(2):
        fp8 = [(torch.randn(b, n, s, d, device="cuda") * 2).to(torch.float8_e4m3fn) for n in (h, kv_heads, kv_heads)]
        sets.append((fp8, [x.to(torch.bfloat16) * 0.5 for x in fp8]))    # the dequantised values, in bf16
    descale = torch.full((b, kv_heads), 0.5, device="cuda")
    runs = {"tmalang": lambda i: tmalang.attention(*sets[i][0], causal=causal, q_descale=descale,
                                                   k_descale=descale, v_descale=descale),
            "tmalang_bf16": lambda i: tmalang.attention(*sets[i][1], causal=causal),
            "flash": lambda i: sdpa(SDPBackend.FLASH_ATTENTION, *sets[i][1], causal),
            "cudnn": lambda i: sdpa(SDPBackend.CUDNN_ATTENTION, *sets[i][1], causal)}
    heads = [0, h - 1]
    q, k, v = (x[:1].float().repeat_interleave(h // x.shape[1], dim=1)[:, heads] for x in sets[0][1])
    with sdpa_kernel(SDPBackend.MATH):
        reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal).double()

    def error_of(out):
        got = out[:1, heads].double()
        return ((got - reference).norm() / reference.norm()).item()
    result = {"shape": list(shape), "kv_heads": kv_heads, "causal": causal}
    first_runs(runs, result, error_of)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    return timed_row(runs, result, flops, samples, f"{shape} kv_heads={kv_heads} causal={causal}")


def main() -> None:
    args = arguments()
    rows = [row(shape, kv, causal, args.samples) for shape, kv in SHAPES for causal in (False, True)]
    write_report(args.out, "attention forward in fp8 e4m3 (examples/attention_fp8_sm90.tma), head dim 128, vs "
                 "SDPA FLASH/CUDNN and tmalang's bf16 forward on the same values in bf16",
                 f"{METHOD}; {args.samples} rounds; FLOPs 4·B·H·S²·D, halved when causal; the bf16 contenders "
                 "read the dequantised values (fp8 · 0.5) in bf16, made outside the timing; the fp8 call's V "
                 "transpose and scale rows are inside it", rows)


if __name__ == "__main__":
    main()

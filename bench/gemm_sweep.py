"""Tile, stage and epilogue variants of the bf16 GEMM at one shape, against cuBLAS in the same run.

Every variant is a tmalang program: a kernel file with its compile-time constants bound
(docs/language.md §2a), or, where the epilogue's number of stores and staging tiles differs, the
kernel written out below; so every number here is a kernel the language expresses as written.
cuBLAS and the variants are timed in turns, round by round.

    python bench/gemm_sweep.py [SIZE ...] [--out results.json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402

import torch  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import timed_in_turns  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gemm_sm90.tma"
WHOLE_TILE = ROOT / "bench" / "kernels" / "gemm_whole_tile_sm90.tma"


def as_fp8(source: str) -> str:
    """A bf16 GEMM with e4m3 inputs (bind BK=128: the same 128-byte K-slices hold 128 elements)."""
    return source.replace("(a: bf16[M, K], b: bf16[N, K]", "(a: f8e4m3[M, K], b: f8e4m3[N, K]").replace(
        "kernel gemm<", "kernel gemm_fp8<")


def gemm_source(n: int, stages: int, block: int, buffers: int) -> str:
    """128 x n tiles, a ring of `stages`, the epilogue written in 128B-swizzled [128, block]
    column blocks through `buffers` staging tiles used in turn: a number of stores and staging
    tiles, which no constant can vary (a kernel has no loops over declarations)."""
    parts = n // block
    stores, staging = [], [f"cs{i}" for i in range(buffers)]
    for j in range(parts):
        cs = staging[j % buffers]
        stores.append(f"""            elect {{ wait_group read {buffers - 1} }}   // {cs}'s previous store has read it
            sync
            {cs} = bf16(acc[0, {j}])
            elect {{
                store C[m, {parts} * n + {j}] <- {cs}
                commit_group
            }}""")
    smem = "\n".join(f"    smem {cs}: C" for cs in staging)
    epilogue = "\n".join(stores)
    return f"""kernel gemm(a: bf16[M, K], b: bf16[N, K], c: bf16[M, N]) {{
    grid persistent
    cluster 2
    box A = a[128, 64] swizzle 128B
    box B = b[{n}, 64] swizzle 128B
    box T = c[128, {n}]
    box C = c[128, {block}] swizzle 128B
{smem}
    pipeline ring[{stages}] {{ a: A, b: B }}

    role producer: warp 0, regs 40 {{
        for tile (m, n) in tiles(c, T) grouped 8 {{
            for k in steps(K, 64) {{
                produce ring as s {{
                    load A[m, k] -> s.a
                    load B[n, k] -> s.b multicast
                }}
            }}
        }}
    }}
    role consumer: warps 4..11, regs 232 {{
        accumulator acc: f32[128, {n}]
        for tile (m, n) in tiles(c, T) grouped 8 {{
            acc = 0
            for k in steps(K, 64) {{
                consume ring as s {{ mma acc, s.a, s.b }}
            }}
{epilogue}
        }}
        elect {{ wait_group 0 }}
    }}
}}
"""


def compile_variant(variant) -> tmalang.Kernel:
    """A variant: (a .tma file, its constants), or (source text, its name[, its constants]); the
    name is what the text's diagnostics would point into."""
    what, *rest = variant
    if isinstance(what, Path):
        return tmalang.compile_file(what, constants=rest[0])
    return tmalang.compile(what, name=rest[0], constants=rest[1] if len(rest) > 1 else None)


VARIANTS = {
    "example: 128x256, 4 stages, epilogue 4 x [128, 64] swizzled, 2 buffers": (EXAMPLE, {}),
    "128x256, 4 stages, epilogue 4 x [128, 64] swizzled, 2 buffers, grouped 16": (EXAMPLE, {"GROUP": 16}),
    "128x256, 3 stages, epilogue 4 x [128, 64] swizzled, 4 buffers": (gemm_source(256, 3, 64, 4), "<gemm 4 buffers>"),
    "128x256, 3 stages, whole-tile epilogue": (WHOLE_TILE, {"BN": 256, "STAGES": 3}),
    "128x192, 4 stages, whole-tile epilogue": (WHOLE_TILE, {"BN": 192, "STAGES": 4}),
    "128x192, 4 stages, epilogue 3 x [128, 64] swizzled, 3 buffers": (gemm_source(192, 4, 64, 3), "<gemm 3 buffers>"),
}


FP8_VARIANTS = {
    "fp8 example: 128x256, 4 stages, epilogue 4 x [128, 64] swizzled, 2 buffers":
        (ROOT / "examples" / "gemm_fp8_sm90.tma", {}),
    "fp8 128x192, 4 stages, whole-tile epilogue":
        (as_fp8(WHOLE_TILE.read_text()), str(WHOLE_TILE), {"BN": 192, "STAGES": 4, "BK": 128}),
}


def sweep(size: int, samples: int, fp8: bool = False) -> list[dict]:
    dtype = torch.float8_e4m3fn if fp8 else torch.bfloat16
    sets = [(torch.randn(size, size, device="cuda").to(dtype),
             torch.randn(size, size, device="cuda").to(dtype)) for _ in range(2)]
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    reference = (sets[0][0].float() @ sets[0][1].float().T).double()
    flops, batch = 2 * size ** 3, max(4, int(4e12 // (2 * size ** 3)))

    if fp8:
        one = torch.ones((), device="cuda")
        runs = {"cublas": lambda i: torch._scaled_mm(sets[i][0], sets[i][1].T, one, one, out_dtype=torch.bfloat16)}
    else:
        runs = {"cublas": lambda i: torch.matmul(sets[i][0], sets[i][1].T, out=c)}
    rows = []
    for name, variant in (FP8_VARIANTS if fp8 else VARIANTS).items():
        kernel = compile_variant(variant)
        c.fill_(float("nan"))
        kernel(sets[0][0], sets[0][1], c)
        torch.cuda.synchronize()
        error = ((c.double() - reference).norm() / reference.norm()).item()
        runs[name] = lambda i, kernel=kernel: kernel(sets[i][0], sets[i][1], c)
        rows.append({"variant": name, "rel_err_vs_cublas": error, "smem_bytes": kernel.manifest.smem_bytes})
    ms = timed_in_turns(runs, samples, batch)
    best = flops / ms["cublas"] / 1e9
    print(f"{size}^3 cuBLAS {best:.0f} TFLOP/s")
    for row in rows:
        tflops = flops / ms[row["variant"]] / 1e9
        row.update(shape=[size] * 3, tflops=tflops, cublas_tflops=best, vs_cublas=tflops / best)
        print(f"  {row['variant']:<72} {tflops:5.0f} ({row['vs_cublas']:.3f}x)  "
              f"err {row['rel_err_vs_cublas']:.1e}  smem {row['smem_bytes']}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sizes", type=int, nargs="*", default=[8192])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fp8", action="store_true", help="e4m3 inputs against torch._scaled_mm")
    args = parser.parse_args()
    rows = [row for size in args.sizes for row in sweep(size, args.samples, args.fp8)]
    if args.out:
        args.out.write_text(json.dumps({"benchmark": "bf16 GEMM variants vs cuBLAS", "gpu": torch.cuda.get_device_name(),
                                        "date": datetime.date.today().isoformat(), "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()

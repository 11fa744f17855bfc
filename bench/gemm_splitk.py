"""Split-K bf16 GEMM: examples/gemm_splitk_sm90.tma (C += A·Bᵀ into f32 C, each tile's K cut into
S parts that TMA-reduce-add into C) against torch.matmul (cuBLAS, bf16 out) and the persistent
examples/gemm_sm90.tma (no split, bf16 out), in the same run, on shapes with few output tiles and
a long K, where one CTA per tile leaves most of the H100's 132 SMs idle.

Each contender is timed three ways (bench/timing.py: cold-L2 GPU time, warm-L2 CUDA-graph
replay, host-inclusive eager calls), on random data, two input sets alternating. Every variant is
checked against a float32 product of the same bf16 inputs before it is timed; a variant that
fails to compile, launch or match is reported in the JSON with its error and left out of the
timing, never fatal.

The split-K kernel needs C zeroed before each product. `splitk_S` times the zeroing (c.zero_())
and the kernel together, the cost a caller pays; `splitk_S_nozero` times the kernel alone (C then
keeps accumulating across launches: the timing is unaffected, the values are not looked at).
`splitk_cluster2_S` is the example with clusters of two and B multicast (as gemm_sm90 runs),
zeroing included.

    python bench/gemm_splitk.py                       # writes bench/results/gemm-splitk-<date>-<gpu>.json
    python bench/gemm_splitk.py --samples 9 --splits 2 4 --out /tmp/quick.json
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tmalang  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))   # torch has imported the real `copy`
from timing import METHOD, rates, ratios, three_ways  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (M, N, K): the two shapes, a third with 16 output tiles and K = 12288, and a large
# square one where one CTA per tile already fills the GPU (split-K should not help there)
SHAPES = [(128, 8192, 8192), (1024, 1024, 8192), (256, 2048, 12288), (4096, 4096, 4096)]
SPLITS = [2, 4, 8, 16]
TOLERANCE = 1e-2   # relative Frobenius error against the f32 product (bf16 outputs round at ~4e-3)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:2000]


def _compile(name: str, clustered: bool = False):
    """An example, or (clustered) the split-K example with clusters of two and B multicast, as
    gemm_sm90 runs: the CTAs of a cluster take adjacent tile rows of one part."""
    try:
        text = (ROOT / "examples" / name).read_text()
        if clustered:
            text = text.replace("    grid persistent\n", "    grid persistent\n    cluster 2\n", 1).replace(
                "-> s.b\n", "-> s.b multicast\n", 1)
            assert "cluster 2" in text and "multicast" in text, "the example no longer has the lines to edit"
        return tmalang.compile(text), None
    except Exception as exc:   # noqa: BLE001
        traceback.print_exc()
        return None, _describe(exc)


def shape_row(m: int, n: int, k: int, splits: list[int], samples: int, gemm, splitk, clustered) -> dict:
    sets = [(torch.randn(m, k, device="cuda").to(torch.bfloat16), torch.randn(n, k, device="cuda").to(torch.bfloat16))
            for _ in range(2)]
    c16 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    c32 = torch.zeros(m, n, device="cuda", dtype=torch.float32)
    reference = sets[0][0].float() @ sets[0][1].float().T
    flops = 2 * m * n * k
    batch = max(4, int(4e12 // flops))
    row: dict = {"shape": [m, n, k], "tiles_128x256": -(-m // 128) * -(-n // 256)}
    runs = {"cublas": (lambda i: torch.matmul(sets[i][0], sets[i][1].T, out=c16), c16),
            "zero_c": (lambda i: c32.zero_(), None)}
    if gemm is not None:
        runs["gemm_sm90"] = (lambda i: gemm(sets[i][0], sets[i][1], c16), c16)
    if splitk is not None:
        for s in splits:
            parts = np.int32(s)
            runs[f"splitk_{s}"] = (lambda i, p=parts: (c32.zero_(), splitk(p, sets[i][0], sets[i][1], c32)), c32)
            runs[f"splitk_{s}_nozero"] = (lambda i, p=parts: splitk(p, sets[i][0], sets[i][1], c32), c32)
    if clustered is not None:
        for s in splits:
            parts = np.int32(s)
            runs[f"splitk_cluster2_{s}"] = (lambda i, p=parts: (c32.zero_(), clustered(p, sets[i][0], sets[i][1], c32)),
                                            c32)
    failed: dict[str, str] = {}
    checked = {}
    for name, (run, out) in runs.items():
        if out is None or name.endswith("_nozero"):
            checked[name] = run
            continue
        try:
            out.fill_(float("nan"))
            if out is c32:
                out.zero_()
            run(0)
            torch.cuda.synchronize()
            err = ((out.double() - reference.double()).norm() / reference.double().norm()).item()
            row[name] = {"rel_err_vs_f32": err}
            if not err < TOLERANCE:
                failed[name] = f"wrong result: relative error {err:.3g} >= {TOLERANCE}"
                continue
            checked[name] = run
        except Exception as exc:   # noqa: BLE001 - a fault may poison the CUDA context: later work then fails too
            failed[name] = _describe(exc)
            try:
                torch.cuda.synchronize()
            except Exception:   # noqa: BLE001
                pass
    for s in splits:   # the kernel alone only where the kernel with its zeroing was correct
        if f"splitk_{s}" not in checked:
            checked.pop(f"splitk_{s}_nozero", None)
    for name, times in three_ways(checked, samples, batch).items():
        row.setdefault(name, {}).update(times, tflops=rates(flops, times))
    for name, why in failed.items():
        row.setdefault(name, {})["error"] = why
    if "cold_l2_ms" in row.get("cublas", {}):
        for name, entry in row.items():
            if isinstance(entry, dict) and "cold_l2_ms" in entry and name not in ("cublas", "zero_c"):
                entry["vs_cublas"] = ratios(entry, row["cublas"])
    _print(row, splits)
    return row


def _print(row: dict, splits: list[int]) -> None:
    m, n, k = row["shape"]

    def fig(name: str) -> str:
        e = row.get(name, {})
        if "cold_l2_ms" not in e:
            return f"{name} FAILED ({e.get('error', 'not run')[:80]})"
        ratio = " ".join(f"{v:.2f}" for v in e["vs_cublas"].values()) + "x" if "vs_cublas" in e else ""
        return f"{name} {e['tflops']['cold_l2']:.0f} TF/s {ratio}"

    best = [f"S={s}: {fig(f'splitk_{s}')} | no zero {fig(f'splitk_{s}_nozero')} | "
            f"{fig(f'splitk_cluster2_{s}')}" for s in splits]
    print(f"{m}x{n}x{k} ({row['tiles_128x256']} tiles): {fig('cublas')}; {fig('gemm_sm90')}; zero_c "
          f"{row.get('zero_c', {}).get('cold_l2_ms', float('nan')) * 1e3:.1f} us", flush=True)
    for line in best:
        print("    " + line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON file (default bench/results/gemm-splitk-<date>-<gpu>.json)")
    parser.add_argument("--samples", type=int, default=25)
    parser.add_argument("--splits", type=int, nargs="+", default=SPLITS)
    parser.add_argument("--shapes", type=str, nargs="+", help="MxNxK shapes (default: the four of SHAPES)")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.shapes] if args.shapes else SHAPES
    gpu = torch.cuda.get_device_name()
    date = datetime.date.today().isoformat()
    out = args.out or ROOT / "bench" / "results" / f"gemm-splitk-{date}-{_slug(gpu)}.json"
    gemm, gemm_error = _compile("gemm_sm90.tma")
    splitk, splitk_error = _compile("gemm_splitk_sm90.tma")
    clustered, clustered_error = _compile("gemm_splitk_sm90.tma", clustered=True)
    rows = []
    for m, n, k in shapes:
        try:
            rows.append(shape_row(m, n, k, args.splits, args.samples, gemm, splitk, clustered))
        except Exception as exc:   # noqa: BLE001 - one shape's failure (e.g. out of memory) is a row
            traceback.print_exc()
            rows.append({"shape": [m, n, k], "error": _describe(exc)})
        report = {
            "benchmark": "split-K bf16 GEMM C += A·Bᵀ into f32 C (examples/gemm_splitk_sm90.tma, TMA reduce-add) vs "
                         "cuBLAS (torch.matmul, bf16 out) and the persistent examples/gemm_sm90.tma (bf16 out); "
                         "splitk_cluster2_S: the example with cluster 2 and B multicast",
            "gpu": gpu, "date": date, "torch": torch.__version__,
            "method": f"{METHOD}; {args.samples} rounds; splitk_S includes zeroing C (c.zero_()), splitk_S_nozero is "
                      "the kernel alone, zero_c the zeroing alone; vs_cublas = cuBLAS ms / variant ms, in each way",
            "compile_errors": {k: v for k, v in (("gemm_sm90", gemm_error), ("gemm_splitk", splitk_error),
                                                 ("gemm_splitk_cluster2", clustered_error)) if v},
            "results": rows,
        }
        out.write_text(json.dumps(report, indent=2) + "\n")   # after every shape: a crash keeps the rows so far
    print(f"wrote {out}")


def _slug(name: str) -> str:
    short = re.search(r"\b([A-Z]\d{3,4}|B\d{3})\b", name)
    return (short.group(1) if short else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")).lower()


if __name__ == "__main__":
    main()

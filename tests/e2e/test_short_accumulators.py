"""Short accumulators (language.md §15) beyond the library's GEMM tiles: a panelled A, an A
multicast across a cluster, tile math into an smem A, a row register in the epilogue, and an A
pushed through a peer pipeline. Each compiles through ptxas and matches float64 on the
interpreter and the GPU at shapes that are not tile multiples."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import tmalang

BF16 = ml_dtypes.bfloat16

HEAD = """kernel g(a: bf16[M, K], b: bf16[N, K], c: bf16[M, N]) {
    grid persistent
    CLUSTER
    box A = a[16, KB] swizzle 128B
    box B = b[BN, KB] swizzle 128B
    box T = c[16, BN]
    box C = c[16, 64] swizzle 128B
    smem cs[2]: C
    EXTRA
    pipeline ring[4] { a: A, b: B }

    role producer: warp 0, regs 40 {
        for tile (m, n) in tiles(c, T) {
            for k in steps(K, KB) {
                produce ring as s {
                    load A[m, k] -> s.a LOADHOW
                    load B[n, k] -> s.b
                }
            }
        }
    }
    role consumer: warps 4..7, regs 232 {
        accumulator acc: f32[16, BN]
        ROWDECL
        for tile (m, n) in tiles(c, T) {
            acc = 0
            ROWSET
            for k in steps(K, KB) {
                consume ring as s { BODY }
            }
            store T[m, n] <- bf16(EPILOGUE) through cs
        }
    }
}
"""
PLAIN = dict(CLUSTER="", KB="64", BN="64", EXTRA="", LOADHOW="", ROWDECL="", ROWSET="",
             BODY="mma acc, s.a, s.b", EPILOGUE="acc")
CASES = {   # name: (changes to PLAIN, the factor the kernel scales x·Wᵀ by)
    "panelled A": (dict(KB="128"), 1.0),                       # two 64-element panels per K slice
    "multicast A": (dict(CLUSTER="cluster 1x2", BN="128", LOADHOW="multicast(n)"), 1.0),
    "tile math into an smem A": (dict(EXTRA="smem xs: A", BODY="xs = s.a * 2.0\n mma acc, xs, s.b"), 2.0),
    "row register in the epilogue": (dict(ROWDECL="row sc: f32", ROWSET="sc = 0.5", EPILOGUE="acc * sc"), 0.5),
}
PEER = dict(CLUSTER="cluster 2", EXTRA="pipeline hop[2] { a: A } peer +1",
            BODY="produce hop as d { d.a = s.a }\n consume hop as h { mma acc, h.a, s.b }")


def source(name: str) -> str:
    text = HEAD
    for key, value in {**PLAIN, **(CASES[name][0] if name in CASES else PEER)}.items():
        text = text.replace(key, value)
    return text


def test_an_a_pushed_to_a_peer_compiles():
    """A peer pipeline's push moves the A box's bytes into a slot whose stage spans 64 rows."""
    assert tmalang.compile(source("peer")).cubin


def operands(m, n, k, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((n, k)).astype(BF16)


def relative_error(got, want) -> float:
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want))


@pytest.mark.parametrize("name", CASES)
def test_matches_float64_on_the_interpreter(name):
    kernel = tmalang.compile(source(name))
    assert kernel.cubin                                       # and ptxas takes it
    a, b = operands(5, 200, 392, 1)
    c = np.full((5, 200), np.nan, BF16)
    got = kernel.interpret(a, b, c)[-1]
    assert relative_error(got, CASES[name][1] * (a.astype(np.float64) @ b.astype(np.float64).T)) < 1e-2


def test_a_panel_lands_where_the_descriptor_reads_it():
    """The 16-row A tile's second panel sits 16 x 128 bytes after its first (where the wgmma's K
    slices 4..7 read), although the stage spans 64 rows: the stage stride is 16 KiB."""
    ptx = tmalang.compile(source("panelled A")).ptx
    loads = [m.group(1) for m in re.finditer(r"add\.s32\s+%r\d+, %r\d+, (\d+);\s*\n\s*// begin inline asm\s*\n"
                                              r"\s*cp\.async\.bulk\.tensor\.2d\.shared::cluster", ptx)]
    assert loads[:2] == ["4096", "6144"]       # ring.a after the two staging tiles: panel 0, then + 2048


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
def test_matches_float64_on_the_h100(name):
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile(source(name))
    a, b = operands(13, 1000, 2056, 2)
    ta, tb = (torch.from_numpy(t.astype(np.float32)).cuda().to(torch.bfloat16) for t in (a, b))
    tc = torch.full((13, 1000), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel(ta, tb, tc)
    torch.cuda.synchronize()
    expected = CASES[name][1] * (a.astype(np.float64) @ b.astype(np.float64).T)
    assert relative_error(tc.double().cpu().numpy(), expected) < 1e-2

"""Staged stores (§13h) and bare stores outside pipelines (§13): what the compiler derives, run on
the interpreter and the H100 against float64, at shapes that are not multiples of the tile."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.passes.stage_stores import reuse_distance
from conftest import ROOT

SOURCE = (ROOT / "tests" / "user_kernels" / "staged_epilogues.tma").read_text()
# (constants, blocks): block counts 1..4, staging tiles 1..4, bf16 and f32 out
SCALED = [
    ({}, 3),
    ({"BN": 128, "CB": 32, "S": 3, "OUT": "f32"}, 4),
    ({"BN": 64, "CB": 64, "S": 1}, 1),
    ({"BN": 256, "CB": 64, "S": 4}, 4),
    ({"BN": 192, "CB": 64, "S": 1}, 3),
]
SHAPES = [(200, 296, 136), (129, 72, 64), (64, 8, 8)]


def _operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64).T


def _close(got, reference, dtype) -> bool:
    rel = 1e-5 if dtype == "f32" else 8e-3   # f32 accumulation; one bf16 rounding
    return np.abs(got.astype(np.float64) - reference).max() <= rel * max(1.0, np.abs(reference).max())


@pytest.mark.parametrize("constants,blocks", SCALED, ids=lambda x: str(x))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_scaled_store_matches_float64(constants, blocks, shape):
    k = tmalang.compile(SOURCE, kernel="scaled", constants=constants)
    a, b, product = _operands(*shape)
    out_dtype = constants.get("OUT", "bf16")
    c = np.zeros(shape[:2], np.float32 if out_dtype == "f32" else ml_dtypes.bfloat16)
    got = k.interpret(-1.25, a, b, c, explore=2, ctas=3)[0]
    assert _close(got, -1.25 * product, out_dtype)
    assert k.ir.count("tma_store ") == blocks      # one TMA store per block, each from its staging tile
    assert "staged_store" not in k.ir


@pytest.mark.parametrize("bn", [32, 96, 256])
def test_reduce_adds_every_block_into_c(bn):
    k = tmalang.compile(SOURCE, kernel="accumulate", constants={"BN": bn})
    a, b, product = _operands(200, 300, 72, seed=3)
    c = np.random.default_rng(4).standard_normal((200, 300)).astype(np.float32)
    got = k.interpret(a, b, c.copy(), ctas=2)[0]
    assert _close(got, c + product, "f32")


def test_the_derived_protocol_is_clean_under_many_schedules():
    """explore=N runs N random schedules; the interpreter's race and hang checks hold in each."""
    k = tmalang.compile(SOURCE, kernel="scaled", constants={"BN": 256, "CB": 64, "S": 2})
    a, b, product = _operands(300, 520, 96, seed=5)
    got = k.interpret(1.0, a, b, np.zeros((300, 520), ml_dtypes.bfloat16), explore=6, ctas=2)[0]
    assert _close(got, product, "bf16")


@pytest.mark.parametrize("blocks,stages,expected", [
    (4, 2, [2, 2, 2, 2]), (3, 2, [1, 3, 2]), (1, 1, [1]), (1, 2, [1]), (4, 4, [4, 4, 4, 4]), (5, 2, [1, 3, 2, 2, 2]),
])
def test_reuse_distance_names_the_last_store_from_the_same_tile(blocks, stages, expected):
    assert [reuse_distance(j, blocks, stages) for j in range(blocks)] == expected
    for j, d in enumerate(expected):   # the block d back, cyclically over runs, used the same tile
        assert ((j - d) % blocks) % stages == j % stages


def _staged_ptx(source: str) -> str:
    lines = tmalang.compile(source).ptx.splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith((".loc", ".file", "//")))


HAND_WRITTEN = """
kernel k(a: bf16[M, K], b: bf16[N, K], c: bf16[M, N]) {
    grid persistent
    box A = a[128, 64] swizzle 128B
    box B = b[128, 64] swizzle 128B
    box T = c[128, 128]
    box C = c[128, 64] swizzle 128B
    STAGING
    pipeline ring[4] { a: A, b: B }
    role producer: warp 0, regs 40 {
        for tile (m, n) in tiles(c, T) {
            for k in steps(K, 64) {
                produce ring as s {
                    load A[m, k] -> s.a
                    load B[n, k] -> s.b
                }
            }
        }
    }
    role consumer: warps 4..11, regs 232 {
        accumulator acc: f32[128, 128]
        for tile (m, n) in tiles(c, T) {
            acc = 0
            for k in steps(K, 64) {
                consume ring as s { mma acc, s.a, s.b }
            }
            EPILOGUE
        }
        END
    }
}
"""
EXPLICIT = """elect { wait_group read 1 }
            sync
            cs0 = bf16(acc[0, 0])
            elect { store C[m, 2 * n] <- cs0  commit_group }
            elect { wait_group read 1 }
            sync
            cs1 = bf16(acc[0, 1])
            elect { store C[m, 2 * n + 1] <- cs1  commit_group }"""


def test_a_staged_store_compiles_to_the_hand_written_protocol():
    explicit = (HAND_WRITTEN.replace("STAGING", "smem cs0: C\n    smem cs1: C").replace("EPILOGUE", EXPLICIT)
                .replace("END", "elect { wait_group 0 }"))
    staged = (HAND_WRITTEN.replace("STAGING", "smem cs[2]: C").replace("EPILOGUE", "store T[m, n] <- bf16(acc) "
                                                                                   "through cs").replace("END", ""))
    assert _staged_ptx(staged) == _staged_ptx(explicit)


BARE = """
kernel sums(x: f32[M, K], out: f32[M, 64]) {
    grid persistent
    box X = x[64, 64]
    box O = out[64, 64]
    smem acc: O
    pipeline ring[2] { xs: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(out, O) {
            for k in steps(K, 64) {
                prefetch X[m, k + 2]
                produce ring as s { load X[m, k] -> s.xs }
            }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(out, O) {
            acc = 0.0
            for k in steps(K, 64) {
                consume ring as s { acc = acc + s.xs }
            }
            store O[m, n] <- acc
        }
    }
}
"""


@pytest.mark.parametrize("m,k", [(77, 1000), (300, 64), (1, 130)])
def test_a_bare_store_and_prefetch_outside_pipelines(m, k):
    """The compiler elects, commits and waits for a store (and elects a prefetch) written bare."""
    kernel = tmalang.compile(BARE)
    x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    padded = np.zeros((m, -(-k // 64) * 64))
    padded[:, :k] = x
    got = kernel.interpret(x, np.zeros((m, 64), np.float32), explore=3, ctas=2)[0]
    assert np.allclose(got, padded.reshape(m, -1, 64).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("constants,blocks", SCALED, ids=lambda x: str(x))
def test_h100_staged_store_matches_float64_and_the_interpreter(constants, blocks):
    torch = pytest.importorskip("torch")
    k = tmalang.compile(SOURCE, kernel="scaled", constants=constants)
    m, n, kk = 1000, 1032, 264
    a, b, product = _operands(m, n, kk, seed=11)
    out_dtype = constants.get("OUT", "bf16")
    host = np.zeros((m, n), np.float32 if out_dtype == "f32" else ml_dtypes.bfloat16)
    c = torch.zeros(m, n, dtype=torch.float32 if out_dtype == "f32" else torch.bfloat16, device="cuda")
    k(0.5, torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda(),
      torch.from_numpy(b.view(np.int16)).view(torch.bfloat16).cuda(), c)
    got = (c.float() if out_dtype != "f32" else c).cpu().numpy()
    assert _close(got, 0.5 * product, out_dtype)
    interpreted = k.interpret(0.5, a, b, host, ctas=4)[0]   # tensor-core rounding aside, the same values
    assert _close(got, interpreted.astype(np.float64), out_dtype)


@pytest.mark.gpu
def test_h100_reduce_through_staging_adds_into_c():
    torch = pytest.importorskip("torch")
    k = tmalang.compile(SOURCE, kernel="accumulate", constants={"BN": 96})
    a, b, product = _operands(333, 200, 136, seed=12)
    c0 = np.random.default_rng(13).standard_normal((333, 200)).astype(np.float32)
    c = torch.from_numpy(c0.copy()).cuda()
    k(torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda(),
      torch.from_numpy(b.view(np.int16)).view(torch.bfloat16).cuda(), c)
    assert _close(c.cpu().numpy(), c0 + product, "f32")


@pytest.mark.parametrize("shape", [(100, 132), (33, 36), (1, 4)])
def test_a_buffer_stored_inside_a_consume_block_is_not_rewritten_under_the_store(shape):
    """Its store is the compiler's too: the next slot's tile math into the buffer waits for it
    (the interpreter reported E405 before)."""
    kernel = tmalang.compile_file(ROOT / "tests" / "user_kernels" / "convert_in_consume.tma")
    x = (np.random.default_rng(shape[0]).standard_normal(shape) * 100).astype(np.float32)
    got = kernel.interpret(x, np.zeros(shape, np.int32), explore=8, ctas=2)[0]
    assert np.array_equal(got, np.trunc(x).astype(np.int32))


def test_a_cache_policy_on_the_block_box_qualifies_the_staged_stores():
    """The stores go through the staging tiles' box, so its policy applies (and one on the tile box,
    which no copy goes through, is E455)."""
    gemm = (ROOT / "examples" / "gemm_sm90.tma").read_text()
    hinted = tmalang.compile(gemm.replace("swizzle CSWIZZLE", "swizzle CSWIZZLE cache evict_first", 1)).ptx
    stores = [line for line in hinted.splitlines() if "cp.async.bulk.tensor" in line and "global.shared" in line]
    assert len(stores) == 4 and all("evict_first" in line and "cache_hint" in line for line in stores)
    with pytest.raises(tmalang.TmalangError) as refused:
        tmalang.compile(gemm.replace("box Tile = c[BM, BN]", "box Tile = c[BM, BN] cache evict_first", 1))
    assert refused.value.code == "E455"


RESIDUAL = ROOT / "tests" / "user_kernels" / "residual_epilogue.tma"


def _residual_case(m, n, k, seed):
    a, b, product = _operands(m, n, k, seed)
    r = np.random.default_rng(seed + 1).standard_normal((m, n)).astype(np.float32)
    return a, b, r, 0.5 * product + r


@pytest.mark.parametrize("shape", [(201, 132, 72), (1, 4, 8), (130, 68, 200)], ids=lambda s: "x".join(map(str, s)))
def test_a_residual_epilogue_from_the_docs_matches_float64(shape):
    a, b, r, reference = _residual_case(*shape, seed=shape[0])
    got = tmalang.compile_file(RESIDUAL).interpret(a, b, r, np.zeros(shape[:2], np.float32), explore=4, ctas=3)[0]
    assert _close(got, reference, "f32")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1001, 1036, 264), (129, 68, 72)], ids=lambda s: "x".join(map(str, s)))
def test_h100_residual_epilogue_matches_float64_and_the_interpreter(shape):
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile_file(RESIDUAL)
    a, b, r, reference = _residual_case(*shape, seed=3)
    c = torch.full(shape[:2], float("nan"), device="cuda")
    kernel(*(torch.from_numpy(x.view(np.int16)).view(torch.bfloat16).cuda() for x in (a, b)),
           torch.from_numpy(r).cuda(), c)
    got = c.cpu().numpy()
    assert _close(got, reference, "f32")
    interpreted = kernel.interpret(a, b, r, np.zeros(shape[:2], np.float32), ctas=4)[0]
    assert _close(got, interpreted.astype(np.float64), "f32")

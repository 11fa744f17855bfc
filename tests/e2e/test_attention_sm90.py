"""examples/attention_sm90.tma: FlashAttention's forward pass on wgmma fragments (sm_90a).

Against a float64 softmax(scale · Q·Kᵀ)·V and its log-sum-exp, at sequence lengths that are not
multiples of the 128-row tiles (1, 77, 1000, 4099 on the GPU), causal and not, on the
interpreter (small shapes, random schedules) and on the H100, and the H100 against the
interpreter. P is rounded to bf16 before P·V, as on the tensor cores, so O agrees with float64
to bf16's precision, not f32's.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.diagnostics import TmalangError
from tmalang.backend import ptxas
from tmalang.ir import exprs as ex
from tmalang.ir import ops
from tmalang.passes import defer_mma_release
from conftest import ROOT

EXAMPLE = ROOT / "examples" / "attention_sm90.tma"
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module", params=[("flash_attention", 64), ("flash_attention_hd128", 128)],
                ids=["hd64", "hd128"])
def attention(request):
    """(kernel, head dim): the example's two kernels."""
    name, d = request.param
    return tmalang.compile_file(EXAMPLE, kernel=name), d


def inputs(bh: int, s: int, t: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((bh, n, d)).astype(BF16) for n in (s, t, t))


def lse_array(bh: int, s: int) -> np.ndarray:
    """[BH, S] with rows padded to 16 bytes, as TMA needs: a view."""
    return np.full((bh, -(-s // 4) * 4), np.nan, np.float32)[:, :s]


def reference(q, k, v, causal: bool):
    d = q.shape[-1]
    s = np.einsum("bsd,btd->bst", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(d)
    if causal:
        s = np.where(np.arange(k.shape[1])[None, None, :] > np.arange(q.shape[1])[None, :, None], -np.inf, s)
    top = s.max(-1, keepdims=True)
    p = np.exp(s - top)
    total = p.sum(-1, keepdims=True)
    return np.einsum("bst,btd->bsd", p / total, v.astype(np.float64)), (top + np.log(total))[..., 0]


def check(o, lse, q, k, v, causal: bool) -> None:
    expected, expected_lse = reference(q, k, v, causal)
    o = np.asarray(o, np.float64)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    assert np.linalg.norm(o - expected) / np.linalg.norm(expected) < 1e-2
    assert np.abs(o - expected).max() < 3e-2
    np.testing.assert_allclose(lse, expected_lse, rtol=0, atol=1e-4)


def test_ptx_has_quad_shuffles_and_ptxas_accepts_without_spills(attention):
    kernel, d = attention
    ptx = kernel.ptx
    assert "shfl.sync.bfly.b32" in ptx and "ex2.approx.ftz.f32" in ptx and "lg2.approx.ftz.f32" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in ptx           # S = Q·Kᵀ
    assert "cvt.rn.bf16x2.f32" in ptx            # P converted by row math into its bf16 fragment
    assert f"wgmma.mma_async.sync.aligned.m64n{d}k16.f32.bf16.bf16" in ptx          # O += P·V
    _, stats = ptxas.assemble(ptx, "sm_90a")
    assert stats.spill_stores == 0 and stats.spill_loads == 0, stats
    assert "C7514" not in stats.log, stats.log


@pytest.mark.parametrize("bh,s,t,causal", [(2, 77, 150, 0), (1, 130, 130, 1), (3, 1, 5, 0), (1, 200, 77, 1)],
                         ids=lambda v: str(v))
def test_interpreter_matches_float64(attention, bh, s, t, causal):
    kernel, d = attention
    q, k, v = inputs(bh, s, t, d, s + t)
    o, lse = np.full((bh, s, d), np.nan, BF16), lse_array(bh, s)
    kernel.interpret(q, k, v, np.float32(1 / np.sqrt(d)), np.int32(causal), lse, o, seed=s, explore=1)
    check(o, lse, q, k, v, bool(causal))


def on_gpu(kernel, q, k, v, causal: int):
    torch = pytest.importorskip("torch")
    bh, s, d = q.shape

    def cuda(x):
        return torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
    o = torch.full((bh, s, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    lse = torch.full((bh, -(-s // 4) * 4), float("nan"), device="cuda")[:, :s]
    kernel(cuda(q), cuda(k), cuda(v), np.float32(1 / np.sqrt(d)), np.int32(causal), lse, o)
    torch.cuda.synchronize()
    return o.float().cpu().numpy(), lse.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("bh,s,t", [(2, 1, 1), (3, 77, 77), (2, 1000, 1000), (1, 4099, 4099), (2, 300, 1000)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("causal", [0, 1])
def test_h100_matches_float64(attention, bh, s, t, causal):
    kernel, d = attention
    q, k, v = inputs(bh, s, t, d, 7 * s + t)
    o, lse = on_gpu(kernel, q, k, v, causal)
    check(o, lse, q, k, v, bool(causal))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [0, 1])
def test_h100_matches_interpreter(attention, causal):
    kernel, d = attention
    q, k, v = inputs(2, 150, 200, d, 11)
    o, lse = on_gpu(kernel, q, k, v, causal)
    expected, expected_lse = np.full((2, 150, d), np.nan, BF16), lse_array(2, 150)
    kernel.interpret(q, k, v, np.float32(1 / np.sqrt(d)), np.int32(causal), expected_lse, expected, seed=3, explore=1)
    np.testing.assert_allclose(o, expected.astype(np.float32), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(lse, expected_lse, rtol=0, atol=1e-4)


# ---- grouped-query attention: BH / BHKV query heads share a K/V head ---------------------------

def grouped(k: np.ndarray, bh: int) -> np.ndarray:
    """K or V [BHKV, T, D] repeated to [BH, T, D]: query head b reads K/V head b / (BH / BHKV)."""
    return np.repeat(k, bh // k.shape[0], axis=0)


@pytest.mark.parametrize("bh,bhkv,s,t,causal", [(4, 2, 77, 150, 0), (6, 3, 130, 130, 1), (3, 1, 70, 5, 0)],
                         ids=["gqa2", "gqa2_causal", "mqa"])
def test_interpreter_gqa_matches_float64(attention, bh, bhkv, s, t, causal):
    kernel, d = attention
    q, _, _ = inputs(bh, s, t, d, s + t)
    _, k, v = inputs(bhkv, s, t, d, s + t + 1)
    o, lse = np.full((bh, s, d), np.nan, BF16), lse_array(bh, s)
    kernel.interpret(q, k, v, np.float32(1 / np.sqrt(d)), np.int32(causal), lse, o, seed=s)
    check(o, lse, q, grouped(k, bh), grouped(v, bh), bool(causal))


def test_kv_heads_that_do_not_divide_the_query_heads_are_refused_at_launch(attention):
    kernel, d = attention
    q, k, v = inputs(3, 16, 16, d, 1)
    with pytest.raises(TmalangError, match="E219"):
        kernel.interpret(q, k[:2], v[:2], np.float32(1.0), np.int32(0), lse_array(3, 16),
                         np.zeros((3, 16, d), BF16))


@pytest.mark.gpu
@pytest.mark.parametrize("bh,bhkv,s,t", [(8, 2, 1000, 1000), (4, 1, 300, 1024), (6, 3, 4099, 4099)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("causal", [0, 1])
def test_h100_gqa_matches_float64_and_torch(attention, bh, bhkv, s, t, causal):
    torch = pytest.importorskip("torch")
    kernel, d = attention
    q, _, _ = inputs(bh, s, t, d, s + t)
    _, k, v = inputs(bhkv, s, t, d, s + t + 1)
    o, lse = on_gpu(kernel, q, k, v, causal)
    check(o, lse, q, grouped(k, bh), grouped(v, bh), bool(causal))

    def batched(x):   # [1, heads, seq, D] in float32 for torch's reference
        return torch.from_numpy(x.astype(np.float32))[None].cuda()
    ref = torch.nn.functional.scaled_dot_product_attention(batched(q), batched(k), batched(v), is_causal=bool(causal),
                                                           enable_gqa=True)[0].cpu().numpy()
    np.testing.assert_allclose(o, ref, rtol=0, atol=3e-2)


# ---- the protocol the overlap rests on: the interpreter checks it -------------------------------

def _softmax_role(kernel):
    return next(r for r in ops.roles(kernel._c.ir) if r.symbol == "softmax")


def _overlap_wait(kernel) -> ops.WgmmaWait:
    return next(o for o in ops.walk(_softmax_role(kernel).body) if isinstance(o, ops.WgmmaWait) and o.pending == 1)


def test_the_next_scores_and_this_pv_are_in_flight_together(attention):
    """wait_wgmma_late: the softmax of S(j+1) waits for S only (pending=1), P·V still runs; the
    wait pins only the scores it retired."""
    wait = _overlap_wait(attention[0])
    assert wait.pins == ["s"]


@pytest.mark.parametrize("pending", [2, None], ids=["too_lax", "missing"])
def test_interpreter_reports_scores_read_under_their_wgmma(pending):
    """A wait that retires too little (or none) lets row math read S while its wgmma runs: E413."""
    kernel = tmalang.compile(EXAMPLE.read_text())
    body = next(o for o in ops.walk(_softmax_role(kernel).body) if isinstance(o, ops.ForRange) and o.var == "j").body
    values = next(o for o in body if isinstance(o, ops.WgmmaWait) and o.pending == 1)
    if pending is None:
        body.remove(values)
    else:
        values.pending = pending
    q, k, v = inputs(1, 130, 300, 64, 5)
    with pytest.raises(tmalang.TmalangError, match="E413"):
        kernel.interpret(q, k, v, np.float32(1 / 8), np.int32(0), lse_array(1, 130),
                         np.full((1, 130, 64), np.nan, BF16), seed=1, explore=1)


def test_settle_accumulators_retires_the_older_group_at_pending_1():
    def group(acc, a=None):
        return [ops.WgmmaFence(), ops.Wgmma(acc, a or ex.BufferRef("x", ex.Const(0)), ex.BufferRef("y", ex.Const(0))),
                ops.WgmmaCommit()]
    touch = [ops.RowAssign(ex.AccRef("sn"), ex.Call("exp2", (ex.AccRef("sn"),)))]
    out = defer_mma_release.settle_accumulators([*group("sn"), *group("acc"), ops.WgmmaWait(1), *touch])
    assert sum(isinstance(o, ops.WgmmaWait) for o in out) == 1          # sn's group is retired: no extra wait
    late = [ops.RowAssign(ex.AccRef("acc"), ex.AccRef("acc"))]
    out = defer_mma_release.settle_accumulators([*group("sn"), *group("acc"), ops.WgmmaWait(1), *late])
    assert isinstance(out[-2], ops.WgmmaWait) and out[-2].pending == 0  # acc's group may still run


def test_hd128_interpreter_agrees_across_random_schedules():
    """Both warpgroups, the rings and the in-flight wgmma groups interleave differently in each
    of 24 schedules; every one must be free of races and protocol errors and give O."""
    kernel = tmalang.compile_file(EXAMPLE, kernel="flash_attention_hd128")
    q, k, v = inputs(1, 130, 250, 128, 9)
    o, lse = np.full((1, 130, 128), np.nan, BF16), lse_array(1, 130)
    kernel.interpret(q, k, v, np.float32(1 / np.sqrt(128)), np.int32(1), lse, o, seed=40, explore=24, ctas=2)
    check(o, lse, q, k, v, True)


def test_causal_walk_claims_bands_of_heads_last_tile_first_on_the_interpreter():
    """The walk is `grouped HG reversed dynamic`: with bands of 2 heads over 5 heads (the last band
    short) and 3 query tiles, three CTAs claim the 15 tiles in turn, costliest first; every tile
    is computed once, whichever CTA claims it, in every schedule."""
    kernel = tmalang.compile_file(EXAMPLE, kernel="flash_attention", constants={"HG": 2})
    assert "grouped HG reversed dynamic" in EXAMPLE.read_text()
    q, k, v = inputs(5, 300, 300, 64, 11)
    o, lse = np.full((5, 300, 64), np.nan, BF16), lse_array(5, 300)
    kernel.interpret(q, k, v, np.float32(1 / 8), np.int32(1), lse, o, seed=5, explore=3, ctas=3)
    check(o, lse, q, k, v, True)


# ---- an epilogue that fills a pipeline slot (attention's `results`) --------------------------------

HANDOFF = """
kernel handoff(a: bf16[M, K], b: bf16[N, K], c: bf16[M, N]) {
    grid persistent
    box A = a[128, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box C = c[128, 64] swizzle 128B
    pipeline ring[2] { a: A, b: B }
    pipeline results[1] { c: C }
    role load: warp 0, regs 40 {
        for tile (m, n) in tiles(c, C) {
            for k in steps(K, 64) {
                produce ring as s { load A[m, k] -> s.a  load B[n, k] -> s.b }
            }
        }
    }
    role store: warp 1, regs 40 {
        for tile (m, n) in tiles(c, C) {
            consume results as r { store C[m, n] <- r.c }
        }
    }
    role mma: warps 4..11, regs 232 {
        accumulator acc: f32[128, 64]
        for tile (m, n) in tiles(c, C) {
            acc = 0
            for k in steps(K, 64) {
                consume ring as s { mma acc, s.a, s.b }
            }
            produce results as r { r.c = bf16(acc * 0.5) }
        }
    }
}
"""


def test_an_epilogue_fills_a_produce_slot_and_is_fenced_before_its_arrival():
    """The epilogue counts as writing the slot's field (no E070), and its generic-proxy writes are
    fenced for the TMA store that reads them (the interpreter's E406 otherwise)."""
    kernel = tmalang.compile(HANDOFF)
    mma = next(r for r in ops.roles(kernel._c.ir) if r.symbol == "mma")
    body = [o for o in ops.walk(mma.body)]
    store = next(i for i, o in enumerate(body) if isinstance(o, ops.AccStore))
    arrive = next(i for i, o in enumerate(body) if isinstance(o, ops.MbarArrive) and o.barrier.name == "results.full")
    assert any(isinstance(o, ops.Fence) and o.kind == "proxy_async" for o in body[store:arrive])
    rng = np.random.default_rng(4)
    a = rng.standard_normal((200, 136)).astype(BF16)[:, :130]
    b = rng.standard_normal((70, 136)).astype(BF16)[:, :130]
    c = np.full((200, 72), np.nan, BF16)[:, :70]
    kernel.interpret(a, b, c, seed=2, explore=4)
    expected = 0.5 * (a.astype(np.float64) @ b.astype(np.float64).T)
    np.testing.assert_allclose(c.astype(np.float64), expected, rtol=2e-2, atol=2e-2)

"""wgmma programs the compiler accepts run clean on the interpreter and on the H100 (issue 11,
items 3 and 4, and proxy fences before wgmma reads of thread-written tiles).

  - a one-stage ring consumed by wgmma (gemm_sm90 with `ring[1]`): the deferred release would
    hold the only slot while waiting for it to be refilled;
  - an epilogue inside the K loop, and an accumulator reset inside a loop: the deferred release
    would leave a wgmma in flight when the accumulator is read or zeroed (E413);
  - nested consume blocks read by one mma: each slot is released per warpgroup, never by one
    thread that the other warpgroup's MMAs are unordered with (E405);
  - a wgmma reading an A tile that an epilogue wrote: fence.proxy.async and a sync in between,
    and the next write to that tile waits for every warpgroup's MMA to finish reading it.

Each kernel runs on the interpreter across random schedules against a NumPy float64 reference,
at shapes that are not box multiples, assembles with ptxas, and (`-m gpu`) runs on the H100.
"""

from __future__ import annotations

import re
import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.ir import exprs as ex
from tmalang.ir import ops
from tmalang.passes import defer_mma_release

BF16 = ml_dtypes.bfloat16
KERNELS = ROOT / "tests" / "soundness"


def _gemm_ring1() -> str:
    text = (ROOT / "examples" / "gemm_sm90.tma").read_text()
    assert "STAGES = 4," in text and "pipeline ring[STAGES]" in text
    return text.replace("STAGES = 4,", "STAGES = 1,")


def _two_rings(ra: int, rb: int) -> str:
    text = (KERNELS / "two_rings.tma").read_text()
    return text.replace("pipeline ra[2]", f"pipeline ra[{ra}]").replace("pipeline rb[3]", f"pipeline rb[{rb}]")


def _gemm(a, b):
    return a @ b.T


def _chain(a, b, w):
    """bf16(A·Bᵀ)·Wᵀ: the staged product is rounded to bf16 like the kernel's."""
    p = (a @ b.T).astype(np.float32).astype(BF16).astype(np.float64)
    return p @ w.T


# name -> (source, operand shapes as functions of (m, n, k), reference)
CASES = {
    "gemm_ring1": (_gemm_ring1, lambda m, n, k: [(m, k), (n, k)], _gemm),
    "epilogue_in_k_loop": (lambda: (KERNELS / "epilogue_in_k_loop.tma").read_text(),
                           lambda m, n, k: [(m, k), (n, k)], _gemm),
    "reset_in_loop": (lambda: (KERNELS / "reset_in_loop.tma").read_text(),
                      lambda m, n, k: [(m, min(k, 64)), (n, min(k, 64))], _gemm),
    "two_rings_2_3": (lambda: _two_rings(2, 3), lambda m, n, k: [(m, k), (n, k)], _gemm),
    "two_rings_1_1": (lambda: _two_rings(1, 1), lambda m, n, k: [(m, k), (n, k)], _gemm),
    "smem_operand": (lambda: (KERNELS / "smem_operand.tma").read_text(),
                     lambda m, n, k: [(m, k), (k + 30, k), (n, k + 30)], _chain),
}
NAMES = list(CASES)


def _compile(name: str):
    return tmalang.compile(CASES[name][0](), name=f"{name}.tma")


def _bf16(rng, rows, cols):
    """A bf16 matrix whose rows are 16-byte aligned (a view into padded rows when needed)."""
    return rng.standard_normal((rows, -(-cols // 8) * 8)).astype(BF16)[:, :cols]


def _relative_error(out, reference) -> float:
    out = np.asarray(out, dtype=np.float64)
    return float(np.linalg.norm(out - reference) / np.linalg.norm(reference))


@pytest.mark.parametrize("name", NAMES)
def test_interpreter_runs_clean_and_matches_float64(name):
    _, shapes, reference = CASES[name]
    kernel = _compile(name)
    m, n, k = 130, 300, 200
    rng = np.random.default_rng(11)
    inputs = [_bf16(rng, *s) for s in shapes(m, n, k)]
    out = np.full((m, -(-n // 8) * 8), np.nan, dtype=BF16)[:, :n]
    kernel.interpret(*inputs, out, seed=5, explore=3)
    assert _relative_error(out, reference(*[x.astype(np.float64) for x in inputs])) < 1e-2


@pytest.mark.parametrize("name", NAMES)
def test_ptxas_accepts(name):
    kernel = _compile(name)
    cubin, stats = ptxas.assemble(kernel.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF"
    assert "C7514" not in stats.log, stats.log
    assert _barriers_emitted_once(kernel)


def _barriers_emitted_once(kernel) -> bool:
    """One bar.sync per role sync of the IR: LLVM copying one into both arms of an elect hangs."""
    syncs = [o for o in ops.walk(kernel._c.ir.body) if isinstance(o, ops.Sync) and o.scope != "cluster"]
    return len(re.findall(r"\bbar\.(?:warp\.)?sync\b", kernel.ptx)) == len(syncs)


def _waits(kernel) -> list[int]:
    return [o.pending for o in ops.walk(kernel._c.ir.body) if isinstance(o, ops.WgmmaWait)]


def test_the_release_is_deferred_where_it_is_safe():
    """gemm_sm90's 4-stage ring keeps one wgmma group in flight (the optimisation stays)."""
    assert 1 in _waits(tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma"))


@pytest.mark.parametrize("name", ["gemm_ring1", "epilogue_in_k_loop", "reset_in_loop"])
def test_the_release_is_not_deferred_where_it_would_hang_or_race(name):
    assert 1 not in _waits(_compile(name))


def test_nested_slots_are_released_per_warpgroup():
    kernel = _compile("two_rings_2_3")
    releases = [o for o in ops.walk(kernel._c.ir.body) if isinstance(o, ops.Elect)
                and any(isinstance(s, ops.MbarArrive) and s.barrier.name.endswith(".empty") for s in o.body)
                and any(o is x for r in ops.roles(kernel._c.ir) if r.symbol == "consumer" for x in ops.walk(r.body))]
    assert {o.body[0].barrier.name for o in releases} == {"ra.empty", "rb.empty"}
    assert all(o.scope == "warpgroup" for o in releases)


def test_a_thread_written_wgmma_operand_is_fenced_and_its_rewrite_waits_for_every_warpgroup():
    consumer = next(r for r in ops.roles(_compile("smem_operand")._c.ir) if r.symbol == "consumer")
    h_loop = next(o for o in ops.walk(consumer.body) if isinstance(o, ops.ForRange) and o.var == "h")
    names = [o.name for o in h_loop.body]
    write = next(i for i, o in enumerate(h_loop.body) if isinstance(o, ops.AccStore))
    read = next(i for i, o in enumerate(h_loop.body) if isinstance(o, ops.Wgmma) and o.a == ex.BufferRef("ps", ex.Const(0)))
    assert names[write - 1] == "sync"                      # the other warpgroup's wgmma read ps last time
    between = h_loop.body[write + 1:read]
    fence = next(i for i, o in enumerate(between) if isinstance(o, ops.Fence) and o.kind == "proxy_async")
    assert any(isinstance(o, ops.Sync) for o in between[fence + 1:])


def _wgmma(acc: str, a=None) -> list[ops.Op]:
    return [ops.WgmmaFence(), ops.Wgmma(acc, a or ex.BufferRef("x", ex.Const(0)), ex.BufferRef("y", ex.Const(0))),
            ops.WgmmaCommit(), ops.WgmmaWait(1)]


def test_settle_accumulators_waits_before_every_touch_of_an_in_flight_accumulator():
    """Whatever left a group in flight, reading (epilogue), resetting (acc_zero) or using the
    accumulator as a register A operand first waits for every group; chaining into it does not."""
    store = ops.AccStore(ex.BufferRef("cs", ex.Const(0)), ex.Cast("bf16", ex.AccRef("acc")))
    out = defer_mma_release.settle_accumulators([*_wgmma("acc"), *_wgmma("acc"), store])
    assert [o.name for o in out][-2:] == ["wgmma_wait", "acc_store"] and out[-2].pending == 0
    assert sum(isinstance(o, ops.WgmmaWait) and o.pending == 0 for o in out) == 1

    loop = ops.ForRange("k", ex.Const(4), [ops.AccZero("acc"), *_wgmma("acc")])
    defer_mma_release.settle_accumulators([loop])
    assert isinstance(loop.body[0], ops.WgmmaWait) and loop.body[0].pending == 0   # the previous iteration's

    chained = defer_mma_release.settle_accumulators([*_wgmma("p"), *_wgmma("acc", ex.Cast("bf16", ex.AccRef("p")))])
    assert sum(isinstance(o, ops.WgmmaWait) and o.pending == 0 for o in chained) == 1
    assert not any(isinstance(o, ops.WgmmaWait) and o.pending == 0 for o in defer_mma_release.settle_accumulators(_wgmma("acc")))


# ---- on the H100 ----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(130, 300, 200), (1000, 1000, 1000), (257, 513, 2000)])
@pytest.mark.parametrize("name", NAMES)
def test_h100_matches_float64(name, m, n, k):
    torch = pytest.importorskip("torch")
    _, shapes, reference = CASES[name]
    kernel = _compile(name)
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)

    def matrix(rows, cols):
        base = torch.randn(rows, -(-cols // 8) * 8, device="cuda", generator=gen).to(torch.bfloat16)
        return base[:, :cols]

    inputs = [matrix(*s) for s in shapes(m, n, k)]
    out = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    kernel(*inputs, out)
    torch.cuda.synchronize()
    expected = reference(*[x.double().cpu().numpy() for x in inputs])
    assert _relative_error(out.double().cpu().numpy(), expected) < 1e-2

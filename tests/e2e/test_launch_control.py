"""Dynamic tile loops on a grid of tiles (sm_100a, cluster launch control):
examples/gemm_dynamic_sm100.tma on the interpreter against float64 under random schedules at odd
shapes, every tile run exactly once while CTAs take different tile counts, a missing wait on the
cancel's barrier caught, the final IR's round-trip and verify hooks, the PTX assembled for
sm_100a, no counter in the manifest, and --explain. No Blackwell GPU here: assembled and
interpreted is the bar."""

from __future__ import annotations

import copy
from collections import Counter

import ml_dtypes
import pytest

import tmalang
from conftest import ROOT
from references import bf16_gemm_operands as operands
from references import gemm_relative_error as relative_error
from tmalang.backend import ptxas
from tmalang.contract.manifest import CounterParam
from tmalang.interp import interpret, machine
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES

BF16 = ml_dtypes.bfloat16
EXAMPLE = ROOT / "examples" / "gemm_dynamic_sm100.tma"


@pytest.fixture(scope="module")
def gemm():
    return tmalang.compile_file(EXAMPLE, arch="sm_100a")


@pytest.mark.parametrize("m,n,k,ctas", [(257, 300, 100, 2), (390, 513, 72, 3), (130, 260, 64, 1)])
def test_interpreter_matches_float64_under_random_schedules(gemm, m, n, k, ctas):
    a, b, c = operands(m, n, k, m + n + k)
    gemm.interpret(a, b, c, seed=m, explore=3, ctas=ctas)
    assert relative_error(c, a, b) < 1e-2


def test_every_tile_runs_once_while_ctas_take_different_counts(gemm, monkeypatch):
    """The claimer's tile reads, per CTA: every tile once over the launch, each running CTA ends on
    one claim past the end, a canceled CTA never runs, and schedules differ in who ran what."""
    taken = []
    original = machine.SEMANTICS[ops.TileTake]

    def recording(m, w, o):
        original(m, w, o)
        if w.role.symbol == "load":
            taken.append((m.cta, w.env[o.var]))
    monkeypatch.setitem(machine.SEMANTICS, ops.TileTake, recording)
    a, b, c = operands(520, 780, 64, 5)   # 5 x 4 = 20 tiles of 128 x 256
    counts = set()
    for seed in range(12):   # the epilogue's staged store holds its tmem slot a while: few schedules differ
        taken.clear()
        gemm.interpret(a, b, c, seed=seed, ctas=4)
        tiles = [t for _, t in taken if t < 20]
        assert sorted(tiles) == list(range(20))
        ran = sorted(cta for cta, t in taken if t == 20)          # each ends on a failed cancel
        assert ran == sorted(set(cta for cta, _ in taken))
        assert all((cta, cta) in taken for cta in ran)             # its own tile first
        per_cta = Counter(cta for cta, t in taken if t < 20)
        counts.add(tuple(sorted(per_cta.values())))
        assert relative_error(c, a, b) < 1e-2
    assert len(counts) > 1


def test_deterministic_schedule_runs_too(gemm):
    a, b, c = operands(257, 300, 100, 9)
    gemm.interpret(a, b, c, ctas=2)
    assert relative_error(c, a, b) < 1e-2


def test_a_query_before_the_cancel_lands_is_caught(gemm):
    """Without the wait on claims.cancel the response is read before (or while) the cancel writes it."""
    kernel = copy.deepcopy(gemm._c.ir)
    branch = next(o for o in ops.walk(kernel.body) if isinstance(o, ops.If)
                  and any(isinstance(x, ops.ClcTryCancel) for x in o.body))
    branch.body = [x for x in branch.body if not isinstance(x, ops.MbarWait)]
    a, b, c = operands(520, 520, 64, 2)
    with pytest.raises(tmalang.TmalangError, match="E405.*claims.response"):
        interpret(kernel, gemm.manifest, a, b, c, seed=0, explore=4, ctas=2)


def test_final_ir_round_trips_and_verifies(gemm):
    text = print_ir(gemm._c.ir)
    for word in ("clc_try_cancel", "clc_query", "tile_publish", "tile_queue @claims.response stages=1",
                 "words=4", "mbarrier @claims.cancel stages=1 count=1"):
        assert word in text
    assert "tile_claim" not in text
    assert print_ir(parse_ir(text)) == text
    [kernel] = parse_ir(text)
    verify(kernel, PASS_NAMES[-1], ["lower", *PASS_NAMES])


@pytest.mark.parametrize("old,new,message", [
    ("tile_queue @claims.response stages=1 offset={o} words=4", "tile_queue @claims.response stages=1 offset={o}",
     "not a 16-byte"),
    ("kernel @gemm grid=tiles", "kernel @gemm grid=persistent", "a cancel on a persistent grid"),
    ("clc_query slot=@claims.queue", "clc_query slot=@claims.cancel", "is not a queue tile"),
])
def test_verify_hooks_check_the_cancel_ops(gemm, old, new, message):
    text = print_ir(gemm._c.ir)
    offset = ops.decls(gemm._c.ir, ops.TileQueueDecl)["claims.response"].offset
    old, new = old.format(o=offset), new.format(o=offset)
    assert old in text
    [kernel] = parse_ir(text.replace(old, new, 1))
    with pytest.raises(tmalang.TmalangError, match=f"E999.*{message}"):
        verify(kernel, PASS_NAMES[-1], ["lower", *PASS_NAMES])


def test_ptx_cancels_and_assembles_for_sm100(gemm):
    ptx = gemm.ptx
    assert ptx.count("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128") == 1
    assert "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128" in ptx
    assert "clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128" in ptx
    assert "mbarrier.arrive.expect_tx.shared::cta.b64" in ptx
    assert "atom." not in ptx   # no counter
    ptxas.assemble(ptx, "sm_100a")


def test_manifest_asks_for_no_counter(gemm):
    assert gemm.manifest.grid.kind == "tiles"
    assert not any(isinstance(p, CounterParam) for p in gemm.manifest.ptx_params)


def test_explain_shows_the_cancels(gemm):
    text = gemm.explain()
    assert "cluster launch control" in text and "claims.response" in text and "no counter" in text


@pytest.mark.gpu
def test_b200_matches_float64():
    """On a Blackwell GPU (none here): odd shapes against float64, twice in a row."""
    torch = pytest.importorskip("torch")
    if torch.cuda.get_device_capability() < (10, 0):
        pytest.skip("needs sm_100a")
    kernel = tmalang.compile_file(EXAMPLE, arch="sm_100a")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k in [(1000, 1000, 1000), (130, 300, 100), (257, 5000, 2000)]:
        a = torch.randn(m, k + 8, device="cuda", generator=gen).to(torch.bfloat16)[:, :k]
        b = torch.randn(n, k + 8, device="cuda", generator=gen).to(torch.bfloat16)[:, :k]
        c = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
        reference = a.double() @ b.double().T
        for _ in range(2):
            c.fill_(float("nan"))
            kernel(a, b, c)
            torch.cuda.synchronize()
            assert (torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference)).item() < 1e-2

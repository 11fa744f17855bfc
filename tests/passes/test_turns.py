"""`turn` blocks (§15e): warpgroups of a role taking turns on the tensor cores (ping-pong).

The interpreter runs the named barriers order_turns derives with their hardware meaning, so the
alternation is checked, not assumed: across random schedules the warpgroups issue the wgmmas of
their turns in the order 0, 1, 0, 1, ..; a barrier whose count no set of warps reaches hangs
(E401), and two counts in one phase are a protocol error (E533). The ping-pong GEMM example
matches float64 on the interpreter and (gpu) on the H100.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from test_gemm import BF16, bf16_matrix, check_on_h100, relative_error
from tmalang.cli.main import main
from tmalang.interp import interpret, machine
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir


@pytest.fixture(scope="module")
def pingpong():
    return tmalang.compile_file(ROOT / "examples" / "gemm_pingpong_sm90.tma")


@pytest.fixture(scope="module")
def gemm():
    return tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma")


def _inputs(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a, b = bf16_matrix(rng, m, k), bf16_matrix(rng, n, k)
    c = np.full((m, -(-n // 8) * 8), np.nan, dtype=BF16)[:, :n]
    return a, b, c


@pytest.mark.parametrize("m,n,k", [(130, 300, 100), (64, 256, 64), (257, 129, 200)])
def test_interpreter_matches_float64(pingpong, m, n, k):
    a, b, c = _inputs(m, n, k, m + n + k)
    pingpong.interpret(a, b, c, seed=m, explore=2)
    assert relative_error(c, a, b) < 1e-2


def _issue_order(kernel, monkeypatch, seed: int) -> list[int]:
    """The warpgroup (within its role) of every warp's wgmma issue in CTA 0, in the order of one
    run (the example's clusters of two run two CTAs side by side, each with its own turns)."""
    order = []
    issue = machine.SEMANTICS[ops.Wgmma]

    def recorded(m, w, o):
        if m.cta == 0:
            order.append((w.index - w.role.first_warp) // 4)
        return issue(m, w, o)

    monkeypatch.setitem(machine.SEMANTICS, ops.Wgmma, recorded)
    a, b, c = _inputs(128, 256, 320, seed)     # one tile, five k-steps per warpgroup
    kernel.interpret(a, b, c, seed=seed)
    monkeypatch.setitem(machine.SEMANTICS, ops.Wgmma, issue)
    assert relative_error(c, a, b) < 1e-2
    return order


def _runs(order: list[int]) -> list[tuple[int, int]]:
    """(warpgroup, length) of each run of consecutive issues by one warpgroup."""
    runs: list[list[int]] = []
    for g in order:
        if runs and runs[-1][0] == g:
            runs[-1][1] += 1
        else:
            runs.append([g, 1])
    return [tuple(r) for r in runs]


@pytest.mark.parametrize("seed", range(6))
def test_warpgroups_alternate_across_random_schedules(pingpong, monkeypatch, seed):
    """Each turn is one wgmma by each of the warpgroup's 4 warps: runs of 4, warpgroups 0, 1, 0, 1."""
    runs = _runs(_issue_order(pingpong, monkeypatch, seed))
    assert runs == [(i % 2, 4) for i in range(10)], runs


def test_without_turns_the_warpgroups_interleave(gemm, monkeypatch):
    """The same schedules of gemm_sm90 (no turn) do interleave: the check above has teeth."""
    runs = [_runs(_issue_order(gemm, monkeypatch, seed)) for seed in range(6)]
    assert any(r != [(i % 2, 4) for i in range(10)] for r in runs)


def _with_counts(kernel, change) -> ops.KernelOp:
    ir = copy.deepcopy(kernel._c.ir)
    for o in ops.walk(ir.body):
        if isinstance(o, (ops.NamedBarSync, ops.NamedBarArrive)):
            change(o)
    return ir


def test_a_count_no_warps_reach_deadlocks(pingpong):
    """Barrier 3 counting 384 threads: only 256 ever arrive in a phase, warpgroup 0 waits forever."""
    def wrong(o):
        if o.id == 3:
            o.count = 384
    a, b, c = _inputs(64, 256, 128, 1)
    with pytest.raises(tmalang.TmalangError, match="E401") as caught:
        interpret(_with_counts(pingpong, wrong), pingpong.manifest, a, b, c, seed=2)
    assert "bar.sync 3, 384" in caught.value.render()


def test_two_counts_in_one_phase_are_a_protocol_error(pingpong):
    def wrong(o):
        if isinstance(o, ops.NamedBarSync) and o.id == 3:
            o.count = 512
    a, b, c = _inputs(64, 256, 128, 1)
    with pytest.raises(tmalang.TmalangError, match="E533"):
        interpret(_with_counts(pingpong, wrong), pingpong.manifest, a, b, c, seed=2, explore=4)


def test_ptx_hands_off_by_named_barriers(pingpong):
    """Entry bar.sync and exit bar.arrive on ids 3 and 4 (after the two roles' 1 and 2), count 256,
    the exit before the wait; ptxas takes it without spills."""
    ptx = pingpong.ptx
    for text in ("bar.sync 3, 256;", "bar.sync 4, 256;", "bar.arrive 3, 256;", "bar.arrive 4, 256;"):
        assert text in ptx, text
    body = ptx[ptx.index("bar.sync 3, 256;"):]
    assert body.index("wgmma.commit_group") < body.index("bar.arrive") < body.index("wgmma.wait_group")
    stats = pingpong.stats()
    assert stats.spill_stores == 0 and stats.spill_loads == 0


def test_deferral_runs_inside_the_turn(pingpong):
    """defer_mma_release keeps one group in flight in a loop whose body is one turn: the k-loop
    waits pending=1 after the turn's exit."""
    assert re.search(r"named_bar_arrive id=3 count=256\n\s*}\n\s*wgmma_wait pending=1", pingpong.ir)


def test_ir_round_trips(pingpong):
    [kernel] = parse_ir(pingpong.ir)
    assert print_ir(kernel) == pingpong.ir


def test_a_turn_outside_warpgroups_is_invalid_ir(tmp_path, capsys):
    path = tmp_path / "one_group.ir"
    path.write_text("kernel @k grid=tiles cluster=1 cta_group=1 threads=0 smem_bytes=0 {\n"
                    "  role @r first_warp=0 last_warp=3 regs=0 {\n    turn {\n    }\n  }\n}\n")
    assert main(["opt", str(path), "--passes=order_turns"]) == 1
    assert "fewer than 2 whole warpgroups" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (130, 300, 100), (4096, 4096, 4096), (257, 513, 2000)])
def test_h100_matches_float64(pingpong, m, n, k):
    check_on_h100(pingpong, m, n, k, "bfloat16")


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(130, 300, 100), (257, 129, 200)])
def test_h100_agrees_with_the_interpreter(pingpong, m, n, k):
    torch = pytest.importorskip("torch")
    a, b, c = _inputs(m, n, k, 7)
    pingpong.interpret(a, b, c, seed=1)
    on_gpu = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    pingpong(_on_device(torch, a), _on_device(torch, b), on_gpu)
    torch.cuda.synchronize()
    got = on_gpu.float().cpu().numpy()
    assert np.allclose(got, c.astype(np.float32), rtol=2e-2, atol=2e-2)


def _on_device(torch, x):
    """A bf16 CUDA copy of `x` with rows padded to 16 bytes (a view of its first columns)."""
    rows, cols = x.shape
    base = torch.zeros((rows, -(-cols // 8) * 8), device="cuda", dtype=torch.bfloat16)
    base[:, :cols] = torch.from_numpy(x.astype(np.float32)).to("cuda", torch.bfloat16)
    return base[:, :cols]


def test_explain_lists_the_handoffs(pingpong):
    text = pingpong.explain()
    assert "consumer: warpgroups 0..1 issue each turn one at a time" in text
    assert "warpgroup 0: enters with bar.sync 3, 256; leaves with bar.arrive 4, 256" in text
    assert "warpgroup 1 arrives on 3 at role start: warpgroup 0 goes first" in text

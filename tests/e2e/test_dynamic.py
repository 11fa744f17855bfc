"""Dynamic tile loops (`dynamic`, passes/claim_tiles.py): examples/gemm_dynamic_sm90.tma on the
interpreter against float64 under random schedules, the claims the schedules make, the counter's
reset, the IR round-trip, the PTX, the runtime's per-stream counter and the C++ header's;
on the H100, odd shapes against float64, back-to-back launches and launches on two streams."""

from __future__ import annotations

import copy
import struct

import ml_dtypes
import pytest

import tmalang
from conftest import ROOT
from references import bf16_gemm_operands as operands
from references import gemm_relative_error as relative_error
from tmalang.backend import launch_header, ptxas
from tmalang.contract.binding import bind
from tmalang.contract.manifest import CounterParam, Manifest
from tmalang.interp import interpret
from tmalang.interp import machine
from tmalang.ir import exprs as ex
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.runtime.params import pack_params

BF16 = ml_dtypes.bfloat16
EXAMPLE = ROOT / "examples" / "gemm_dynamic_sm90.tma"


@pytest.fixture(scope="module")
def gemm():
    return tmalang.compile_file(EXAMPLE, constants={"STAGES": 2, "GROUP": 2})


@pytest.mark.parametrize("m,n,k,ctas", [(257, 300, 100, 3), (130, 513, 72, 2), (390, 260, 64, 4)])
def test_interpreter_matches_float64_under_random_schedules(gemm, m, n, k, ctas):
    a, b, c = operands(m, n, k, m + n + k)
    gemm.interpret(a, b, c, seed=m, explore=3, ctas=ctas)
    assert relative_error(c, a, b) < 1e-2


def test_schedules_hand_out_tiles_differently(gemm, monkeypatch):
    """Claims are scheduler steps: random schedules give different CTAs different tiles, every
    tile is claimed once, and each CTA claims once past the end."""
    claims = []
    original = machine.SEMANTICS[ops.TileClaim]

    def recording(m, w, o):
        before = m.launch.memory.counter
        original(m, w, o)
        claims.append((m.cta, before))
    monkeypatch.setitem(machine.SEMANTICS, ops.TileClaim, recording)
    a, b, c = operands(520, 520, 64, 7)   # 5 x 3 tiles of 128 x 256
    assignments = set()
    for seed in range(6):
        claims.clear()
        gemm.interpret(a, b, c, seed=seed, ctas=3)
        assert sorted(t for _, t in claims) == list(range(15 + 3))
        assert sorted(cta for cta, t in claims if t >= 15) == [0, 1, 2]
        assignments.add(tuple(sorted(claims)))
    assert len(assignments) > 1
    assert relative_error(c, a, b) < 1e-2


def test_interpreter_reports_a_counter_left_nonzero(gemm):
    """A claim that never recognises the launch's last claim leaves the counter past 0 (E550)."""
    kernel = copy.deepcopy(gemm._c.ir)
    for o in ops.walk(kernel.body):
        if isinstance(o, ops.TileClaim):
            o.tiles = ex.Const(1000)
    a, b, c = operands(130, 260, 64, 1)
    with pytest.raises(tmalang.TmalangError, match="E550") as info:
        interpret(kernel, gemm.manifest, a, b, c, ctas=2)
    assert "tile counter at" in str(info.value) and info.value.span is not None


def test_interpreter_reports_a_slot_claimed_before_it_is_read(gemm):
    """The claimer must wait for the slot's release: without that wait a claim overwrites a slot
    another role may not have read (a race or a surplus arrival)."""
    kernel = copy.deepcopy(gemm._c.ir)
    claim = next(o for o in ops.walk(kernel.body) if isinstance(o, ops.Elect) and
                 any(isinstance(x, ops.TileClaim) for x in o.body))
    del claim.body[0]   # the mbar_wait on claims.empty
    a, b, c = operands(520, 520, 64, 2)
    with pytest.raises(tmalang.TmalangError, match="E40[0-9]"):
        interpret(kernel, gemm.manifest, a, b, c, seed=0, explore=12, ctas=2)


def test_final_ir_round_trips(gemm):
    text = print_ir(gemm._c.ir)
    assert "tile_claim" in text and "tile_take" in text and "loop count=" in text
    assert print_ir(parse_ir(text)) == text


def test_ptx_claims_with_a_relaxed_atomic_and_assembles(gemm):
    ptx = gemm.ptx
    assert ptx.count("atom.relaxed.gpu.global.add.u32") == 1
    assert ptx.count("st.relaxed.gpu.global.u32") == 1   # the reset by the launch's last claim
    ptxas.assemble(ptx, "sm_90a")


def test_manifest_asks_for_a_counter(gemm):
    params = gemm.manifest.ptx_params
    assert isinstance(params[-1], CounterParam)
    assert Manifest.from_json(gemm.manifest.to_json()) == gemm.manifest
    static = tmalang.compile_file(ROOT / "examples" / "gemm_sm90.tma")
    assert not any(isinstance(p, CounterParam) for p in static.manifest.ptx_params)


def test_counter_is_packed_last_as_an_address(gemm):
    """The launcher answers the CounterParam with its counter's address (per device and stream)."""
    a, b, c = operands(130, 260, 64, 3)
    params = pack_params(bind(gemm.manifest, (a, b, c)), lambda p: bytes(128),
                         lambda what: 0xC0FFEE00 if isinstance(what, CounterParam) else 0)
    assert params.value(len(params) - 1) == struct.pack("<Q", 0xC0FFEE00)


def test_launch_header_keeps_a_tile_counter_per_stream(gemm):
    """The header's launch takes the stream's zeroed counter from the runtime (or the caller's),
    and passes it as the kernel's last parameter, as runtime/launch.py does (run on the H100 by
    tests/runtime/test_cpp_host.py)."""
    header = launch_header.render(gemm.manifest, str(EXAMPLE), gemm._c.ir)
    assert "CUdeviceptr tile_counter = 0" in header and "tmalang::tile_counter(stream, &counter)" in header
    assert "&p_N, &counter};" in header


def test_explain_shows_the_claims(gemm):
    text = gemm.explain()
    assert "dynamic tile walk" in text and "claims.queue" in text


# ---- on the H100 ------------------------------------------------------------------------------


def _torch_operands(torch, m, n, k, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def matrix(rows, cols):
        return torch.randn(rows, -(-cols // 8) * 8, device="cuda", generator=gen).to(torch.bfloat16)[:, :cols]
    a, b = matrix(m, k), matrix(n, k)
    c = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    return a, b, c


def _error(torch, a, b, c) -> float:
    reference = a.double() @ b.double().T
    return (torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference)).item()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (130, 300, 100), (4096, 4096, 4096), (257, 5000, 2000)])
def test_h100_matches_float64_twice_in_a_row(m, n, k):
    """Two launches back to back on one stream: the second finds the counter reset by the first."""
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile_file(EXAMPLE)
    a, b, c = _torch_operands(torch, m, n, k, m + n + k)
    for _ in range(2):
        c.fill_(float("nan"))
        kernel(a, b, c)
        torch.cuda.synchronize()
        assert _error(torch, a, b, c) < 1e-2


@pytest.mark.gpu
def test_h100_two_streams_have_their_own_counters():
    """Launches on two streams may overlap: each stream's counter serves its own launches only,
    and both stay correct over several rounds."""
    torch = pytest.importorskip("torch")
    kernel = tmalang.compile_file(EXAMPLE)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    jobs = [_torch_operands(torch, 2000 + 37 * i, 3000 - 51 * i, 1536, i) for i in range(2)]
    torch.cuda.synchronize()
    for _ in range(3):
        for _, _, c in jobs:
            c.fill_(float("nan"))
        torch.cuda.synchronize()
        for stream, (a, b, c) in zip(streams, jobs):
            kernel(a, b, c, stream=stream)
        torch.cuda.synchronize()
        for a, b, c in jobs:
            assert _error(torch, a, b, c) < 1e-2
    assert len(kernel._launcher._counters) == 2   # one per stream (same device)

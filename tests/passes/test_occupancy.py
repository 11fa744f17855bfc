"""`occupancy N` (language.md §3): the launch registers and the shared-memory check sized for N
CTAs a multiprocessor, and the PTX bounds that tell ptxas and the driver; nothing else changes
(the interpreter's results are the same)."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from tmalang.diagnostics import TmalangError

KERNEL = """
kernel rows<N_CTAS = 1, REGS = 232, STAGES = 2>(x: f32[M, N], y: f32[M, N]) {
    grid persistent
    occupancy N_CTAS
    box X = x[64, 64]
    box Y = y[64, 64]
    pipeline ring[STAGES] { t: X }
    role producer: warp 0, regs 40 {
        for tile (m, n) in tiles(x, X) {
            produce ring as s { load X[m, n] -> s.t }
        }
    }
    role consumer: warps 4..7, regs REGS {
        for tile (m, n) in tiles(x, X) {
            consume ring as s { store Y[m, n] <- s.t }
        }
    }
}
"""


def compiled(**constants):
    return tmalang.compile(KERNEL, name="rows.tma", constants=constants)


@pytest.mark.parametrize("ctas,regs,launch", [(1, 232, 248), (2, 200, 128), (2, 216, 128), (3, 112, 80)])
def test_the_launch_registers_are_the_file_shared_by_n_ctas(ctas, regs, launch):
    ptx = compiled(N_CTAS=ctas, REGS=regs).ptx
    assert f".maxnreg {launch}" in ptx
    assert f".minnctapersm {ctas}" in ptx
    assert f"setmaxnreg.{'inc' if regs > launch else 'dec'}.sync.aligned.u32 {regs}" in ptx


def test_budgets_past_the_shared_file_are_refused():
    with pytest.raises(TmalangError) as caught:
        compiled(N_CTAS=2, REGS=232)
    text = str(caught.value)
    assert "E045" in text and "x 128 at launch, the file shared by `occupancy 2` CTAs" in text


def test_shared_memory_for_n_ctas_must_fit():
    compiled(N_CTAS=2, REGS=200, STAGES=7)                      # 7 x 16 KB a CTA: two fit in 228 KB
    with pytest.raises(TmalangError, match=r"E602.*occupancy 2 needs 264672 bytes of shared memory"):
        compiled(N_CTAS=2, REGS=200, STAGES=8)                  # 8 x 16 KB: two do not
    compiled(N_CTAS=1, REGS=232, STAGES=13)                     # one CTA: its own limit only


@pytest.mark.parametrize("ctas", [0, 33])
def test_an_occupancy_no_multiprocessor_holds_is_refused(ctas):
    with pytest.raises(TmalangError, match="E601"):
        compiled(N_CTAS=ctas, REGS=128)


def test_declared_twice_is_refused():
    with pytest.raises(TmalangError, match="E057.*occupancy is already declared"):
        tmalang.compile(KERNEL.replace("occupancy N_CTAS", "occupancy N_CTAS\n    occupancy 1"), name="rows.tma")


def test_the_interpreter_computes_the_same():
    x = np.random.default_rng(1).standard_normal((100, 132)).astype(np.float32)[:, :130]
    for ctas, regs in ((1, 232), (2, 200)):
        y = np.full((100, 132), np.nan, np.float32)[:, :130]
        compiled(N_CTAS=ctas, REGS=regs).interpret(x, y)
        np.testing.assert_array_equal(y, x)


def test_the_ir_says_it_and_reads_back():
    from tmalang.ir.parser import parse_ir

    ir = str(compiled(N_CTAS=2, REGS=200).ir)
    assert "occupancy=2" in ir
    assert parse_ir(ir)[0].occupancy == 2
    assert "occupancy" not in str(compiled().ir)           # the default is not printed

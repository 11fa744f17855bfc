"""Element reads in index expressions (docs/language.md §18): `t[i]` of a 1-D i32 tensor, read
where the expression is evaluated, 0 outside the tensor. A kernel written from the docs
(tests/user_kernels/pad_segments.tma) walks a packed batch by its offsets `cu`: data-dependent
steps extents on both sides of a ring, a load at element coordinates built from a read, and a
store whose step index the race check bounds through `min(..., 1)`.

Checked: sema's rules (E600, E496, E033 in `assume`, E461, E056 for extents that disagree), the IR
text round trip, the interpreter against NumPy over schedules and CTA counts
(empty and one-row segments, a segment past R, an offsets tensor one element short), ptxas, and
the GPU against NumPy.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir

KERNEL = ROOT / "tests" / "user_kernels" / "pad_segments.tma"
BF16 = ml_dtypes.bfloat16
CASES = {"mixed": ([1, 77, 0, 130, 64, 5], 150), "one": ([1], 1), "long": ([4099, 3, 200], 300)}


def inputs(lengths, rows: int, seed: int, short: bool = False):
    """x [1, N, 64] packed, cu [S + 1] (one element short with `short`), out [S, R, 64] NaN."""
    rng = np.random.default_rng(seed)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    x = rng.standard_normal((1, max(int(cu[-1]), 1), 64)).astype(BF16)
    out = np.full((len(lengths), rows, 64), np.nan, BF16)
    return x, cu[:-1] if short else cu, out


def expected(x, cu, out_shape):
    """What the kernel writes: each block of 64 rows that starts inside segment s (capped at R),
    the packed rows from the block's start on (zeros past x, TMA's fill); NaN (untouched) elsewhere."""
    want = np.full(out_shape, np.nan, np.float32)
    packed = np.concatenate([x[0].astype(np.float32), np.zeros((64, 64), np.float32)])
    for s in range(out_shape[0]):
        start = int(cu[s]) if s < len(cu) else 0
        length = (int(cu[s + 1]) if s + 1 < len(cu) else 0) - start
        for j in range(0, min(max(length, 0), out_shape[1]), 64):
            rows = packed[start + j: start + j + 64][: out_shape[1] - j]
            want[s, j: j + len(rows)] = rows
    return want


def same(got, want) -> None:
    np.testing.assert_array_equal(np.asarray(got, np.float32), want)


@pytest.mark.parametrize("case", list(CASES))
def test_the_interpreter_matches_numpy_across_schedules(case):
    lengths, rows = CASES[case]
    kernel = tmalang.compile_file(KERNEL)
    for seed, ctas in ((0, 1), (1, 3)):
        x, cu, out = inputs(lengths, rows, seed)
        kernel.interpret(x, cu, out, seed=seed, explore=2, ctas=ctas)
        same(out, expected(x, cu, out.shape))


def test_a_read_past_the_offsets_reads_zero():
    """cu one element short: the last segment's end reads 0, so its extent is negative and the
    steps loops run no step on either side; nothing hangs and nothing is written for it."""
    kernel = tmalang.compile_file(KERNEL)
    x, cu, out = inputs([70, 9, 33], 96, 4, short=True)
    kernel.interpret(x, cu, out, seed=2, explore=2)
    same(out, expected(x, cu, out.shape))
    assert np.isnan(out[-1].astype(np.float32)).all()


def test_ptxas_assembles_the_guarded_reads_without_spills():
    compiled = tmalang.compile_file(KERNEL)
    assert "@q ld.global.nc.s32" in compiled.ptx and "setp.lt.u32" in compiled.ptx
    assert compiled.manifest.ptx_params[-1].tensor == "cu"
    _, stats = ptxas.assemble(compiled.ptx, "sm_90a")
    assert stats.spill_stores == 0


def test_the_ir_text_round_trips():
    text = print_ir(compile_source(KERNEL.read_text(), "pad.tma", Options(arch="sm_90a"), until="ir").ir)
    assert "$cu[(%s + 1)]" in text
    assert print_ir(parse_ir(text)) == text


SHELL = """
kernel k(x: bf16[1, N, 64], cu: {cu}, out: bf16[S, R, 64]) {{
    {assume}
    grid persistent
    box X = x[1, 64, 64]
    box O = out[1, 64, 64]
    pipeline ring[2] {{ x: X }}
    role load: warp 0 {{
        for tile (s, j, c) in tiles(out, O) {{
            for k in steps({produced}, 64) {{ produce ring as r {{ load X@[0, {row}, 0] -> r.x }} }}
        }}
    }}
    role store: warp 1 {{
        for tile (s, j, c) in tiles(out, O) {{
            for k in steps({consumed}, 64) {{ consume ring as r {{ store {store} <- r.x }} }}
        }}
    }}
}}
"""
GOOD = dict(cu="i32[S1]", assume="", produced="min(cu[s + 1] - cu[s], 64)", row="cu[s] + 64 * k",
            consumed="min(cu[s + 1] - cu[s], 64)", store="O[s, j + k, 0]")


@pytest.mark.parametrize("change,code,words", [
    (dict(cu="f32[S1]"), "E600", "1-D i32"),
    (dict(cu="i32[S1, 2]"), "E600", "1-D i32"),
    (dict(row="cu[s, 1]"), "E600", "at 2 position"),
    (dict(assume="assume cu[0] == 0"), "E033", "may not use"),
    (dict(store="O@[0, cu[s] + 64 * k, 0]"), "E461", ""),
    (dict(consumed="min(cu[s + 1], 64)"), "E056", "different loops"),
], ids=["f32", "2-D", "two-positions", "assume", "store-coordinate", "extents-disagree"])
def test_sema_refuses(change, code, words):
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(SHELL.format(**{**GOOD, **change}))
    assert caught.value.code == code, caught.value
    assert words in str(caught.value)


def test_a_division_by_a_zero_read_is_reported_at_its_line():
    """A divisor from data can be zero at run time; the GPU's quotient is then undefined, so the
    interpreter reports it (E426) at the load, instead of failing inside Python."""
    kernel = tmalang.compile(SHELL.format(**{**GOOD, "row": "cu[s] + 64 * k / cu[0]"}))
    x, cu, out = inputs([70, 9], 64, 3)
    with pytest.raises(TmalangError) as caught:
        kernel.interpret(x, cu, out)
    assert caught.value.code == "E426" and "division by zero" in caught.value.message
    assert caught.value.span.line == 10      # the load: `load X@[0, cu[s] + 64 * k / cu[0], 0]`


def test_sema_accepts_the_shell():
    tmalang.compile(SHELL.format(**GOOD))


WRITES_WHAT_IT_READS = """
kernel k(x: i32[N], cu: i32[S1], y: i32[M]) {
    grid persistent
    box X = x[64]
    box C = cu[64]
    box Y = y[64]
    pipeline ring[2] { x: X }
    role load: warp 0 {
        for tile (i) in tiles(y, Y) {
            for k in steps(min(cu[i], 1), 1) { produce ring as r { load X@[64 * (i + k)] -> r.x } }
        }
    }
    role store: warp 1 {
        for tile (i) in tiles(y, Y) {
            for k in steps(min(cu[i], 1), 1) { consume ring as r { store C[i + k] <- r.x } }
        }
    }
}
"""


def test_the_kernel_may_not_write_what_it_reads():
    with pytest.raises(TmalangError) as caught:
        tmalang.compile(WRITES_WHAT_IT_READS)
    assert caught.value.code == "E496", caught.value
    assert "t[i]" in str(caught.value.notes)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES) + ["short"])
def test_the_gpu_matches_numpy(case):
    torch = pytest.importorskip("torch")
    lengths, rows = CASES.get(case, ([70, 9, 33], 96))
    x, cu, out = inputs(lengths, rows, 7, short=case == "short")
    kernel = tmalang.compile_file(KERNEL)

    def device(a):
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).cuda().view(torch.bfloat16)
    got = device(out)
    kernel(device(x), torch.from_numpy(cu).cuda(), got)
    torch.cuda.synchronize()
    same(got.float().cpu().numpy(), expected(x, cu, out.shape))


def test_loops_whose_extents_read_a_tensor_at_different_places_are_e056():
    """Two roles walk one pipeline under steps loops whose extents read qhi at different indices
    (a mutant the fuzzer found, of examples/attention_varlen_bwd_sm90.tma): their trip counts can
    differ, which hangs. The loops' extents compare as written, element reads with their whole
    index (before, `qhi[…]` stood for any index, and the kernel was accepted and deadlocked)."""
    from tmalang.diagnostics import TmalangError

    source = (ROOT / "examples" / "attention_varlen_bwd_sm90.tma").read_text()
    consumer = """                    for i in steps((qhi[min(128 * j + 127, TK - 1)] + 63) / 64 - qlo[128 * j] / 64, 1) {
                        consume queries as a {"""
    assert consumer in source
    with pytest.raises(TmalangError, match="E056"):
        tmalang.compile(source.replace(consumer, consumer.replace("127, TK", "63, TK")), name="mutant.tma",
                        kernel="attention_varlen_bwd_dkdv")

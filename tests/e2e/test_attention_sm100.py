"""examples/attention_sm100.tma: FlashAttention-4's roles on tcgen05, validated without a
Blackwell GPU — numerics and protocol by the interpreter, the machine code by ptxas sm_100a."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from conftest import ROOT
from references import attention_case, check

import tmalang
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.interp import interpret
from tmalang.ir import exprs as ex
from tmalang.ir import ops

SOURCE = (ROOT / "examples" / "attention_sm100.tma").read_text()


@pytest.fixture(scope="module")
def attention():
    return tmalang.compile(SOURCE, arch="sm_100a", name="examples/attention_sm100.tma")


@pytest.mark.parametrize("s,t", [(1, 1), (130, 100), (257, 513), (64, 1000)])
def test_interpreter_matches_float64_softmax(attention, s, t):
    args, expected = attention_case(np.random.default_rng(s * t), (s, t))
    attention.interpret(*args, ctas=3)
    check("attention", args[-1], expected)


def test_keys_past_t_are_masked():
    """Without mask_cols the zero-filled keys of the last block join the softmax: the test can fail."""
    unmasked = SOURCE.replace("mask_cols(u.s, T - 64 * j)", "u.s")
    kernel = tmalang.compile(unmasked, arch="sm_100a")
    args, expected = attention_case(np.random.default_rng(7), (130, 100))
    kernel.interpret(*args)
    error = np.linalg.norm(args[-1].astype(np.float64) - expected) / np.linalg.norm(expected)
    assert error > 0.05


def test_ptx_holds_each_tcgen05_form(attention):
    ptx = attention.ptx
    assert ptx.count("tcgen05.mma.cta_group::1.kind::f16") == 8        # S = Q·Kᵀ and O += P·V, K = 64 each
    assert "tcgen05.ld.sync.aligned.32x32b.x64.b32" in ptx                # a row of S or O
    assert "tcgen05.st.sync.aligned.32x32b.x64.b32" in ptx                # O rescaled in place
    assert "tcgen05.st.sync.aligned.32x32b.x1.b32" in ptx                 # a factor per row
    assert "tcgen05.wait::st.sync.aligned" in ptx and "ex2.approx.ftz.f32" in ptx
    stats = attention.stats()
    assert stats.spill_stores == 0 and stats.spill_loads == 0


def _without(kernel, role_name, drop):
    """A copy of the final IR with the ops `drop` selects removed from one role."""
    kernel = copy.deepcopy(kernel)

    def strip(region):
        region[:] = [o for o in region if not drop(o)]
        for o in region:
            for r in o.regions():
                strip(r)
    strip(next(r for r in ops.roles(kernel) if r.symbol == role_name).body)
    return kernel


def _interpret(attention, kernel):
    args, _ = attention_case(np.random.default_rng(3), (130, 100))
    interpret(kernel, attention.manifest, *args)


def test_p_written_without_proxy_fence_is_flagged(attention):
    """The softmax's P reaches tcgen05.mma through the async proxy: no fence, E406."""
    kernel = _without(attention._c.ir, "softmax", lambda o: isinstance(o, ops.Fence) and o.kind == "proxy_async")
    with pytest.raises(TmalangError, match=r"E406.*tcgen05.mma reads probs.p"):
        _interpret(attention, kernel)


@pytest.mark.parametrize("role", ["softmax", "correction"])
def test_tensor_memory_access_without_fence_is_flagged(attention, role):
    kernel = _without(attention._c.ir, role, lambda o: isinstance(o, ops.Fence) and o.kind.startswith("tcgen05"))
    with pytest.raises(TmalangError, match="E417"):
        _interpret(attention, kernel)


def test_row_registers_are_per_row(attention):
    """m and l are one f32 per row; s is 64 per row."""
    decls = {o.symbol: o.cols for o in ops.walk(attention._c.ir.body) if isinstance(o, ops.RowDecl)}
    assert decls == {"m": 0, "l": 0, "mj": 0, "s": 64}
    stores = [o for o in ops.walk(attention._c.ir.body) if isinstance(o, ops.RowAssign)
              and isinstance(o.dest, ex.BufferRef) and o.dest.name == "out.o"]
    assert len(stores) == 1   # the correction's rescale


ROLE = """kernel k(y: bf16[M, 64]) {{
    grid persistent
    box Y = y[128, 64] swizzle 128B
    pipeline ring[2] {{ a: Y, b: Y }}
    pipeline accs[1] {{ d: tmem f32[128, 128] }}
    role load: warp 0 {{
        for tile (i, c) in tiles(y, Y) {{ produce ring as s {{ load Y[i, 0] -> s.a
            load Y[i, 0] -> s.b }} }}
    }}
    role mma: warp 1 {{
        for tile (i, c) in tiles(y, Y) {{ produce accs as t {{ t.d = 0
            consume ring as s {{ mma t.d, s.a, s.b }} }} }}
    }}
    role rows: {warps} {{
        row r: f32
        row v: f32[32]
        for tile (i, c) in tiles(y, Y) {{ consume accs as t {{ {body} }} }}
    }}
}}
"""


@pytest.mark.parametrize("warps,body,code,message", [
    ("warps 4..7", "v = t.d", "E067", "128 columns per row but the target is 32"),
    ("warps 4..7", "r = t.d", "E067", "reduce it with rowmax"),
    ("warps 4..7", "r = rowmax(r)", "E067", "rowmax reduces the columns of a row"),
    ("warps 4..7", "r = exp(r)", "E081", "unknown function 'exp'"),
    ("warps 4..7", "r = rowmax(t.d[0, 0])", "E093", "row math reads whole rows"),
    ("warps 2..5", "r = rowmax(t.d)", "E099", "row math runs on one warpgroup"),
    ("warps 4..7", "r = rowmax(t.d) + i", "E066", "integer index"),
    ("warps 4..7", "r = rowmax(mask_cols(t.d, r * 2))", "E066", "unknown integer variable"),   # a per-row
    # limit is a row register plus or minus an integer (`mask_cols(t.d, r - 1)`), nothing else
])
def test_row_math_misuse_is_located(warps, body, code, message):
    with pytest.raises(TmalangError) as caught:
        compile_source(ROLE.format(warps=warps, body=body), "k.tma", Options(arch="sm_100a"), until="ir")
    rendered = caught.value.render()
    assert f"error[{code}]" in rendered and message in rendered and "^" in rendered

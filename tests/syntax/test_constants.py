"""Compile-time constants (docs/language.md §2a): bindings from Python and the CLI, what they
change in the PTX, the interpreter on a bound variant, cache keys per binding, and the errors
that need a binding (the rest are grouped cases in tests/diagnostics/constants.tma)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from test_gemm import BF16, bf16_matrix, check_on_h100, relative_error
from tmalang import api
from tmalang.cli.main import main as tmalangc
from tmalang.compiler import compile_source
from tmalang.caches.disk import DiskCache

GEMM = ROOT / "examples" / "gemm_sm90.tma"

COPY = """kernel copy<BM = 64, BN = 128, STAGES = 4>(src: f32[M, N], dst: f32[M, N]) {
    grid persistent
    box In  = src[BM, BN]
    box Out = dst[BM, BN]
    pipeline ring[STAGES] { t: In }
    role producer: warp 0, regs 40 {
        for tile (m, n) in tiles(src, In) {
            produce ring as s { load In[m, n] -> s.t }
        }
    }
    role consumer: warps 4..7, regs 232 {
        for tile (m, n) in tiles(dst, Out) {
            consume ring as s { store Out[m, n] <- s.t }
        }
    }
}
"""


def literal_copy(bm: int, bn: int, stages: int) -> str:
    """COPY as it would be written by hand for one binding."""
    head = "kernel copy<BM = 64, BN = 128, STAGES = 4>"
    return (COPY.replace(head, "kernel copy").replace("[BM, BN]", f"[{bm}, {bn}]")
            .replace("ring[STAGES]", f"ring[{stages}]"))


def test_a_bound_kernel_is_the_kernel_written_out():
    """The PTX of a binding is that of the same kernel with the values written in."""
    for bm, bn, stages in [(64, 128, 4), (32, 64, 2), (128, 32, 6)]:
        bound = tmalang.compile(COPY, constants={"BM": bm, "BN": bn, "STAGES": stages})
        assert bound.ptx == tmalang.compile(literal_copy(bm, bn, stages)).ptx
        assert bound.constants == {"BM": bm, "BN": bn, "STAGES": stages}


def test_stages_binding_gives_a_three_stage_ring():
    k = tmalang.compile_file(GEMM, constants={"STAGES": 3})
    assert re.search(r"ring\.full\s+3\s", k.explain())
    assert "ring.full   4" in tmalang.compile_file(GEMM).explain()
    assert k.ptx != tmalang.compile_file(GEMM).ptx


def test_tile_width_binding_changes_the_mma_shape():
    k = tmalang.compile_file(GEMM, constants={"BN": 128, "CSWIZZLE": "64B"})
    assert "m64n128k16" in k.ptx and "m64n256k16" not in k.ptx


def test_defaults_reproduce_the_example():
    k = tmalang.compile_file(GEMM)
    assert k.constants == {"T": "bf16", "OUT": "bf16", "BM": 128, "BN": 256, "BK": 64, "STAGES": 4,
                           "CLUSTER": 2, "GROUP": 8, "SWIZZLE": "128B", "CSWIZZLE": "128B"}
    assert k.ptx == tmalang.compile_file(GEMM, constants=dict(k.constants)).ptx


@pytest.mark.parametrize("m,n,k", [(130, 300, 100), (257, 129, 200)])
def test_interpreter_runs_a_bound_gemm_at_an_odd_shape(m, n, k):
    gemm = tmalang.compile_file(GEMM, constants={"BN": 128, "CSWIZZLE": "64B", "STAGES": 3, "GROUP": 2})
    rng = np.random.default_rng(m * n + k)
    a, b = bf16_matrix(rng, m, k), bf16_matrix(rng, n, k)
    c = np.full((m, -(-n // 8) * 8), np.nan, dtype=BF16)[:, :n]
    gemm.interpret(a, b, c, seed=m, explore=2)
    assert relative_error(c, a, b) < 1e-2


def test_constants_in_index_expressions_and_folding():
    """A constant in a coordinate is a Number; an operation on it folds to the value, so the IR
    is that of the hand-written kernel."""
    src = COPY.replace("load In[m, n]", "load In[m + SHIFT * 2, n * (ONE - 1 + 1)]").replace(
        "STAGES = 4>", "STAGES = 4, SHIFT = 3, ONE = 1>")
    by_hand = COPY.replace("load In[m, n]", "load In[m + 6, n * 1]")
    assert tmalang.compile(src).ir == tmalang.compile(by_hand).ir


def test_constant_expression_in_an_integer_position():
    src = COPY.replace("box In  = src[BM, BN]", "box In  = src[(BM * 2 - BM), (BN / 2 * 2)]")
    assert tmalang.compile(src, constants={"BN": 64}).ptx == tmalang.compile(literal_copy(64, 64, 4)).ptx


def test_a_constant_in_a_tensor_shape_is_a_literal_dim():
    src = COPY.replace("f32[M, N]", "f32[M, W]").replace("STAGES = 4>", "STAGES = 4, W = 512>")
    k = tmalang.compile(src)
    assert k.manifest.args[0].shape == ("M", 512)


def test_cache_keys_differ_per_binding(tmp_path, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(tmp_path))
    keys = []
    real_key = DiskCache.key

    def spy(source, options, versions):
        keys.append(options)
        return real_key(source, options, versions)

    monkeypatch.setattr(DiskCache, "key", staticmethod(spy))
    monkeypatch.setattr(api.ptxas, "assemble", lambda ptx, arch: (b"cubin:" + ptx.encode()[:16], None))
    monkeypatch.setattr(api.ptxas, "ptxas_version", lambda: "test")
    for stages in (2, 3):
        tmalang.compile(COPY, constants={"STAGES": stages}).cubin
    assert keys[0]["constants"] == {"BM": 64, "BN": 128, "STAGES": 2}
    assert keys[1]["constants"]["STAGES"] == 3
    assert real_key(COPY, keys[0], {}) != real_key(COPY, keys[1], {})


def test_cli_define(tmp_path, capsys):
    assert tmalangc([str(GEMM), "-D", "STAGES=3", "--explain"]) == 0
    assert re.search(r"ring\.full\s+3\s", capsys.readouterr().out)
    out = tmp_path / "g.ptx"
    assert tmalangc([str(GEMM), "-D", "BN=128", "-D", "CSWIZZLE=64B", "-o", str(out)]) == 0
    assert "m64n128k16" in out.read_text()


def test_cli_define_errors(capsys):
    assert tmalangc([str(GEMM), "-D", "STAGES=0"]) == 1
    err = capsys.readouterr().err
    assert "error[E030]" in err and "note: STAGES = 0 (bound by -D STAGES=0)" in err
    assert tmalangc([str(GEMM), "-D", "STAGES=x"]) == 1
    assert "error[E542]: compile-time constant 'STAGES' of kernel 'gemm' must be an integer" in capsys.readouterr().err
    assert tmalangc([str(GEMM), "-D", "NOPE=1"]) == 1
    assert "error[E541]: kernel 'gemm' has no compile-time constant 'NOPE'" in capsys.readouterr().err
    for bad in (["-D", "STAGES"], ["-D", "=3"], ["-D", "STAGES=3", "-D", "STAGES=4"]):
        with pytest.raises(SystemExit) as exit_:
            tmalangc([str(GEMM), *bad])
        assert exit_.value.code == 2


def test_cli_run_define(capsys):
    path = ROOT / "examples" / "gemm_sm90.tma"
    assert tmalangc(["run", str(path), "--interpret", "--dims", "M=130,N=200,K=72", "-D", "BN=128",
                     "-D", "CSWIZZLE=none", "-D", "STAGES=2"]) == 0
    assert "gemm: protocol ok" in capsys.readouterr().out


def test_emit_ast_shows_resolved_values(capsys):
    assert tmalangc([str(GEMM), "--emit", "ast", "-D", "STAGES=3"]) == 0
    out = capsys.readouterr().out
    assert "ConstantDecl name='STAGES' default=4 value=3 origin='bound by -D STAGES=3'" in out
    assert "PipelineDecl name='ring' stages=3" in out


def error_of(src=COPY, **kwargs) -> tmalang.TmalangError:
    with pytest.raises(tmalang.TmalangError) as caught:
        tmalang.compile(src, **kwargs)
    return caught.value


def test_binding_errors_name_the_constant_and_the_kernel():
    e = error_of(constants={"BX": 3})
    assert (e.code, e.span, e.message) == ("E541", None, "kernel 'copy' has no compile-time constant 'BX'")
    assert e.notes == ["its constants: BM, BN, STAGES"]
    for value in ("3", 2.0, True, None, [3]):
        e = error_of(constants={"BM": value})
        assert (e.code, e.span) == ("E542", None) and "'BM' of kernel 'copy'" in e.message
    e = error_of(constants={"BM": 2**31})
    assert e.code == "E542" and "does not fit in 32 bits" in e.message
    assert tmalang.compile(COPY, constants={"BM": np.int64(32)}).constants["BM"] == 32


def test_binding_type_errors():
    assert error_of(constants=[("BM", 3)]).code == "E009"
    assert error_of(constants={3: 3}).code == "E009"


def test_binding_applies_to_the_chosen_kernel():
    two = COPY + COPY.replace("kernel copy<", "kernel copy2<")
    assert tmalang.compile(two, kernel="copy2", constants={"STAGES": 2}).constants["STAGES"] == 2
    assert tmalang.compile(two, constants={"STAGES": 2}).constants["STAGES"] == 2


def test_missing_binding_points_at_the_declaration():
    e = error_of(COPY.replace("STAGES = 4>", "STAGES>"))
    assert e.code == "E543" and e.span.line == 1
    assert e.notes == ["give it a default (<STAGES = 128>) or bind it: compile(..., constants={'STAGES': ...})"]


def test_error_at_a_use_notes_the_binding():
    e = error_of(GEMM.read_text(), name=str(GEMM), constants={"BM": 192})   # 96 would be short: 64 + 32
    assert e.code == "E087" and "accumulator acc: f32[BM, BN]" in e.render()
    assert e.notes == ["BM = 192 (bound by compile(constants=...))", "BN = 256 (default)"]
    with pytest.raises(tmalang.TmalangError) as caught:
        tmalang.compile_file(GEMM, constants={"BK": 128})
    assert caught.value.notes[-1] == "BK = 128 (bound by compile_file(constants=...))"


@pytest.mark.gpu
@pytest.mark.parametrize("constants", [{"BN": 128, "CSWIZZLE": "64B", "STAGES": 6},
                                       {"STAGES": 3, "GROUP": 16, "CLUSTER": 4}])
def test_h100_bound_gemm_matches_float64(constants):
    """Two bound variants of gemm_sm90 at an odd shape on the H100, against float64."""
    check_on_h100(tmalang.compile_file(GEMM, constants=constants), 1000, 1000, 1000, "bfloat16")
    check_on_h100(tmalang.compile_file(GEMM, constants=constants), 257, 513, 200, "bfloat16")


@pytest.mark.parametrize("constants", [{"BN": 256, "STAGES": 3}, {"BN": 192, "STAGES": 4}])
def test_sweep_whole_tile_kernel_binds(constants):
    """bench/gemm_sweep.py's whole-tile variants are bindings of one kernel file."""
    k = tmalang.compile_file(ROOT / "bench" / "kernels" / "gemm_whole_tile_sm90.tma", constants=constants)
    assert f"m64n{constants['BN']}k16" in k.ptx
    assert re.search(rf"ring\.full\s+{constants['STAGES']}\s", k.explain())


def test_split_count_and_warp_range_take_constants():
    """`split S` by a constant is the literal split (the manifest's grid has no split argument);
    a warp range takes a constant expression."""
    src = (ROOT / "examples" / "gemm_splitk_sm90.tma").read_text().replace(
        "kernel gemm_splitk(S: i32, ", "kernel gemm_splitk<S = 4>(")
    by_hand = src.replace("kernel gemm_splitk<S = 4>(", "kernel gemm_splitk(").replace("split S", "split 4")
    k = tmalang.compile(src)
    assert k.manifest.grid.split == 4 and k.ptx == tmalang.compile(by_hand).ptx
    assert tmalang.compile(src, constants={"S": 3}).manifest.grid.split == 3
    warps = COPY.replace("warps 4..7", "warps 4..(3 + 4 * WG)").replace("STAGES = 4>", "STAGES = 4, WG = 1>")
    assert tmalang.compile(warps).ptx == tmalang.compile(COPY).ptx

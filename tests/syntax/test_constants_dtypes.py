"""Dtype constants (docs/language.md §2a, issue 15): one kernel source for bf16, f16 and fp8.

Every dtype position takes a constant and a bound kernel is the kernel with the dtypes written in
(same PTX); gemm_sm90 bound to f16, fp8 and an f32 output runs on the interpreter against float64
at odd shapes and assembles with ptxas; bindings from Python objects, the CLI, the cubin cache and
autotune. The diagnostics are grouped cases in tests/diagnostics/constants_dtypes.tma; the GPU
tests at the end run on the H100.
"""

from __future__ import annotations

import json
import re

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from test_gemm import check_on_h100, relative_error
from tmalang import api
from tmalang.backend import ptxas
from tmalang.cli.main import main as tmalangc
from tmalang.caches.disk import DiskCache
from tmalang.tuning import Autotuner

GEMM = ROOT / "examples" / "gemm_sm90.tma"
FP8 = {"T": "f8e4m3", "BK": 128}          # 128 fp8 elements: still 128-byte K slices
F32_OUT = {"OUT": "f32", "BN": 128}       # [128, 32] f32 blocks: 128-byte rows, as CSWIZZLE 128B takes
NAMES = {"bf16": "DT_B", "f32": "DT_F", "i32": "DT_I"}



def code(ptx: str) -> str:
    """The PTX without its line info (.file/.loc), which names the source file and its lines: two
    sources with the same kernel on different lines make the same code."""
    return "\n".join(line for line in ptx.splitlines() if not line.lstrip().startswith((".loc", ".file")))

def generic(text: str) -> str:
    """`text` with every dtype of NAMES spelt by a constant of that dtype's default, declared in
    every kernel's header: the generic kernel whose defaults are the original."""
    for dtype, name in NAMES.items():
        text = re.sub(rf"\b{dtype}\b", name, text)
    header = ", ".join(f"{name} = {dtype}" for dtype, name in NAMES.items())
    text = re.sub(r"\bkernel (\w+)<", rf"kernel \1<{header}, ", text)
    return re.sub(r"\bkernel (\w+)\(", rf"kernel \1<{header}>(", text)


# Each dtype position: tensor and scalar parameters everywhere; accumulators, rows and conversions
# into an mma operand (attention_sm90); tmem fields, rows of a tmem role, conversions (attention_sm100,
# gemm_sm100); a tmem declaration (tests/interp/test_tmem.py's kernel).
POSITIONS = [("attention_sm90", "sm_90a"), ("attention_sm100", "sm_100a"), ("gemm_sm100", "sm_100a"),
             ("saxpy", "sm_90a")]


@pytest.mark.parametrize("name,arch", POSITIONS)
def test_a_generic_kernel_at_its_defaults_is_the_original(name, arch):
    text = (ROOT / "examples" / f"{name}.tma").read_text()
    assert generic(text) != text
    assert code(tmalang.compile(generic(text), arch=arch).ptx) == code(tmalang.compile(text, arch=arch).ptx)


def test_a_tmem_declaration_takes_a_dtype_constant():
    text = (ROOT / "examples" / "tma_copy.tma").read_text().replace(
        "    pipeline ring[4] { t: In }\n", "    pipeline ring[4] { t: In }\n    tmem accs[2]: f32[128, 128]\n")
    assert "tmem accs[2]: DT_F[128, 128]" in generic(text)
    assert code(tmalang.compile(generic(text), arch="sm_100a").ptx) == code(tmalang.compile(text, arch="sm_100a").ptx)


def test_a_bound_dtype_is_the_dtype_written_in():
    """gemm_sm100 bound to f16 inputs is gemm_sm100 with f16 written in; gemm_sm90 bound to fp8 is
    examples/gemm_fp8_sm90.tma (but for the kernel's name)."""
    text = (ROOT / "examples" / "gemm_sm100.tma").read_text()
    bound = tmalang.compile(generic(text), arch="sm_100a", constants={"DT_B": "f16"})
    assert code(bound.ptx) == code(tmalang.compile(re.sub(r"\bbf16\b", "f16", text), arch="sm_100a").ptx)
    fp8 = tmalang.compile_file(GEMM, constants=FP8)
    by_hand = tmalang.compile_file(ROOT / "examples" / "gemm_fp8_sm90.tma")
    assert code(fp8.ptx).replace("gemm", "K") == code(by_hand.ptx).replace("gemm_fp8", "K")


def test_kernel_constants_expose_dtypes_as_json():
    k = tmalang.compile_file(GEMM, constants={"T": "f16", "OUT": "f16"})
    assert k.constants["T"] == "f16" and k.constants["OUT"] == "f16"
    assert json.loads(json.dumps(k.constants)) == k.constants
    assert k.manifest.args[0].dtype == "f16" and k.manifest.args[2].dtype == "f16"


@pytest.mark.parametrize("value", ["f16", np.float16, np.dtype(np.float16)])
def test_a_dtype_binds_by_name_or_as_a_numpy_dtype(value):
    assert tmalang.compile_file(GEMM, constants={"T": value}).constants["T"] == "f16"


def test_bf16_and_fp8_bind_as_ml_dtypes():
    assert tmalang.compile_file(GEMM, constants={"T": ml_dtypes.bfloat16}).constants["T"] == "bf16"
    assert tmalang.compile_file(GEMM, constants={"T": ml_dtypes.float8_e4m3fn, "BK": 128}).constants["T"] == "f8e4m3"


def test_a_constant_without_default_takes_the_kind_of_its_binding():
    text = GEMM.read_text().replace("<T = bf16, ", "<T, ")
    assert "kernel gemm<T, OUT" in text
    assert code(tmalang.compile(text, constants={"T": "bf16"}).ptx) == code(tmalang.compile_file(GEMM).ptx)
    with pytest.raises(tmalang.TmalangError) as caught:
        tmalang.compile(text, constants={"T": 64})
    assert caught.value.code == "E565" and "a dtype like bf16 goes here" in caught.value.message


def test_a_wrong_dtype_for_the_hardware_is_reported_at_its_use_with_the_binding():
    with pytest.raises(tmalang.TmalangError) as caught:
        tmalang.compile_file(GEMM, constants={"T": "f8e4m3"})        # fp8 with 64-byte K slices
    assert caught.value.code == "E089" and "mma acc, s.a, s.b" in caught.value.render()
    assert "T = f8e4m3 (bound by compile_file(constants=...))" in caught.value.notes


def test_cache_keys_hold_the_dtypes(tmp_path, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(tmp_path))
    keys = []
    real_key = DiskCache.key

    def spy(source, options, versions):
        keys.append(options)
        return real_key(source, options, versions)

    monkeypatch.setattr(DiskCache, "key", staticmethod(spy))
    monkeypatch.setattr(api.ptxas, "assemble", lambda ptx, arch: (b"cubin:" + ptx.encode()[:16], None))
    monkeypatch.setattr(api.ptxas, "ptxas_version", lambda: "test")
    for dtype in ("bf16", "f16"):
        tmalang.compile_file(GEMM, constants={"T": dtype}).cubin
    assert (keys[0]["constants"]["T"], keys[1]["constants"]["T"]) == ("bf16", "f16")
    assert real_key("x", keys[0], {}) != real_key("x", keys[1], {})


def test_cli_defines_a_dtype(tmp_path, capsys):
    out = tmp_path / "g.ptx"
    assert tmalangc([str(GEMM), "-D", "T=f16", "-o", str(out)]) == 0
    assert "m64n256k16.f32.f16.f16" in out.read_text()
    assert tmalangc([str(GEMM), "-D", "T=64"]) == 1
    err = capsys.readouterr().err
    assert "error[E563]" in err and "note: T = 64 (bound by -D T=64)" in err
    assert tmalangc([str(GEMM), "-D", "BK=f16"]) == 1
    assert "error[E563]: compile-time constant 'BK' of kernel 'gemm' holds an integer" in capsys.readouterr().err


def test_autotune_keys_and_stores_dtype_bindings(tmp_path):
    configs = [{"T": "f16", "BN": 256}, {"T": "f16", "BN": 128, "CSWIZZLE": "64B"}]
    launched = []
    t = Autotuner(GEMM, configs, cache_dir=tmp_path, timer=lambda launch: launch() or [2.0, 1.0][launched[-1]])
    t.compiled = lambda index: (lambda *a, **k: launched.append(index))
    t(np.zeros((3, 4), np.float16))
    again = Autotuner(GEMM, configs, cache_dir=tmp_path)
    assert again.choices() == t.choices() and list(again.choices().values()) == [configs[1]]
    assert "m64n128k16.f32.f16.f16" in again.compiled(1).ptx


def _matrix(rng, rows, cols, dtype):
    """Random rows padded to 16 bytes (a view into the padded array)."""
    per_row = 16 // np.dtype(dtype).itemsize
    return rng.standard_normal((rows, -(-cols // per_row) * per_row)).astype(dtype)[:, :cols]


@pytest.mark.parametrize("constants,dtype,out,m,n,k", [
    ({"T": "f16"}, np.float16, ml_dtypes.bfloat16, 130, 300, 100),
    ({"T": "f16", "OUT": "f16"}, np.float16, np.float16, 257, 129, 72),
    (FP8, ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16, 130, 300, 200),
    ({**FP8, "T": "f8e5m2"}, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16, 77, 200, 144),
    (F32_OUT, ml_dtypes.bfloat16, np.float32, 130, 300, 100),
])
def test_bound_gemm_interprets_against_float64(constants, dtype, out, m, n, k):
    gemm = tmalang.compile_file(GEMM, constants=constants)
    rng = np.random.default_rng(m * n + k)
    a, b = _matrix(rng, m, k, dtype), _matrix(rng, n, k, dtype)
    c = np.full((m, -(-n // 8) * 8), np.nan, dtype=out)[:, :n]
    gemm.interpret(a, b, c, seed=m, explore=1)
    assert relative_error(c, a, b) < 1e-2


@pytest.mark.skipif(ptxas.find_ptxas() is None, reason="no ptxas")
@pytest.mark.parametrize("constants", [{"T": "f16"}, {"T": "f16", "OUT": "f16"}, FP8, F32_OUT,
                                       {"OUT": "f32", "STAGES": 3}])
def test_bound_gemm_assembles(constants):
    cubin, stats = ptxas.assemble(tmalang.compile_file(GEMM, constants=constants).ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF"
    assert stats.spill_stores == 0 and "C7514" not in stats.log


def test_f32_output_needs_a_smaller_tile_or_ring():
    """At BN = 256 two f32 staging tiles and a 4-stage ring overflow shared memory (E032): bind BN =
    128 (a [128, 32] f32 block is one 128-byte swizzle span per row) or STAGES = 3."""
    with pytest.raises(tmalang.TmalangError) as caught:
        tmalang.compile_file(GEMM, constants={"OUT": "f32"})
    assert caught.value.code == "E032" and "OUT = f32 (bound by compile_file(constants=...))" in caught.value.notes
    assert "m64n128k16.f32.bf16.bf16" in tmalang.compile_file(GEMM, constants=F32_OUT).ptx


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (257, 513, 200), (130, 300, 100)])
def test_h100_f16_binding_matches_float64(m, n, k):
    check_on_h100(tmalang.compile_file(GEMM, constants={"T": "f16"}), m, n, k, "float16")


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(1000, 1000, 1000), (257, 513, 256), (130, 300, 144)])
def test_h100_fp8_binding_matches_float64(m, n, k):
    check_on_h100(tmalang.compile_file(GEMM, constants=FP8), m, n, k, "float8_e4m3fn")

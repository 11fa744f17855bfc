"""tmalangc: outputs, flags and exit codes (0 ok, 1 diagnostic, 2 usage)."""

from __future__ import annotations

import pytest

from conftest import ROOT
from tmalang.cli import main

COPY = str(ROOT / "examples" / "tma_copy.tma")
BAD = str(ROOT / "tests" / "diagnostics" / "E041_overlapping_roles.tma")


def test_ptx_to_file(tmp_path):
    out = tmp_path / "k.ptx"
    assert main([COPY, "--arch", "sm_90a", "-o", str(out)]) == 0
    text = out.read_text()
    assert "cp.async.bulk.tensor" in text and "mbarrier.try_wait.parity" in text


def test_explain_prints_barrier_table_and_smem_map(capsys):
    assert main(["--explain", COPY]) == 0
    out = capsys.readouterr().out
    assert "ring.full   4       1      32768" in out
    assert "ring.empty" in out and "smem map" in out and "ring.t (4 stages)" in out
    assert "producer  0      32       40" in out


def test_explain_shows_tcgen05_arrivals_and_the_tmem_map(capsys):
    assert main(["--explain", "--arch", "sm_100a", str(ROOT / "examples" / "gemm_sm100.tma")]) == 0
    out = capsys.readouterr().out
    assert "ring.empty" in out and "mma (tcgen05.commit)" in out
    assert "512 of 512 columns allocated" in out and "accs.d (2 x [128, 256])" in out


def test_run_interprets_an_sm100a_kernel(capsys):
    gemm = str(ROOT / "examples" / "gemm_sm100.tma")
    assert main(["run", gemm, "--interpret", "--arch", "sm_100a", "--dims", "M=130,N=260,K=72"]) == 0
    assert "protocol ok" in capsys.readouterr().out


@pytest.mark.parametrize("emit,marker", [("ast", "Kernel name='tma_copy'"), ("ir", "kernel @tma_copy"),
                                         ("ll", "ptx_kernel"), ("ptx", ".entry tma_copy")])
def test_emit_kinds(capsys, emit, marker):
    assert main([COPY, "--emit", emit]) == 0
    assert marker in capsys.readouterr().out


def test_cubin_is_an_elf(tmp_path):
    out = tmp_path / "k.cubin"
    assert main([COPY, "--emit", "cubin", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_print_ir_after_and_time_passes_and_stats(capsys):
    assert main([COPY, "--print-ir-after=plan_smem", "--time-passes", "--stats", "-o", "/dev/null"]) == 0
    err = capsys.readouterr().err
    assert "// ----- IR after plan_smem -----" in err and "offset=0" in err
    assert "expand_pipelines" in err and "ptxas" in err
    assert "spill_stores=0B" in err


def test_user_error_exits_1_with_located_diagnostic(capsys):
    assert main([BAD]) == 1
    err = capsys.readouterr().err
    assert "E041_overlapping_roles.tma:10:20: error[E041]" in err and "^^^" in err
    assert "Traceback" not in err


def test_missing_file_exits_1(capsys):
    assert main(["/nonexistent.tma"]) == 1
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], [COPY, "--emit", "exe"], [COPY, "--print-ir-after=nope"], [COPY, "--arch", "sm_80"]])
def test_usage_errors_exit_2(argv):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2


def test_manifest_json(tmp_path):
    out = tmp_path / "m.json"
    assert main([COPY, "--manifest", str(out), "-o", "/dev/null"]) == 0
    import json

    data = json.loads(out.read_text())
    assert data["block_threads"] == 256 and data["grid"]["kind"] == "persistent"
    assert [p["kind"] for p in data["ptx_params"]] == ["TensorMapParam", "TensorMapParam", "DimParam", "DimParam"]


def test_cpp_launch_header_compiles(tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    cuda_h = Path("/usr/local/cuda/include/cuda.h")
    if shutil.which("g++") is None or not cuda_h.exists():
        pytest.skip("needs g++ and the CUDA driver header to compile the C++ launch header")
    for example in sorted((ROOT / "examples").glob("*.tma")):
        header = tmp_path / f"{example.stem}.h"
        arch = "sm_100a" if "sm100" in example.stem else "sm_90a"
        assert main([str(example), "--arch", arch, "--emit", "header", "-o", str(header)]) == 0
        unit = tmp_path / f"use_{example.stem}.cpp"
        unit.write_text(f'#include "{header.name}"\n')
        run = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                              f"-I{ROOT / 'runtime'}", f"-I{tmp_path}", f"-I{cuda_h.parent}", str(unit)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr

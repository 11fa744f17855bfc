"""tmalangc: outputs, flags and exit codes (0 ok, 1 diagnostic, 2 usage)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tmalang

from conftest import ROOT
from split_cases import load
from tmalang.cli.main import main

COPY = str(ROOT / "examples" / "tma_copy.tma")
BAD = next(c for c in load(ROOT / "tests" / "diagnostics" / "roles.tma", ROOT) if c.name == "overlapping_roles")


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
    timed = {line.split()[0] for line in err.splitlines() if line.strip()}
    # --time-passes speaks the stages' names (tmalang/stages.py), each pass under its own
    assert {"ast", "sema", "lower", "expand_pipelines", "ll", "ptx", "cubin"} <= timed
    assert "total to cubin" in err and "spill_stores=0B" in err


def test_user_error_exits_1_with_located_diagnostic(tmp_path, capsys):
    assert main([str(BAD.write(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert f"roles.tma:{BAD.expected.line}:20: error[E041]" in err and "^^^" in err
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


@pytest.mark.slow   # a C++ compile of every example's header (tests/runtime/test_cpp_host.py keeps two by default)
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
                              f"-I{tmalang.get_include()}", f"-I{tmp_path}", f"-I{cuda_h.parent}", str(unit)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr


# --- bad paths and options: a diagnostic or a usage error before any work, never a traceback ---


@pytest.mark.parametrize("flags", [["-o", "{missing}/k.ptx"], ["--manifest", "{missing}/m.json", "-o", "/dev/null"],
                                   ["--emit", "cubin", "-o", "{missing}/k.cubin"], ["-o", "{tmp}"]])
def test_output_into_a_missing_directory_is_e009_before_compiling(tmp_path, capsys, monkeypatch, flags):
    import tmalang.cli.compile as compile_cli

    monkeypatch.setattr(compile_cli, "compile_source", lambda *a, **k: pytest.fail("compiled before checking outputs"))
    flags = [f.format(missing=tmp_path / "no" / "such", tmp=tmp_path) for f in flags]
    assert main([COPY, *flags]) == 1
    err = capsys.readouterr().err
    assert "error[E009]: cannot write" in err and "Traceback" not in err


def test_trace_into_a_missing_directory_is_e009_before_running(tmp_path, capsys, monkeypatch):
    import tmalang.cli.run as run_cli

    monkeypatch.setattr(run_cli, "compile_kernel", lambda *a, **k: pytest.fail("ran before checking --trace"))
    assert main(["run", COPY, "--interpret", "--trace", str(tmp_path / "no" / "t.json")]) == 1
    assert "error[E009]: cannot write" in capsys.readouterr().err


def test_non_utf8_source_is_a_located_e007(tmp_path, capsys):
    bad = tmp_path / "bad.tma"
    bad.write_bytes(b"kernel k() {\n  box \xff = x[1]\n}\n")
    assert main([str(bad)]) == 1
    assert main(["run", str(bad), "--interpret"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:7: error[E007]: source is not valid UTF-8: byte 0xff" in err and "Traceback" not in err


@pytest.mark.parametrize("flags", [["--seed", "-1"], ["--explore", "-1"], ["--ctas", "0"], ["--ctas", "-1"],
                                   ["--dims", "M=²"], ["--dims", "M=" + "9" * 5000], ["--dims", "=3"]])
def test_run_rejects_unusable_options_as_usage_errors(flags):
    with pytest.raises(SystemExit) as caught:
        main(["run", COPY, "--interpret", *flags])
    assert caught.value.code == 2


def test_run_dims_out_of_range_is_e206_before_allocating(capsys, monkeypatch):
    import tmalang.cli.run as run_cli

    monkeypatch.setattr(run_cli, "_random_inputs", lambda *a: pytest.fail("allocated before checking dims"))
    assert main(["run", COPY, "--interpret", "--dims", "M=2147483648,N=64"]) == 1
    assert "error[E206]: --dims M is 2147483648; dims must be < 2**31" in capsys.readouterr().err


def test_run_dims_too_large_for_memory_is_e009_before_allocating(capsys, monkeypatch):
    import tmalang.cli.run as run_cli

    monkeypatch.setattr(run_cli, "_random_inputs", lambda *a: pytest.fail("allocated before checking memory"))
    assert main(["run", COPY, "--interpret", "--dims", "M=2147483647,N=2147483647"]) == 1
    assert "error[E009]: the random inputs for these dims need" in capsys.readouterr().err


def _ptxas_script(tmp_path, body: str, mode: int = 0o755) -> str:
    script = tmp_path / "ptxas"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(mode)
    return str(script)


@pytest.mark.parametrize("setup", ["missing", "not_executable", "directory"])
def test_bad_tmalang_ptxas_is_e301(tmp_path, capsys, monkeypatch, setup):
    from tmalang.backend import ptxas

    path = {"missing": str(tmp_path / "nope"), "not_executable": _ptxas_script(tmp_path, "exit 0", 0o644),
            "directory": str(tmp_path)}[setup]
    monkeypatch.setenv("TMALANG_PTXAS", path)
    ptxas.find_ptxas.cache_clear()
    try:
        assert main([COPY, "--emit", "cubin", "-o", str(tmp_path / "k.cubin")]) == 1
    finally:
        ptxas.find_ptxas.cache_clear()
    err = capsys.readouterr().err
    assert "error[E301]: TMALANG_PTXAS is" in err and "Traceback" not in err


def test_a_ptxas_that_never_returns_is_stopped_with_e302(tmp_path, capsys, monkeypatch):
    import time

    from tmalang.backend import ptxas

    monkeypatch.setenv("TMALANG_PTXAS", _ptxas_script(tmp_path, "sleep 60"))
    monkeypatch.setenv("TMALANG_PTXAS_TIMEOUT", "0.5")
    ptxas.find_ptxas.cache_clear()
    start = time.monotonic()
    try:
        assert main([COPY, "--stats", "-o", "/dev/null"]) == 1
    finally:
        ptxas.find_ptxas.cache_clear()
    assert time.monotonic() - start < 20
    assert "error[E302]: ptxas did not finish within 0.5 s" in capsys.readouterr().err


def test_a_bad_ptxas_timeout_is_e302(capsys, monkeypatch):
    monkeypatch.setenv("TMALANG_PTXAS_TIMEOUT", "soon")
    assert main([COPY, "--emit", "cubin", "-o", "/dev/null"]) == 1
    assert "error[E302]: TMALANG_PTXAS_TIMEOUT is 'soon'" in capsys.readouterr().err


def test_an_endless_source_is_e009(capsys):
    assert main(["/dev/zero"]) == 1
    assert "error[E009]: cannot read /dev/zero: larger than 16 MiB" in capsys.readouterr().err


def test_a_directory_as_source_is_e009(tmp_path, capsys):
    assert main([str(tmp_path)]) == 1
    assert "error[E009]: cannot read" in capsys.readouterr().err


def test_get_include_names_the_folder_of_the_runtime_header():
    import tmalang

    header = Path(tmalang.get_include()) / "tmalang_runtime.h"
    assert header.is_file() and "namespace tmalang" in header.read_text()


def _tmalangc(args: list[str], stdin: bytes = b"") -> "subprocess.CompletedProcess":
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "tmalang", *args], input=stdin, capture_output=True, timeout=120)


def test_version_names_tmalang_llvmlite_and_ptxas():
    run = _tmalangc(["--version"])
    lines = run.stdout.decode().splitlines()
    assert run.returncode == 0
    assert lines[0] == f"tmalangc {tmalang.__version__}"
    assert lines[1].startswith("llvmlite ") and "(LLVM " in lines[1]
    assert lines[2].startswith("ptxas ")


def test_stdin_source_and_stdout_output_through_python_m_tmalang():
    source = (ROOT / "examples" / "saxpy.tma").read_bytes()
    ptx = _tmalangc(["-", "-o", "-"], source)
    assert ptx.returncode == 0 and b".entry saxpy" in ptx.stdout
    cubin = _tmalangc(["-", "--emit", "cubin", "-o", "-"], source)
    assert cubin.returncode == 0 and cubin.stdout[:4] == b"\x7fELF"


def test_a_diagnostic_from_stdin_names_stdin():
    run = _tmalangc(["-"], b"kernel k(x: f32[M]) {\n  grid oops\n}\n")
    assert run.returncode == 1
    assert run.stderr.decode().startswith("<stdin>:2:8: error[E050]")


def test_cubin_from_stdin_without_an_output_is_a_usage_error():
    run = _tmalangc(["-", "--emit", "cubin"], b"")
    assert run.returncode == 2 and b"needs -o" in run.stderr


def test_help_names_every_subcommand():
    text = _tmalangc(["--help"]).stdout.decode()
    assert "tmalangc run" in text and "tmalangc opt" in text and "python -m tmalang" in text


def test_diagnostics_as_json_for_tools(tmp_path, capsys):
    import json

    path = BAD.write(tmp_path)
    assert main([str(path), "--diagnostics-format", "json"]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])
    assert d["code"] == "E041" and d["severity"] == "error" and d["message"]
    where = d["location"]
    assert (where["file"], where["line"], where["col"]) == (str(path), BAD.expected.line, 20)
    assert where["end_col"] > where["col"] and where["source_line"] == path.read_text().splitlines()[BAD.expected.line - 1]
    assert isinstance(d["notes"], list)


def test_diagnostics_as_json_from_the_environment_for_every_subcommand(capsys, monkeypatch):
    import json

    monkeypatch.setenv("TMALANG_DIAGNOSTICS", "json")
    assert main(["run", "/nonexistent.tma", "--interpret"]) == 1
    d = json.loads(capsys.readouterr().err)
    assert d["code"] == "E009" and "location" not in d and "cannot read" in d["message"]
    assert main(["/nonexistent.tma", "--diagnostics-format", "text"]) == 1   # the flag wins
    assert capsys.readouterr().err.startswith("error[E009]")

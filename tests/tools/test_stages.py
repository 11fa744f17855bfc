"""The stage order as data (tmalang/stages.py, compiler.py STAGES): one vocabulary for `until`,
`--emit`, `--time-passes`; entering at the final IR from text; and a kernel compiled to interpret
loading no LLVM."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import EXAMPLES, ROOT, example_arch
from tmalang import stages
from tmalang.cli.main import EMITS, main
from tmalang.compiler import STAGES, Options, compile_ir, compile_source
from tmalang.ir.printer import print_ir

SAXPY = ROOT / "examples" / "saxpy.tma"


def test_the_compiler_binds_every_stage_name_in_order():
    assert tuple(s.name for s in STAGES) == stages.NAMES
    assert set(stages.PRINTED) <= set(stages.NAMES) and set(stages.FROM_IR) <= set(stages.NAMES)
    assert EMITS == (*stages.PRINTED, "header")


@pytest.mark.parametrize("until", stages.NAMES[:-1])
def test_until_stops_after_its_stage_and_fills_its_artifact(until):
    c = compile_source(SAXPY.read_text(), str(SAXPY), Options(), until=until)
    assert c.done == until
    for stage in STAGES:
        filled = bool(getattr(c, stage.fills))
        assert filled == (stages.NAMES.index(stage.name) <= stages.NAMES.index(until)), stage


def _without_lines(ptx: str) -> str:
    """PTX without its debug line table: from IR text, `.loc` points into the .ir file."""
    return "\n".join(line for line in ptx.splitlines() if not re.match(r"\s*(\.loc|\.file|//)", line))


@pytest.mark.parametrize("path", EXAMPLES[::4], ids=lambda p: p.stem)
def test_ir_text_enters_at_the_final_ir_and_makes_the_same_ptx(path):
    options = Options(arch=example_arch(path), watchdog=False)
    whole = compile_source(path.read_text(), str(path), options)
    entered = compile_ir(print_ir(whole.ir), "k.ir", Options(arch=example_arch(path), watchdog=False))
    assert entered.done == "ptx" and entered.manifest.ptx_params == whole.manifest.ptx_params
    assert _without_lines(entered.ptx) == _without_lines(whole.ptx)


def test_tmalangc_compiles_an_ir_file_to_ptx(tmp_path, capsys):
    ir = tmp_path / "saxpy.ir"
    assert main([str(SAXPY), "--emit", "ir", "-o", str(ir)]) == 0
    assert main([str(ir), "--emit", "ptx", "-o", str(tmp_path / "a.ptx")]) == 0
    assert main([str(SAXPY), "-o", str(tmp_path / "b.ptx")]) == 0
    assert _without_lines((tmp_path / "a.ptx").read_text()) == _without_lines((tmp_path / "b.ptx").read_text())
    assert ".loc\t1 " in (tmp_path / "a.ptx").read_text()   # lines of the .ir file


@pytest.mark.parametrize("argv, says", [
    (["--emit", "header"], "--emit header from IR text"),
    (["--emit", "ast"], "--emit ast from IR text"),
    (["--manifest", "m.json"], "--manifest needs the .tma source"),
    (["--explain"], "--explain needs the .tma source"),
])
def test_what_needs_the_source_is_refused_for_ir_text(tmp_path, capsys, argv, says):
    ir = tmp_path / "saxpy.ir"
    assert main([str(SAXPY), "--emit", "ir", "-o", str(ir)]) == 0
    with pytest.raises(SystemExit) as exit_:
        main([str(ir), *argv])
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_bad_ir_text_is_a_located_diagnostic(tmp_path, capsys):
    ir = tmp_path / "bad.ir"
    ir.write_text("kernel k {\n  frobnicate\n}\n")
    assert main([str(ir), "--emit", "ptx"]) == 1
    err = capsys.readouterr().err
    assert "bad.ir:" in err and "^" in err


def test_a_kernel_compiled_to_interpret_loads_no_llvm():
    code = ("import sys, numpy as np, tmalang\n"
            f"k = tmalang.compile_file({str(SAXPY)!r})\n"
            "x = np.random.rand(70, 72).astype(np.float32); y = np.random.rand(70, 72).astype(np.float32)\n"
            "out = np.zeros_like(x)\n"
            "k.interpret(np.float32(3.0), x, y, out)\n"
            "assert np.allclose(out, 3 * x + y)\n"
            "print('llvmlite' in sys.modules, 'tmalang.backend.codegen' in sys.modules)\n"
            "k.ptx\n"
            "print('llvmlite' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "False", "True"]

"""The whole-compile cache of tmalangc (tmalang/caches/whole_compile.py), `tmalangc cache info|clear`,
and the start-up it buys: a warm compile, like `import tmalang`, loads none of the compiler."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT
from tmalang.caches import whole_compile as compile_cache
from tmalang.cli.main import main

GEMM = str(ROOT / "examples" / "gemm_sm90.tma")
COPY = str(ROOT / "examples" / "tma_copy.tma")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(folder))
    return folder


def _python(code: str, env_cache) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (what a user's new process sees)."""
    env = {"PATH": "/usr/bin:/bin", "TMALANG_CACHE_DIR": str(env_cache), "HOME": str(env_cache)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd=ROOT)


def _loaded_after(argv: list[str], cache) -> set[str]:
    """The heavy modules a fresh process has loaded after `tmalangc ARGV`."""
    code = (f"import sys; from tmalang.cli.main import main; assert main({argv!r}) == 0; "
            "print(' '.join(m for m in ('tmalang.compiler', 'llvmlite', 'numpy', 'lark', 'tmalang.passes') "
            "if m in sys.modules))")
    run = _python(code, cache)
    assert run.returncode == 0, run.stderr
    return set(run.stdout.split())


def test_a_warm_compile_in_a_fresh_process_loads_no_compiler(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "g.ptx"
    cold = _loaded_after([GEMM, "-o", str(out)], cache)
    assert "tmalang.compiler" in cold and "llvmlite" in cold      # the first compile really compiled
    first = out.read_text()
    out.unlink()
    assert _loaded_after([GEMM, "-o", str(out)], cache) == set()   # the second read the cache
    assert out.read_text() == first


def test_a_cold_compile_loads_no_numpy_and_no_jinja2(tmp_path):
    # NumPy and ml_dtypes are for arrays (interpreter, runtime), jinja2 for the C++ header: a
    # compile to PTX needs none of them, and they were ~130 ms of a cold tmalangc.
    code = (f"import sys; from tmalang.cli.main import main; assert main([{GEMM!r}, '-o', {str(tmp_path / 'g.ptx')!r}]) == 0; "
            "print(' '.join(m for m in ('tmalang.compiler', 'numpy', 'ml_dtypes', 'jinja2') if m in sys.modules))")
    run = _python(code, tmp_path / "cache")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["tmalang.compiler"]


def test_import_tmalang_loads_no_compiler(tmp_path):
    run = _python("import sys, tmalang; print(tmalang.__version__, tmalang.get_include()); "
                  "print(sorted(m for m in ('numpy', 'llvmlite', 'lark', 'tmalang.api', 'tmalang.compiler') "
                  "if m in sys.modules))", tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "[]"
    run = _python("import tmalang; k = tmalang.compile_file('examples/saxpy.tma'); print(k.name)", tmp_path)
    assert run.stdout.strip() == "saxpy", run.stderr                # the lazy names still work


def test_the_answer_follows_every_input_of_the_key(cache_dir, tmp_path, capsys):
    source = tmp_path / "k.tma"
    source.write_text((ROOT / "examples" / "tma_copy.tma").read_text())
    assert main([str(source), "--emit", "ir"]) == 0
    ir = capsys.readouterr().out
    source.write_text(source.read_text().replace("ring[4]", "ring[3]"))
    assert main([str(source), "--emit", "ir"]) == 0
    assert capsys.readouterr().out != ir                             # new source, new answer
    assert main([str(source), "--emit", "ptx"]) == 0
    assert ".entry" in capsys.readouterr().out                       # the emit kind is in the key
    key = compile_cache.compile_key("src", "k.tma", {"arch": "sm_90a"}, None)
    assert key != compile_cache.compile_key("src", "k.tma", {"arch": "sm_100a"}, None)
    assert key != compile_cache.compile_key("src", "other.tma", {"arch": "sm_90a"}, None)


def test_an_edited_compiler_misses(monkeypatch):
    before = compile_cache.compile_key("src", "k.tma", {}, None)
    files = compile_cache._package_files()
    monkeypatch.setattr(compile_cache, "_package_files", lambda: files + (("passes/new.py", 1, 2),))
    assert compile_cache.compile_key("src", "k.tma", {}, None) != before


def test_the_manifest_comes_from_the_cache_too(cache_dir, tmp_path):
    for run in range(2):
        manifest = tmp_path / f"m{run}.json"
        assert main([COPY, "-o", str(tmp_path / "k.ptx"), "--manifest", str(manifest)]) == 0
        assert json.loads(manifest.read_text())["kernel"] == "tma_copy"
    assert (tmp_path / "m0.json").read_text() == (tmp_path / "m1.json").read_text()


def test_reports_on_the_compile_always_compile(cache_dir, capsys):
    assert main([COPY, "-o", "/dev/null"]) == 0
    assert main([COPY, "-o", "/dev/null", "--time-passes"]) == 0
    assert "total to ptx" in capsys.readouterr().err


def test_cache_off_stores_nothing(cache_dir, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE", "0")
    assert main([COPY, "-o", "/dev/null"]) == 0
    assert not cache_dir.exists() or not any(cache_dir.iterdir())


def test_cache_info_and_clear(cache_dir, capsys):
    assert main([COPY, "-o", "/dev/null"]) == 0
    assert main([COPY, "--emit", "ir", "-o", "/dev/null"]) == 0
    capsys.readouterr()
    (cache_dir / "parser-0123.pickle").write_bytes(b"tables")   # as syntax/tables.py keeps them
    assert main(["cache", "info"]) == 0
    info = capsys.readouterr().out
    assert str(cache_dir) in info and "entries: 2 of at most 1000" in info and "XDG_CACHE_HOME" in info
    assert "parser:  1 table file(s)" in info or "parser:  2 table file(s)" in info   # beside the entries
    assert main(["cache", "clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert not list(cache_dir.glob("parser-*.pickle"))
    assert main(["cache", "info"]) == 0
    assert "entries: 0" in capsys.readouterr().out


def test_cache_needs_an_action():
    with pytest.raises(SystemExit) as exc:
        main(["cache", "empty"])
    assert exc.value.code == 2

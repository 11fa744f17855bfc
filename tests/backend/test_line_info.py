"""Line info: the PTX names the user's .tma file and lines (`.file`, `.loc`), the cubin keeps them as
a line table, and none of it changes the code (backend/line_info.py)."""

from __future__ import annotations

import re
import struct

import pytest

from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.backend.line_info import strip_line_info
from tmalang.compiler import Options, compile_source

KERNELS = [("gemm_sm90", "sm_90a"), ("gemm_sm100", "sm_100a")]
needs_ptxas = pytest.mark.skipif(ptxas.find_ptxas() is None, reason="no ptxas")


def _compile(name: str, arch: str, until: str = "ptx"):
    path = ROOT / "examples" / f"{name}.tma"
    return path, compile_source(path.read_text(), str(path.relative_to(ROOT)), Options(arch=arch), until=until)


def _loc_lines(ptx: str) -> set[int]:
    return {int(n) for n in re.findall(r"^\s*\.loc\s+1\s+(\d+)\s+\d+", ptx, re.MULTILINE)}


def _statement_lines(text: str, pattern: str) -> list[int]:
    """The lines (1-based) whose code, comments left out, matches `pattern`."""
    return [i for i, line in enumerate(text.splitlines(), 1) if re.search(pattern, line.split("//")[0])]


def elf_sections(data: bytes) -> dict[str, bytes]:
    """Section name -> contents of a 64-bit little-endian ELF (a cubin)."""
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF"
    (table,) = struct.unpack_from("<Q", data, 0x28)
    size, count, names_at = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, table + i * size) for i in range(count)]

    def contents(h):   # SHT_NOBITS (8) holds no bytes in the file
        return b"" if h[1] == 8 else data[h[4]:h[4] + h[5]]

    names = contents(heads[names_at])
    return {names[h[0]:names.index(b"\0", h[0])].decode(): contents(h) for h in heads}


@pytest.mark.parametrize("name,arch", KERNELS)
def test_ptx_names_the_source_file(name, arch, monkeypatch):
    monkeypatch.chdir(ROOT)
    path, c = _compile(name, arch)
    files = re.findall(r'^\s*\.file\s+1\s+"([^"]*)"', c.ptx, re.MULTILINE)
    assert files == [str(path)], files   # the relative name, resolved from the current directory


@pytest.mark.parametrize("name,arch", KERNELS)
def test_loc_lines_are_the_statements_that_emit_code(name, arch):
    path, c = _compile(name, arch)
    text = path.read_text()
    lines = _loc_lines(c.ptx) - {0}   # 0: an instruction LLVM merged from several lines
    assert lines, "no .loc directives"
    code = {i for i, line in enumerate(text.splitlines(), 1) if line.split("//")[0].strip()}
    assert lines <= code, f"lines without code: {sorted(lines - code)}"
    for statement in (r"^\s*load\b", r"\bstore\b", r"\bmma\b", r"\bconsume\b"):
        found = _statement_lines(text, statement)
        assert found, statement
        assert set(found) <= lines, f"{statement}: lines {found} not in .loc {sorted(lines)}"


def test_ptx_keeps_the_directives_only_form():
    """No DWARF sections and no `.target ..., debug`: ptxas must optimise as without line info."""
    _, c = _compile("gemm_sm90", "sm_90a")
    assert re.search(r"^\.target sm_90a$", c.ptx, re.MULTILINE)
    assert not re.search(r"\.section\s+\.debug_(info|abbrev|line|str|loc|ranges)", c.ptx)


def test_llvm_ir_carries_locations():
    _, c = _compile("gemm_sm90", "sm_90a")
    assert "emissionKind: DebugDirectivesOnly" in c.llvm_ir
    assert re.search(r"!DISubprogram\(.*name: \"gemm\"", c.llvm_ir)
    assert re.search(r"!DILocation\(.*line: 25\b", c.llvm_ir)   # load A[m, k] -> s.a


@needs_ptxas
@pytest.mark.parametrize("name,arch", KERNELS)
def test_cubin_has_a_line_table_and_the_same_sass(name, arch):
    _, c = _compile(name, arch)
    cubin, stats = ptxas.assemble(c.ptx, arch)
    plain, plain_stats = ptxas.assemble(strip_line_info(c.ptx), arch)
    sections, without = elf_sections(cubin), elf_sections(plain)
    assert ".debug_line" in sections and ".nv_debug_line_sass" in sections
    code = {k: v for k, v in sections.items() if k.startswith(".text.")}
    assert code and code == {k: v for k, v in without.items() if k.startswith(".text.")}
    assert stats.registers == plain_stats.registers


SAXPY = (ROOT / "examples" / "saxpy.tma").read_text()


def test_a_source_string_is_named_string():
    c = compile_source(SAXPY, options=Options(arch="sm_90a"))
    assert re.findall(r'^\s*\.file\s+1\s+"([^"]*)"', c.ptx, re.MULTILINE) == ["<string>"]
    assert _loc_lines(c.ptx) - {0}


@needs_ptxas
def test_ptxas_accepts_a_source_string():
    c = compile_source(SAXPY, options=Options(arch="sm_90a"))
    cubin, _ = ptxas.assemble(c.ptx, "sm_90a")
    assert ".debug_line" in elf_sections(cubin)


def test_strip_line_info_gives_the_ptx_of_another_file_s_kernel():
    """Two files with one kernel on different lines differ only in line info."""
    shifted = "// one more line\n" + SAXPY
    a = compile_source(SAXPY, "a.tma", Options(arch="sm_90a")).ptx
    b = compile_source(shifted, "b.tma", Options(arch="sm_90a")).ptx
    assert a != b and strip_line_info(a) == strip_line_info(b)


def test_a_file_name_with_a_quote_or_backslash_still_assembles():
    source = (ROOT / "examples" / "tma_copy.tma").read_text()
    c = compile_source(source, 'my "odd"\\name.tma', Options(), until="cubin")
    assert '.file\t1 "' in c.ptx and 'my _odd__name.tma"' in c.ptx
    assert c.cubin[:4] == b"\x7fELF"


def test_a_line_longer_than_llvm_s_column_field_still_compiles():
    """DILocation's column is 16 bits: a statement past column 65,535 keeps its line, column 0."""
    source = (ROOT / "examples" / "tma_copy.tma").read_text()
    statement = "consume ring as s"
    line = next(i for i, text in enumerate(source.splitlines(), 1) if statement in text)
    long_source = source.replace(" " * 12 + statement, " " * 70_000 + statement)
    assert max(len(text) for text in long_source.splitlines()) > 65_535
    ptx = compile_source(long_source, "long.tma", Options(arch="sm_90a")).ptx
    columns = {int(col) for col in re.findall(rf"^\s*\.loc\s+1\s+{line}\s+(\d+)", ptx, re.MULTILINE)}
    assert columns == {0}, columns
    assert strip_line_info(ptx) == strip_line_info(compile_source(source, "short.tma", Options(arch="sm_90a")).ptx)


@needs_ptxas
def test_ptxas_accepts_a_line_longer_than_llvm_s_column_field():
    source = "// " + "x" * 70_000 + "\n" + SAXPY.replace("kernel ", " " * 70_000 + "kernel ", 1)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.lstrip().startswith("kernel "))
    c = compile_source(source, "long.tma", Options(arch="sm_90a"), until="cubin")
    assert re.search(rf"^\s*\.loc\s+1\s+{line}\s+0\b", c.ptx, re.MULTILINE)
    assert ".debug_line" in elf_sections(c.cubin)

"""What keeps a cold compile fast, checked without timing anything:

* a parse needs no lark parser: the parse table and rules come from a pickle in the cache, and
  the contextual lexer scans terminal by terminal instead of compiling a union regex per parser
  state (syntax/scanner.py, syntax/tables.py); trees, tokens, positions and errors are lark's;
* codegen's builder folds constant arithmetic and keeps stack slots in the block, and the
  registers of a many-output inline asm are a named struct (backend/builder.py, codegen.py), so
  LLVM gets a lean module; the PTX is what llvmlite's plain builder gives.
"""

from __future__ import annotations

import gc
import os
import pickle
import random
import re
import subprocess
import sys

import lark
import pytest
from llvmlite import ir

from conftest import ROOT
from tmalang.backend import codegen
from tmalang.backend.builder import KernelBuilder
from tmalang.compiler import Options, compile_source
from tmalang.ir import ops
from tmalang.syntax import parser as tma_parser

SOURCES = sorted(p for p in ROOT.rglob("*.tma") if not {".venv", "_gpu", ".ctime"} & set(p.parts))
GRAMMAR = tma_parser.grammar_path("tmalang.lark").read_text()
I32 = ir.IntType(32)


def _compile(name: str, arch: str, until: str = "ptx"):
    path = ROOT / "examples" / f"{name}.tma"
    return compile_source(path.read_text(), str(path.relative_to(ROOT)), Options(arch=arch), until=until)


# ---- the parser


def test_a_parse_builds_no_lark_parser(tmp_path):
    """The second process to parse finds the tables in the cache, and never builds lark's parser."""
    code = ("from tmalang.syntax import parser as P; P.parse(open('examples/gemm_sm90.tma').read()); "
            "print(P._parser.cache_info().currsize)")
    env = {**os.environ, "TMALANG_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=300) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["1", "0"], [r.stderr for r in runs]
    kept = [tma_parser._tables_file(GRAMMAR), tma_parser._lark_file(GRAMMAR)]   # lark's for syntax errors
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in kept)


def test_the_tables_are_read_once_per_process():
    assert tma_parser._tables() is tma_parser._tables()


def test_no_tables_are_kept_with_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TMALANG_CACHE", "0")
    assert tma_parser._tables_file(GRAMMAR) is None


@pytest.mark.parametrize("damage", ["garbage", "group-writable"])
def test_damaged_tables_are_rebuilt(damage, tmp_path, monkeypatch):
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tma_parser, "_tables", tma_parser._tables.__wrapped__)
    path = tma_parser._tables_file(GRAMMAR)
    path.write_bytes(b"not a pickle" if damage == "garbage" else pickle.dumps(None))
    if damage == "group-writable":
        path.chmod(0o664)
    tables = tma_parser._tables()
    assert tables.callbacks and pickle.loads(path.read_bytes()).states == tables.states


def test_every_state_scans_terminal_by_terminal():
    lexer = tma_parser._parser().parser.lexer
    lexers = [*lexer.lexers.values(), lexer.root_lexer]
    assert lexers and all(type(each) is tma_parser._TerminalByTerminalLexer for each in lexers)


def _outcome(parser: lark.Lark, text: str):
    """Every token (type, text, position) and node position of the parse, or the error and what it says."""
    try:
        tree = parser.parse(text)
    except lark.UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        return (type(exc).__name__, exc.line, exc.column, token, token and token.type,
                sorted(getattr(exc, "expected", ()) or ()), sorted(getattr(exc, "allowed", ()) or ()))
    return _described(tree)


def _described(tree: lark.Tree):
    tokens = [(t.type, str(t), t.line, t.column, t.end_line, t.end_column, t.start_pos, t.end_pos)
              for t in tree.scan_values(lambda v: isinstance(v, lark.Token))]
    return tree, tokens, [(node.data, vars(node.meta)) for node in tree.iter_subtrees()]


def _edits(text: str, count: int, rng: random.Random):
    """`text`, and `count` copies with one random edit each (most of them syntax errors)."""
    pieces = list("az_09{}()[],.:=+-*/%&<>@#!\" \n") + ["load", "store", "..", "->", "128B", "2x2", "1.5", "tile", "//"]
    yield text
    for _ in range(count):
        at = rng.randrange(len(text))
        yield text[:at] + rng.choice(pieces) + text[at + rng.randrange(3):]


@pytest.fixture(scope="module")
def stock() -> lark.Lark:
    """lark's own parser and contextual lexer for the grammar."""
    return lark.Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=True)   # no pickle in /tmp


@pytest.mark.slow   # every source and its cut, junk and keyword variants through both lexers
def test_the_scanner_lexes_as_lark_does(stock):
    """The lark parser tmalang builds (for its errors) against lark's own: the same tokens, trees and
    errors, for every source in the repository and edited copies of each."""
    ours = tma_parser._parser()
    rng = random.Random(1)
    assert len(SOURCES) > 50
    for path in SOURCES:
        for text in _edits(path.read_text(), 2, rng):
            assert _outcome(ours, text) == _outcome(stock, text), path


@pytest.mark.slow   # every source and its variants through both parsers
def test_the_fast_parse_gives_lark_s_tree(stock):
    """The parse without lark's parser: lark's tree, tokens and positions where lark parses, None
    (lark's turn, for the error) exactly where lark raises."""
    rng = random.Random(2)
    for path in SOURCES:
        for text in _edits(path.read_text(), 3, rng):
            fast = tma_parser._fast_tree(text)
            try:
                tree = stock.parse(text)
            except lark.UnexpectedInput:
                assert fast is None, path
                continue
            assert fast is not None and _described(fast) == _described(tree), path


# ---- the builder


def _function():
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I32]), "f")
    b = KernelBuilder(fn.append_basic_block("entry"))
    return fn, b


def test_constant_arithmetic_folds():
    fn, b = _function()
    x = fn.args[0]
    assert b.add(x, I32(0)) is x and b.add(I32(0), x) is x and b.sub(x, I32(0)) is x
    assert b.mul(x, I32(1)) is x and b.mul(I32(1), x) is x
    assert b.shl(x, I32(0)) is x and b.lshr(x, I32(0)) is x and b.or_(I32(0), x) is x and b.xor(x, I32(0)) is x
    assert b.mul(I32(3), I32(4)).constant == 12
    assert b.sub(I32(1), I32(2)).constant == 0xFFFFFFFF          # wraps at the width
    assert b.lshr(I32(-1 & 0xFFFFFFFF), I32(28)).constant == 15   # logical
    assert isinstance(b.shl(I32(1), I32(32)), ir.Instruction)     # poison: LLVM's to decide
    assert isinstance(b.sub(I32(0), x), ir.Instruction)           # 0 - x is no identity
    assert [i.opname for i in b.block.instructions] == ["shl", "sub"]


def test_slots_keep_their_value_in_the_block():
    fn, b = _function()
    slot = b.alloca(I32)
    first = b.load(slot)
    assert b.load(slot) is first                     # loaded once
    b.store(b.add(fn.args[0], I32(1)), slot)
    value = b.add(fn.args[0], I32(2))
    b.store(value, slot)                             # overwrites the store before it
    assert b.load(slot) is value
    b.ret_void()
    text = str(fn)
    assert text.count("load") == 1 and text.count("store") == 1
    assert text.index("store") < text.index("ret void")   # the block's last store, before it ends


def test_a_slot_is_written_when_the_builder_leaves_the_block():
    fn, b = _function()
    slot = b.alloca(I32)
    b.store(fn.args[0], slot)
    other = fn.append_basic_block("other")
    b.branch(other)
    b.position_at_end(other)
    assert isinstance(b.load(slot), ir.LoadInstr)    # another block loads it again
    b.ret_void()
    assert str(fn).count("store") == 1


def test_an_escaped_slot_is_not_tracked():
    fn, b = _function()
    slot = b.alloca(I32)
    b.store(fn.args[0], slot)
    address = b.ptrtoint(slot, ir.IntType(64))       # the address escapes: the store goes first
    assert isinstance(b.load(slot), ir.LoadInstr) and isinstance(b.load(slot), ir.LoadInstr)
    b.ret_void()
    lines = str(fn).splitlines()
    assert [i for i, line in enumerate(lines) if "store" in line][0] < \
           [i for i, line in enumerate(lines) if "ptrtoint" in line][0]
    assert address is not None


# ---- the module LLVM gets


def test_gemm_module_is_lean():
    llvm_ir = _compile("gemm_sm90", "sm_90a", until="ll").llvm_ir
    assert "extractvalue {" not in llvm_ir                          # the registers' struct is named
    assert not re.search(r"= (add|sub|or|xor|shl|lshr) i\d+ [^,]+, 0\b", llvm_ir)
    assert not re.search(r"= mul i\d+ -?\d+, -?\d+", llvm_ir)
    for block in re.split(r"\n(?=\S+:)", llvm_ir):                  # each slot loaded at most once a block
        loads = re.findall(r"= load \S+, \S+ (%\S+)", block)
        assert len(loads) == len(set(loads)), block.splitlines()[0]


@pytest.mark.parametrize("name,arch", [("gemm_sm90", "sm_90a"), ("attention_sm100", "sm_100a"),
                                       ("gemm_bias_relu_sm90", "sm_90a")])
def test_the_builder_changes_no_ptx(name, arch, monkeypatch):
    lean = _compile(name, arch).ptx
    monkeypatch.setattr(codegen, "KernelBuilder", ir.IRBuilder)
    assert _compile(name, arch).ptx == lean


def test_codegen_pauses_the_cycle_collector(monkeypatch):
    """No full collection while emitting (it walked the whole heap for nothing, ~20 ms); the
    collector is left as it was found."""
    seen = []
    emit_role = codegen.EMITTERS[ops.RoleOp]
    monkeypatch.setitem(codegen.EMITTERS, ops.RoleOp, lambda g, o: (seen.append(gc.isenabled()), emit_role(g, o)))
    assert gc.isenabled()
    _compile("tma_copy", "sm_90a", until="ll")
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        _compile("tma_copy", "sm_90a", until="ll")
        assert not gc.isenabled()
    finally:
        gc.enable()

"""The parser's pickles are loaded only from tmalang's cache folder, and only when they are the
user's own (syntax/lark_parser.py, syntax/tables.py, tmalang/caches/disk.py): unpickling runs whatever the file says, so a file
another user could have written must never be unpickled.

Each planted pickle here, when unpickled, creates a flag file; the tests assert it never appears."""

from __future__ import annotations

import os
import pickle
import tempfile

import lark
import pytest

from tmalang.caches import disk as cache
from tmalang.diagnostics import TmalangError
from tmalang.syntax import parser as tma_parser

GRAMMAR = tma_parser.grammar_path("tmalang.lark").read_text()
TYPO = "kernel k(x: f32[M]) {\n    box X = x[64 }\n}\n"   # a syntax error: lark's parser words it


class _Planted:
    """A pickle that, when loaded, runs code: it creates the file `flag`."""

    def __init__(self, flag):
        self.flag = str(flag)

    def __reduce__(self):
        return exec, (f"open({self.flag!r}, 'w').close()",)


def _planted(flag) -> bytes:
    return pickle.dumps(_Planted(flag))


def _syntax_error() -> TmalangError:
    with pytest.raises(TmalangError) as caught:
        tma_parser.parse(TYPO, "typo.tma")
    return caught.value


@pytest.fixture
def fresh_parser(tmp_path, monkeypatch):
    """A process that has built neither lark's parser nor the tables, with its own cache folder;
    each call of _parser and _tables makes them again (they are cached no longer)."""
    monkeypatch.setenv("TMALANG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TMALANG_CACHE", raising=False)
    monkeypatch.setattr(tma_parser, "_parser", tma_parser._parser.__wrapped__)
    monkeypatch.setattr(tma_parser, "_tables", tma_parser._tables.__wrapped__)
    monkeypatch.setattr(tma_parser, "_literal_terminals", tma_parser._literal_terminals.__wrapped__)
    return tmp_path


@pytest.mark.parametrize("cache_setting", ["on", "off"])
def test_a_pickle_planted_at_lark_s_temp_folder_name_is_never_loaded(cache_setting, fresh_parser, monkeypatch):
    """lark's own cache (cache=True) reads <tmp>/.lark_cache_<user>_<hash>_... without asking who
    wrote it. Plant a pickle at exactly that name (lark writes its cache there first, so the name
    is the one tmalang's old call would read) and make a typo: nothing there may be read or written."""
    shared = fresh_parser / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    lark.Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=True, cache=True)   # tmalang's old call
    (predictable,) = shared.iterdir()
    assert predictable.name.startswith(".lark_cache_")
    flag = fresh_parser / "planted-pickle-ran"
    predictable.write_bytes(b"the hash line\n" + _planted(flag))
    if cache_setting == "off":
        monkeypatch.setenv("TMALANG_CACHE", "0")

    assert _syntax_error().code in ("E001", "E002", "E003")
    assert not flag.exists(), "the planted pickle in the temp folder was unpickled"
    assert list(shared.iterdir()) == [predictable]   # and no other file of lark's appeared there


@pytest.mark.parametrize("which", ["lark", "tables"])
@pytest.mark.parametrize("flaw", ["world-writable", "group-writable", "another user's", "a link"])
def test_a_parser_pickle_that_is_not_the_user_s_own_is_ignored(which, flaw, fresh_parser, monkeypatch):
    """A pickle in tmalang's cache folder that another user owns, or may have written, is not
    unpickled: the parser is built anew and the file replaced by the user's own (0600)."""
    path = (tma_parser._lark_file if which == "lark" else tma_parser._tables_file)(GRAMMAR)
    path.parent.mkdir(parents=True)
    flag = fresh_parser / "planted-pickle-ran"
    if flaw == "a link":   # to a file of the user's own: the link itself may be another's
        target = fresh_parser / "elsewhere.pickle"
        target.write_bytes(_planted(flag))
        target.chmod(0o600)
        path.symlink_to(target)
    else:
        path.write_bytes(_planted(flag))
        path.chmod({"world-writable": 0o602, "group-writable": 0o620}.get(flaw, 0o600))
    if flaw == "another user's":   # this process is someone else, as far as the check can tell
        real = os.getuid()
        monkeypatch.setattr(cache.os, "getuid", lambda: real + 1)

    assert _syntax_error().code in ("E001", "E002", "E003")
    assert not flag.exists(), f"a {flaw} pickle was unpickled"
    monkeypatch.undo()   # the real user again: the rebuilt file is theirs alone, and it loads
    assert not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600
    assert cache.read_own_file(path) is not None


def test_the_user_s_own_lark_pickle_is_loaded(fresh_parser, monkeypatch):
    """The other side of the check: a pickle of the user's own is what the next process loads."""
    _syntax_error()
    path = tma_parser._lark_file(GRAMMAR)
    assert path.is_file()
    built = []
    monkeypatch.setattr(tma_parser.lark, "Lark", _counting(lark.Lark, built))
    assert _syntax_error().code in ("E001", "E002", "E003")
    assert built == []   # loaded, not built


def _counting(cls, built: list):
    class Counting(cls):
        def __init__(self, *args, **kwargs):
            built.append(args)
            super().__init__(*args, **kwargs)
    return Counting

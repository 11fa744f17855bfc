"""lark's own LALR parser for grammar/tmalang.lark, and where tmalang keeps parser pickles. A
valid program is parsed without it (syntax/tables.py); it is built, or loaded from tmalang's cache
folder, only for a syntax error's message and to make the parse tables. `cache_file` names every
parser pickle (this one and the tables) by everything its content depends on; syntax/parser.py
holds the per-process instance (`_parser`), so that there is one to reset."""

from __future__ import annotations

import hashlib
import io
import os
import sys
from pathlib import Path

import lark

from ..caches.disk import default_root, read_own_file, write_own_file

LARK_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": True}


def grammar_path(name: str) -> Path:
    """The grammar ships inside the wheel (tmalang/grammar); a source checkout keeps it in grammar/."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "grammar" / name
    return packaged if packaged.is_file() else package.parent / "grammar" / name


def load_or_build_lark() -> lark.Lark:
    """lark's parser for tmalang.lark: kept in tmalang's cache folder beside the tables (a fresh
    build takes 0.1-0.5 s, a load 15 ms) and loaded only when the file is the user's own.
    Not lark's `cache=True`: that unpickles whatever file has a predictable name in the shared temp
    folder, so another user could plant one and run code as whoever makes a typo."""
    text = grammar_path("tmalang.lark").read_text()
    path = lark_file(text)
    parser = _load_lark(path) if path is not None else None
    if parser is None:
        parser = lark.Lark(text, **LARK_OPTIONS)
        if path is not None:
            saved = io.BytesIO()
            parser.save(saved)
            write_own_file(path, saved.getvalue())
    return parser


def lark_file(grammar: str) -> Path | None:
    return cache_file("parser-lark", grammar, repr(sorted(LARK_OPTIONS.items())))


def _load_lark(path: Path) -> lark.Lark | None:
    data = read_own_file(path)
    if data is None:
        return None
    try:
        return lark.Lark.load(io.BytesIO(data))
    except Exception:   # damaged (whatever unpickling says): built anew
        return None


def cache_file(kind: str, grammar: str, form: str) -> Path | None:
    """A parser pickle's place, in tmalang's cache folder as tmalang/caches/disk.py finds it
    (TMALANG_CACHE_DIR, else $XDG_CACHE_HOME/tmalang, else ~/.cache/tmalang; beside its entries,
    which are two-letter folders), named by everything the pickle depends on; None under
    TMALANG_CACHE=0."""
    if os.environ.get("TMALANG_CACHE", "1") == "0":
        return None
    key = hashlib.sha256("\0".join([grammar, lark.__version__, sys.version, form]).encode())
    return default_root() / f"{kind}-{key.hexdigest()[:24]}.pickle"

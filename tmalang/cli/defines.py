"""`-D NAME=VALUE`: compile-time constants bound on the command line (`tmalangc` and `tmalangc run`).

A value that reads as an integer binds an integer; any other text is passed on as it is, so that
the compiler names the constant and the kernel in its error (E542) rather than argparse."""

from __future__ import annotations

import argparse
import re

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_INT = re.compile(r"-?[0-9]{1,19}")


def add_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("-D", dest="defines", metavar="NAME=VALUE", action="append", default=[],
                   help="bind a compile-time constant of the kernel, e.g. -D BM=128 or -D T=f16 (docs/language.md §2a)")


def parse(parser: argparse.ArgumentParser, items: list[str]) -> dict[str, int | str]:
    """NAME=VALUE items as bindings; a malformed item or a name given twice is a usage error (exit 2)."""
    bound: dict[str, int | str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not _NAME.fullmatch(name) or not value:
            parser.error(f"-D: expected NAME=VALUE, got '{item}'")
        if name in bound:
            parser.error(f"-D: '{name}' is bound twice")
        bound[name] = int(value) if _INT.fullmatch(value) else value
    return bound

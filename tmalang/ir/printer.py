"""IR → text. One op per line; `{` opens its region, `}` on its own line closes it.

    mbar_wait barrier=@ring.full[(%ring.it % 4)] parity=((%ring.it / 4) & 1)

An op whose first field is `symbol` prints it positionally as `@name`. A field declared with a
default (an optional modifier, e.g. tma_store's `reduce`, or an empty list such as tma_load's
`offsets`) is left out while it holds that default,
so ops without the modifier print as they always did.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, fields

from ..targets.tma_modes import Im2col
from .ops import Op

RECORDS = (Im2col,)   # the records an op field may hold (a TMA mode's own), printed as `{...}`

_BARE = re.compile(r"^[A-Za-z0-9_.:\-]+$")


def format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, RECORDS):   # a mode's own record: `{name=value ...}`, defaults left out
        shown = [f"{f.name}={format_value(getattr(value, f.name))}" for f in fields(value)
                 if getattr(value, f.name) != _default(f)]
        return "{" + " ".join(shown) + "}"
    if isinstance(value, str):
        return value if _BARE.match(value) else '"' + value.replace('"', '\\"') + '"'
    return str(value)


def _default(f):
    """A field's default value (a list field's is made by its factory), or MISSING."""
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


def print_op(o: Op, indent: int = 0) -> list[str]:
    pad = "  " * indent
    parts = [o.name]
    regions = []
    for f in o.operand_fields():
        value = getattr(o, f.name)
        if f.type == "list[Op]":
            regions.append(value)
        elif value == _default(f):
            continue
        elif f.name == "symbol":
            parts.append(f"@{value}")
        else:
            parts.append(f"{f.name}={format_value(value)}")
    if not regions:
        return [pad + " ".join(parts)]
    lines = [pad + " ".join(parts) + " {"]
    for region in regions:
        for child in region:
            lines += print_op(child, indent + 1)
    lines.append(pad + "}")
    return lines


def print_ir(ops: list[Op] | Op) -> str:
    ops = [ops] if isinstance(ops, Op) else ops
    return "\n".join(line for o in ops for line in print_op(o)) + "\n"


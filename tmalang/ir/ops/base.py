"""The root of every op: the `Op` base class, the registry of op names (`OPS`, filled by the `op`
decorator that each family module applies to its classes), and the generic walk over regions.
Nothing here knows any particular op; every family module of the package builds on it.
"""

from __future__ import annotations

import functools
from dataclasses import Field, dataclass, field, fields

from ...diagnostics import Span


@dataclass
class Op:
    span: Span | None = field(default=None, kw_only=True, repr=False, compare=False)

    name = "op"

    @classmethod
    def operand_fields(cls) -> tuple[Field, ...]:
        """The fields but the span, in declaration order."""
        return _operand_fields(cls)

    def regions(self) -> list[list[Op]]:
        return [getattr(self, name) for name in _region_names(type(self))]

    def expressions(self):
        """The op's expression operands (index math, tile math, buffer stages), in field order."""
        for f in _operand_fields(type(self)):
            value = getattr(self, f.name)
            if f.type in ("Expr", "BufferRef", "BufferRef | None") and value is not None:
                yield value
            elif f.type == "list[Expr]":
                yield from value


# Once per class: dataclasses.fields() builds its tuple anew at each call, and the verifier, the
# printer and every walk ask for the fields of each op after each pass.
@functools.cache
def _operand_fields(cls: type[Op]) -> tuple[Field, ...]:
    return tuple(f for f in fields(cls) if f.name != "span")


@functools.cache
def _region_names(cls: type[Op]) -> tuple[str, ...]:
    return tuple(f.name for f in _operand_fields(cls) if f.type == "list[Op]")


OPS: dict[str, type[Op]] = {}


def op(name: str):
    def register(cls):
        cls.name = name
        OPS[name] = cls
        return cls
    return register


def walk(ops: list[Op]):
    """Every op in a region, parents before children."""
    for o in ops:
        yield o
        for region in o.regions():
            yield from walk(region)

"""TMA reduce (`reduce OP T[c..] <- src`): the operation must be one of the eight, and the
tensor's element type one that operation accepts (target/reduce.py, from the PTX ISA)."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..target.dtypes import DTYPES, DType
from ..target.reduce import REDUCE_OPS, UNKNOWN_OP
from .declarations import Box


def check(s: ast.Store, box: Box) -> None:
    op = REDUCE_OPS.get(s.reduce)
    if op is None:
        raise error(UNKNOWN_OP, f"unknown reduce operation '{s.reduce}'", s.reduce_span,
                    f"TMA reduces with one of: {', '.join(REDUCE_OPS)}")
    dtype = box.dtype
    if dtype.tma not in op.types:
        accepted = [d.name for d in DTYPES.values() if d.tma in op.types and d.kind != "fp8"]
        raise error(op.code, f"TMA reduce '{op.name}' does not take {dtype.name} elements "
                    f"(tensor '{box.tensor.name}')", s.span, _hint(op.name, dtype, accepted))


def _hint(op: str, dtype: DType, accepted: list[str]) -> str:
    hint = f"'{op}' reduces {', '.join(accepted)}"
    if op == "add" and dtype.name == "i64":
        hint += "; two's-complement addition is the same on u64, so declare the tensor u64"
    elif op in ("and", "or", "xor") and dtype.name == "i64":
        hint += "; the bits are the same on u64, so declare the tensor u64"
    elif dtype.itemsize < 4 and dtype.kind != "float":
        hint += f"; TMA moves {dtype.name} as unsigned {8 * dtype.itemsize}-bit data, which no reduce takes"
    return hint

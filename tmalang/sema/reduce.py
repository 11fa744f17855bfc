"""TMA reduce (`reduce OP T[c..] <- src`): the operation must be one of the eight, and the
tensor's element type one that operation accepts (targets/reduce.py, from the PTX ISA)."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets.dtypes import DTYPES, DType
from ..targets.reduce import REDUCE_OPS, UNKNOWN_OP
from .declarations import Box


def check(s: ast.Store, box: Box) -> None:
    check_operation(s)
    op, dtype = REDUCE_OPS[s.reduce], box.dtype
    if dtype.tma not in op.types:
        accepted = [d.name for d in DTYPES.values() if d.tma in op.types and d.kind != "fp8"]
        raise error(op.code, f"TMA reduce '{op.name}' does not take {dtype.name} elements "
                    f"(tensor '{box.tensor.name}')", s.span, hint(op.name, dtype, accepted, tensor_map=True))


def check_operation(s: ast.Store) -> None:
    """E440 for an operation outside the eight (tensor and bulk reduces name the same ones)."""
    if s.reduce not in REDUCE_OPS:
        raise error(UNKNOWN_OP, f"unknown reduce operation '{s.reduce}'", s.reduce_span,
                    f"TMA reduces with one of: {', '.join(REDUCE_OPS)}")


def hint(op: str, dtype: DType, accepted: list[str], tensor_map: bool) -> str:
    """What `op` takes, and the way out for a dtype it refuses: u64 has the same bits as i64 for
    add (and, through a tensor map, for the bitwise operations, which fault on an INT64 map)."""
    text = f"'{op}' reduces {', '.join(accepted)}"
    if dtype.name == "i64" and "u64" in accepted and (op == "add" or tensor_map and op in ("and", "or", "xor")):
        same = "two's-complement addition is" if op == "add" else "the bits are"
        text += f"; {same} the same on u64, so declare the tensor u64"
    elif tensor_map and dtype.itemsize < 4 and dtype.kind != "float":
        text += f"; TMA moves {dtype.name} as unsigned {8 * dtype.itemsize}-bit data, which no reduce takes"
    return text

"""TMA reduce (`cp.reduce.async.bulk.tensor`): the eight operations and the element types each
accepts, with the diagnostic code sema raises for a type the operation refuses.

Source: PTX ISA, cp.reduce.async.bulk.tensor, "valid combinations of .redOp and element type".
The instruction has no type suffix: the element type is the tensor map's data type, so the
table is keyed by CU_TENSOR_MAP_DATA_TYPE_* (targets/dtypes.py `DType.tma`), which is what the
hardware sees; i16, i8 and the fp8 types travel as unsigned maps and reduce under no operation.

    .add             .u32 .s32 .u64 .f32 .f16 .bf16
    .min .max        .u32 .s32 .u64 .s64 .f16 .bf16
    .inc .dec        .u32
    .and .or .xor    .b32 .b64      (here: INT32, UINT32 and UINT64 maps)

Measured on the H100 (tests/e2e/test_reduce.py, 2026-11-23): and/or/xor through an INT64 tensor map
assemble (ptxas accepts the instruction, which names no type) but fault at run time with
CUDA_ERROR_ILLEGAL_INSTRUCTION, while the same bits through a UINT64 map reduce correctly; an
INT32 map works. So the bitwise operations refuse i64 (a bitwise result is the same on u64).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReduceOp:
    name: str
    code: str                 # the diagnostic for an element type outside `types`
    types: tuple[str, ...]    # tensor-map data types (CU_TENSOR_MAP_DATA_TYPE_ suffixes)


_ADD = ("UINT32", "INT32", "UINT64", "FLOAT32", "FLOAT16", "BFLOAT16")
_MIN_MAX = ("UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "BFLOAT16")
_BITS = ("UINT32", "INT32", "UINT64")   # not INT64: an illegal instruction on the H100 (above)

REDUCE_OPS = {o.name: o for o in (
    ReduceOp("add", "E441", _ADD),
    ReduceOp("min", "E442", _MIN_MAX),
    ReduceOp("max", "E442", _MIN_MAX),
    ReduceOp("inc", "E443", ("UINT32",)),
    ReduceOp("dec", "E443", ("UINT32",)),
    ReduceOp("and", "E444", _BITS),
    ReduceOp("or", "E444", _BITS),
    ReduceOp("xor", "E444", _BITS),
)}
UNKNOWN_OP = "E440"


# Bulk reduce (`cp.reduce.async.bulk.global.shared::cta.bulk_group.OP.TYPE`, a reduce through a
# bulk box): no tensor map, so the instruction names the element type. Per operation, the
# tmalang dtypes it takes and their PTX suffix; what ptxas -arch=sm_90a accepts (PTX ISA,
# cp.reduce.async.bulk): add also f64, and f16/bf16 only as `.add.noftz`; min/max take s64;
# the bitwise operations take .b32/.b64, so every 32- and 64-bit integer.
_BULK_ADD = {"u32": "u32", "i32": "s32", "u64": "u64", "f32": "f32", "f64": "f64",
             "f16": "noftz.f16", "bf16": "noftz.bf16"}
_BULK_MIN_MAX = {"u32": "u32", "i32": "s32", "u64": "u64", "i64": "s64", "f16": "f16", "bf16": "bf16"}
_BULK_BITS = {"u32": "b32", "i32": "b32", "u64": "b64", "i64": "b64"}
BULK_REDUCE_TYPES = {
    "add": _BULK_ADD, "min": _BULK_MIN_MAX, "max": _BULK_MIN_MAX, "inc": {"u32": "u32"}, "dec": {"u32": "u32"},
    "and": _BULK_BITS, "or": _BULK_BITS, "xor": _BULK_BITS,
}
BULK_DTYPE = "E474"

"""Element types: size in bytes and the class of arithmetic they support."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    kind: str  # "float" | "int" | "uint" | "fp8"


DTYPES = {
    d.name: d
    for d in (
        DType("f64", 8, "float"), DType("f32", 4, "float"), DType("f16", 2, "float"),
        DType("bf16", 2, "float"), DType("f8e4m3", 1, "fp8"), DType("f8e5m2", 1, "fp8"),
        DType("i64", 8, "int"), DType("i32", 4, "int"), DType("i16", 2, "int"), DType("i8", 1, "int"),
        DType("u64", 8, "uint"), DType("u32", 4, "uint"), DType("u16", 2, "uint"), DType("u8", 1, "uint"),
    )
}

# dtypes elementwise tile math can compute on (floats compute in f32, i32 in i32)
TILE_MATH_DTYPES = ("f32", "f16", "bf16", "i32")

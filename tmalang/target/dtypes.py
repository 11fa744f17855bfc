"""Element types, and how every tool spells each one, in one table.

A `DType` carries its size and arithmetic class (what sema and the passes ask), the tensor-map
data type TMA moves it as, the C type a scalar parameter of it has in the launch header, and its
NumPy, PyTorch and DLPack spellings (what the runtime and the interpreter bind arrays with).
bf16 and fp8 have no NumPy builtin; ml_dtypes provides them.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    kind: str                  # "float" | "int" | "uint" | "fp8"
    numpy: np.dtype
    torch: str                 # str(torch.dtype), so torch never has to be imported
    dlpack: tuple[int, int]    # (DLDataTypeCode, bits), codes from dlpack.h
    tma: str                   # CU_TENSOR_MAP_DATA_TYPE_*: TMA moves bits, so types without a
                               # tensor-map type of their own travel as the same-width unsigned
    ctype: str | None = None   # the C type of a by-value kernel parameter; None: not a scalar


DTYPES = {
    d.name: d
    for d in (
        DType("f64", 8, "float", np.dtype(np.float64), "torch.float64", (2, 64), "FLOAT64", "double"),
        DType("f32", 4, "float", np.dtype(np.float32), "torch.float32", (2, 32), "FLOAT32", "float"),
        DType("f16", 2, "float", np.dtype(np.float16), "torch.float16", (2, 16), "FLOAT16"),
        DType("bf16", 2, "float", np.dtype(ml_dtypes.bfloat16), "torch.bfloat16", (4, 16), "BFLOAT16"),
        DType("f8e4m3", 1, "fp8", np.dtype(ml_dtypes.float8_e4m3fn), "torch.float8_e4m3fn", (10, 8), "UINT8"),
        DType("f8e5m2", 1, "fp8", np.dtype(ml_dtypes.float8_e5m2), "torch.float8_e5m2", (12, 8), "UINT8"),
        DType("i64", 8, "int", np.dtype(np.int64), "torch.int64", (0, 64), "INT64", "int64_t"),
        DType("i32", 4, "int", np.dtype(np.int32), "torch.int32", (0, 32), "INT32", "int32_t"),
        DType("i16", 2, "int", np.dtype(np.int16), "torch.int16", (0, 16), "UINT16"),
        DType("i8", 1, "int", np.dtype(np.int8), "torch.int8", (0, 8), "UINT8"),
        DType("u64", 8, "uint", np.dtype(np.uint64), "torch.uint64", (1, 64), "UINT64", "uint64_t"),
        DType("u32", 4, "uint", np.dtype(np.uint32), "torch.uint32", (1, 32), "UINT32", "uint32_t"),
        DType("u16", 2, "uint", np.dtype(np.uint16), "torch.uint16", (1, 16), "UINT16"),
        DType("u8", 1, "uint", np.dtype(np.uint8), "torch.uint8", (1, 8), "UINT8"),
    )
}

# Kernel parameters passed by value, and the dtypes elementwise tile math computes on (floats
# compute in f32, i32 in i32).
SCALAR_DTYPES = ("f32", "f64", "i32", "u32", "i64", "u64")   # exactly those with a ctype
TILE_MATH_DTYPES = ("f32", "f16", "bf16", "i32")

NUMPY = {d.name: d.numpy for d in DTYPES.values()}
TORCH = {d.torch: d.name for d in DTYPES.values()}
DLPACK = {d.dlpack: d.name for d in DTYPES.values()}
SUPPORTED = ", ".join(DTYPES)
_FROM_NUMPY = {d.numpy: d.name for d in DTYPES.values()}


def itemsize(name: str) -> int:
    return DTYPES[name].itemsize


def from_numpy(dtype: np.dtype) -> str | None:
    """The tmalang name of a NumPy dtype, or None; non-native byte order is not supported."""
    if not dtype.isnative:
        return None
    return _FROM_NUMPY.get(dtype)


def from_typestr(typestr: str) -> str | None:
    """The tmalang name of an array-interface typestr such as '<f4', or None.

    Raw void types ('<V2') are refused rather than guessed: a 2-byte blob could be f16, bf16
    or i16, and guessing wrong would silently reinterpret the data.
    """
    try:
        dtype = np.dtype(typestr)
    except TypeError:
        return None
    return None if dtype.kind == "V" else from_numpy(dtype)

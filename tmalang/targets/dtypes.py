"""Element types, and how every tool spells each one, in one table.

A `DType` carries its size and arithmetic class (what sema and the passes ask), the tensor-map
data type TMA moves it as, the C type a scalar parameter of it has in the launch header, and its
NumPy, PyTorch and DLPack spellings (what the runtime and the interpreter bind arrays with).
bf16 and fp8 have no NumPy builtin; ml_dtypes provides them. NumPy and ml_dtypes are imported
on first use of a NumPy spelling, not here: compiling a kernel needs neither, and they are a third
of a cold `tmalangc`'s start-up.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    kind: str                  # "float" | "int" | "uint" | "fp8"
    numpy_name: str            # the NumPy dtype, by name (ml_dtypes names bf16 and fp8)
    torch: str                 # str(torch.dtype), so torch never has to be imported
    dlpack: tuple[int, int]    # (DLDataTypeCode, bits), codes from dlpack.h
    tma: str                   # CU_TENSOR_MAP_DATA_TYPE_*: TMA moves bits, so types without a
                               # tensor-map type of their own travel as the same-width unsigned
    ctype: str | None = None   # the C type of a by-value kernel parameter; None: not a scalar

    @property
    def numpy(self) -> np.dtype:
        return _numpy_dtypes()[self.name]


DTYPES = {
    d.name: d
    for d in (
        DType("f64", 8, "float", "float64", "torch.float64", (2, 64), "FLOAT64", "double"),
        DType("f32", 4, "float", "float32", "torch.float32", (2, 32), "FLOAT32", "float"),
        DType("f16", 2, "float", "float16", "torch.float16", (2, 16), "FLOAT16"),
        DType("bf16", 2, "float", "bfloat16", "torch.bfloat16", (4, 16), "BFLOAT16"),
        DType("f8e4m3", 1, "fp8", "float8_e4m3fn", "torch.float8_e4m3fn", (10, 8), "UINT8"),
        DType("f8e5m2", 1, "fp8", "float8_e5m2", "torch.float8_e5m2", (12, 8), "UINT8"),
        DType("i64", 8, "int", "int64", "torch.int64", (0, 64), "INT64", "int64_t"),
        DType("i32", 4, "int", "int32", "torch.int32", (0, 32), "INT32", "int32_t"),
        DType("i16", 2, "int", "int16", "torch.int16", (0, 16), "UINT16"),
        DType("i8", 1, "int", "int8", "torch.int8", (0, 8), "UINT8"),
        DType("u64", 8, "uint", "uint64", "torch.uint64", (1, 64), "UINT64", "uint64_t"),
        DType("u32", 4, "uint", "uint32", "torch.uint32", (1, 32), "UINT32", "uint32_t"),
        DType("u16", 2, "uint", "uint16", "torch.uint16", (1, 16), "UINT16"),
        DType("u8", 1, "uint", "uint8", "torch.uint8", (1, 8), "UINT8"),
    )
}

# Kernel parameters passed by value, and the dtypes elementwise tile math computes on (floats
# compute in f32, i32 in i32).
SCALAR_DTYPES = ("f32", "f64", "i32", "u32", "i64", "u64")   # exactly those with a ctype
TILE_MATH_DTYPES = ("f32", "f16", "bf16", "i32")

TORCH = {d.torch: d.name for d in DTYPES.values()}
DLPACK = {d.dlpack: d.name for d in DTYPES.values()}
SUPPORTED = ", ".join(DTYPES)


@functools.cache
def _numpy_dtypes() -> dict[str, np.dtype]:
    import ml_dtypes
    import numpy as np

    return {d.name: np.dtype(getattr(ml_dtypes, d.numpy_name, None) or d.numpy_name) for d in DTYPES.values()}


@functools.cache
def _from_numpy_table() -> dict[np.dtype, str]:
    return {dtype: name for name, dtype in _numpy_dtypes().items()}


def __getattr__(name: str):
    # NUMPY (tmalang name -> np.dtype) is built on first use, so that importing this table does
    # not import NumPy (PEP 562).
    if name == "NUMPY":
        return _numpy_dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def itemsize(name: str) -> int:
    return DTYPES[name].itemsize


def from_numpy(dtype: np.dtype) -> str | None:
    """The tmalang name of a NumPy dtype, or None; non-native byte order is not supported."""
    if not dtype.isnative:
        return None
    return _from_numpy_table().get(dtype)


def from_typestr(typestr: str) -> str | None:
    """The tmalang name of an array-interface typestr such as '<f4', or None.

    Raw void types ('<V2') are refused rather than guessed: a 2-byte blob could be f16, bf16
    or i16, and guessing wrong would silently reinterpret the data.
    """
    import numpy as np

    try:
        dtype = np.dtype(typestr)
    except TypeError:
        return None
    return None if dtype.kind == "V" else from_numpy(dtype)

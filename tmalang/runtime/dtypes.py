"""The tmalang element types and how each array ecosystem spells them.

One table, so that NumPy, PyTorch, the CUDA array interface and DLPack all map onto the same
names the compiler writes into the manifest. bf16 and fp8 have no NumPy builtin; ml_dtypes
provides them, and that is what host arrays of those types use.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

NUMPY = {
    "f64": np.dtype(np.float64),
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f8e4m3": np.dtype(ml_dtypes.float8_e4m3fn),
    "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "i16": np.dtype(np.int16),
    "u16": np.dtype(np.uint16),
    "i32": np.dtype(np.int32),
    "u32": np.dtype(np.uint32),
    "i64": np.dtype(np.int64),
    "u64": np.dtype(np.uint64),
}

SUPPORTED = ", ".join(NUMPY)

_FROM_NUMPY = {dt: name for name, dt in NUMPY.items()}

# str(torch.dtype) -> tmalang name; strings, so torch never has to be imported.
TORCH = {f"torch.{t}": name for name, t in [
    ("f64", "float64"), ("f32", "float32"), ("f16", "float16"), ("bf16", "bfloat16"),
    ("f8e4m3", "float8_e4m3fn"), ("f8e5m2", "float8_e5m2"),
    ("i8", "int8"), ("u8", "uint8"), ("i16", "int16"), ("u16", "uint16"),
    ("i32", "int32"), ("u32", "uint32"), ("i64", "int64"), ("u64", "uint64"),
]}

# DLPack (type code, bits) -> tmalang name. Codes from dlpack.h (DLDataTypeCode).
DLPACK = {
    (2, 64): "f64", (2, 32): "f32", (2, 16): "f16", (4, 16): "bf16",
    (10, 8): "f8e4m3", (12, 8): "f8e5m2",
    (0, 8): "i8", (1, 8): "u8", (0, 16): "i16", (1, 16): "u16",
    (0, 32): "i32", (1, 32): "u32", (0, 64): "i64", (1, 64): "u64",
}


def itemsize(name: str) -> int:
    return NUMPY[name].itemsize


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

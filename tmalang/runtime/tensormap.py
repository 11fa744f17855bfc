"""Encoding CUtensorMap descriptors with cuTensorMapEncodeTiled.

The manifest and ArrayViews list dimensions outermost first, as the source language and NumPy
do; the driver wants them innermost first. `tensor_map_fields` does that translation as a pure
function (so it is testable without a GPU); `encode_tensor_map` hands the result to the driver
and returns the 128 opaque bytes that are passed to the kernel as a __grid_constant__ param.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..backend.manifest import TensorMapParam
from . import driver
from .errors import MANIFEST, LaunchError
from .view import ArrayView

TENSOR_MAP_BYTES = 128

# tmalang dtype -> CU_TENSOR_MAP_DATA_TYPE_*. TMA only moves bits, so types without a tensor-map
# type of their own travel as the unsigned integer of the same width.
_DATA_TYPE = {
    "f64": "FLOAT64", "f32": "FLOAT32", "f16": "FLOAT16", "bf16": "BFLOAT16",
    "i64": "INT64", "u64": "UINT64", "i32": "INT32", "u32": "UINT32",
    "i16": "UINT16", "u16": "UINT16",
    "i8": "UINT8", "u8": "UINT8", "f8e4m3": "UINT8", "f8e5m2": "UINT8",
}
_SWIZZLE = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}
_L2_PROMOTION = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}
# "zero" is the hardware default (OOB_FILL_NONE fills zeros); "nan" asks for the special NaN.
_OOB_FILL = {"zero": "NONE", "nan": "NAN_REQUEST_ZERO_FMA"}


@dataclass(frozen=True)
class TensorMapFields:
    """The arguments of cuTensorMapEncodeTiled, innermost dimension first, enums by suffix."""

    data_type: str
    rank: int
    address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]   # bytes, rank - 1 entries: dims 1.. (innermost excluded)
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    l2_promotion: str
    oob_fill: str


def tensor_map_fields(param: TensorMapParam, view: ArrayView, device_ptr: int) -> TensorMapFields:
    """Translate a manifest tensor-map parameter and a bound array into driver terms."""
    return TensorMapFields(
        data_type=_lookup(_DATA_TYPE, param.dtype, "dtype", param),
        rank=len(view.shape),
        address=device_ptr,
        global_dim=tuple(reversed(view.shape)),
        global_strides=tuple(reversed(view.strides[:-1])),
        box_dim=tuple(reversed(param.box_shape)),
        element_strides=tuple(reversed(param.element_strides)),
        swizzle=_lookup(_SWIZZLE, param.swizzle, "swizzle", param),
        l2_promotion=_lookup(_L2_PROMOTION, param.l2_promotion, "l2_promotion", param),
        oob_fill=_lookup(_OOB_FILL, param.oob_fill, "oob_fill", param),
    )


def encode_tensor_map(param: TensorMapParam, view: ArrayView, device_ptr: int) -> bytes:
    """The 128-byte CUtensorMap for box `param.box` over the array at `device_ptr`."""
    f = tensor_map_fields(param, view, device_ptr)
    cu = driver.api()
    try:
        tensor_map = driver.call(
            "cuTensorMapEncodeTiled",
            getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{f.data_type}"),
            f.rank,
            f.address,
            [cu.cuuint64_t(n) for n in f.global_dim],
            [cu.cuuint64_t(s) for s in _strides_argument(f)],
            [cu.cuuint32_t(n) for n in f.box_dim],
            [cu.cuuint32_t(s) for s in f.element_strides],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(cu.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{f.swizzle}"),
            getattr(cu.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{f.l2_promotion}"),
            getattr(cu.CUtensorMapFloatOOBfill, f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{f.oob_fill}"),
        )
    except LaunchError as exc:
        raise LaunchError(
            exc.code, f"box '{param.box}' of argument '{param.tensor}': {exc.message}", repr(f)
        ) from None
    return struct.pack("<16Q", *(int(word) for word in tensor_map.opaque))


def _strides_argument(f: TensorMapFields) -> tuple[int, ...]:
    """The globalStrides array to pass. A rank-1 map has no strides, but an empty list reaches
    the driver as a null pointer, which it rejects; it never reads a stand-in entry, which we
    still make valid (the row's byte size rounded up to 16)."""
    if f.global_strides:
        return f.global_strides
    itemsize = _ITEMSIZE[f.data_type]
    return (-(-f.global_dim[0] * itemsize // 16) * 16,)


_ITEMSIZE = {"FLOAT64": 8, "INT64": 8, "UINT64": 8, "FLOAT32": 4, "INT32": 4, "UINT32": 4,
             "FLOAT16": 2, "BFLOAT16": 2, "UINT16": 2, "UINT8": 1}


def _lookup(table: dict[str, str], key: str, field: str, param: TensorMapParam) -> str:
    if key not in table:
        raise LaunchError(
            MANIFEST,
            f"box '{param.box}' of '{param.tensor}' has unknown {field} {key!r} "
            f"(known: {', '.join(table)})",
        )
    return table[key]

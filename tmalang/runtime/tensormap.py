"""Encoding CUtensorMap descriptors with cuTensorMapEncodeTiled (or cuTensorMapEncodeIm2col for
an im2col box, whose manifest entry carries the pixel box's corners, or cuTensorMapEncodeIm2colWide
for a wide one: the W corners and a CU_TENSOR_MAP_IM2COL_WIDE_MODE_*).

The manifest and ArrayViews list dimensions outermost first, as the source language and NumPy
do; the driver wants them innermost first. `tensor_map_fields` does that translation as a pure
function (so it is testable without a GPU); `encode_tensor_map` hands the result to the driver
and returns the 128 opaque bytes that are passed to the kernel as a __grid_constant__ param.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from ..contract.errors import MANIFEST, LaunchError
from ..contract.manifest import TensorMapParam
from ..contract.view import ArrayView
from ..targets import tma, tma_modes
from ..targets.tma_modes import MODES, mode_of
from ..targets.dtypes import DTYPES
from . import driver

TENSOR_MAP_BYTES = tma.TENSOR_MAP_BYTES


@dataclass(frozen=True)
class TensorMapFields:
    """The arguments of cuTensorMapEncodeTiled, innermost dimension first, enums by name."""

    data_type: str                    # the driver's enum names, in full (CU_TENSOR_MAP_...)
    itemsize: int
    rank: int
    address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]   # bytes, rank - 1 entries: dims 1.. (innermost excluded)
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    l2_promotion: str
    oob_fill: str
    interleave: str = "CU_TENSOR_MAP_INTERLEAVE_NONE"
    lower: tuple[int, ...] = ()       # im2col: the pixel box's corners, innermost spatial dim first
    upper: tuple[int, ...] = ()
    wide_mode: str = ""               # wide im2col: CU_TENSOR_MAP_IM2COL_WIDE_MODE_W or _W128


def _without_slice(param: TensorMapParam, view: ArrayView) -> tuple[TensorMapParam, ArrayView]:
    """An interleaved map leaves out the innermost dim, the channel slice: the TMA moves one whole
    slice per index of the next dim (sema/interleave.py)."""
    view = replace(view, shape=view.shape[:-1], strides=view.strides[:-1])
    param = replace(param, box_shape=param.box_shape[:-1], element_strides=param.element_strides[:-1])
    return param, view


def tensor_map_fields(param: TensorMapParam, view: ArrayView, device_ptr: int) -> TensorMapFields:
    """Translate a manifest tensor-map parameter and a bound array into driver terms."""
    if param.interleave != "none":
        param, view = _without_slice(param, view)
    return TensorMapFields(
        data_type=_lookup(_DATA_TYPES, param.dtype, "dtype", param),
        itemsize=view.itemsize,
        rank=len(view.shape),
        address=device_ptr,
        global_dim=tuple(reversed(view.shape)),
        global_strides=tuple(reversed(view.strides[:-1])),
        box_dim=tuple(reversed(param.box_shape)),
        element_strides=tuple(reversed(param.element_strides)),
        swizzle=_lookup(_SWIZZLES, param.swizzle, "swizzle", param),
        l2_promotion=_lookup(tma.L2_PROMOTIONS, param.l2_promotion, "l2_promotion", param),
        oob_fill=_lookup(tma.OOB_FILLS, param.oob_fill, "oob_fill", param),
        interleave=_lookup(_INTERLEAVES, param.interleave, "interleave", param),
        lower=tuple(reversed(param.lower)),
        upper=tuple(reversed(param.upper)),
        wide_mode=tma_modes.WIDE_MODE_ENUMS[param.wide] if param.wide else "",
    )


def encode_tensor_map(param: TensorMapParam, view: ArrayView, device_ptr: int) -> bytes:
    """The 128-byte CUtensorMap for box `param.box` over the array at `device_ptr`."""
    f = tensor_map_fields(param, view, device_ptr)
    cu = driver.api()
    head = (getattr(cu.CUtensorMapDataType, f.data_type), f.rank, f.address,
            [cu.cuuint64_t(n) for n in f.global_dim], [cu.cuuint64_t(s) for s in _strides_argument(f)])
    tail = (getattr(cu.CUtensorMapInterleave, f.interleave), getattr(cu.CUtensorMapSwizzle, f.swizzle),
            getattr(cu.CUtensorMapL2promotion, f.l2_promotion), getattr(cu.CUtensorMapFloatOOBfill, f.oob_fill))
    strides = [cu.cuuint32_t(s) for s in f.element_strides]
    mode = mode_of(False, bool(f.lower), f.wide_mode, False)   # a gather4 box's map is a tiled one
    try:
        tensor_map = driver.call(MODES[mode].encode, *head, *_ENCODE_ARGUMENTS[mode](f, cu, strides, tail))
    except LaunchError as exc:
        raise LaunchError(
            exc.code, f"box '{param.box}' of argument '{param.tensor}': {exc.message}", repr(f)
        ) from None
    return struct.pack("<16Q", *(int(word) for word in tensor_map.opaque))


def _tiled_arguments(f: TensorMapFields, cu, strides: list, tail: tuple) -> tuple:
    return ([cu.cuuint32_t(n) for n in f.box_dim], strides, *tail)


def _im2col_arguments(f: TensorMapFields, cu, strides: list, tail: tuple) -> tuple:
    """The pixel box's corners; box_dim is (channels per pixel, pixels per column), innermost first."""
    return (list(f.lower), list(f.upper), f.box_dim[0], f.box_dim[1], strides, *tail)


def _wide_arguments(f: TensorMapFields, cu, strides: list, tail: tuple) -> tuple:
    """The W corners come first innermost; the mode goes after the interleave."""
    return (f.lower[0], f.upper[0], f.box_dim[0], f.box_dim[1], strides, tail[0],
            getattr(cu.CUtensorMapIm2ColWideMode, f.wide_mode), *tail[1:])


# what each mode's encode call (tma_modes.MODES[mode].encode) takes after the common head
_ENCODE_ARGUMENTS = {"tiled": _tiled_arguments, "im2col": _im2col_arguments, "im2col_wide": _wide_arguments}


def _strides_argument(f: TensorMapFields) -> tuple[int, ...]:
    """The globalStrides array to pass. A rank-1 map has no strides, but an empty list reaches
    the driver as a null pointer, which it rejects; it never reads a stand-in entry, which we
    still make valid (the row's byte size rounded up to 16)."""
    if f.global_strides:
        return f.global_strides
    align = tma.interleave_alignment("32B" if f.interleave.endswith("32B") else "none")
    return (-(-f.global_dim[0] * f.itemsize // align) * align,)


_DATA_TYPES = {d.name: tma.DATA_TYPE_PREFIX + d.tma for d in DTYPES.values()}
_SWIZZLES = {s.name: s.tensor_map for s in tma.SWIZZLES.values()}
_INTERLEAVES = {i.name: i.tensor_map for i in tma.INTERLEAVES.values()}


def _lookup(table: dict[str, str], key: str, field: str, param: TensorMapParam) -> str:
    if key not in table:
        raise LaunchError(
            MANIFEST,
            f"box '{param.box}' of '{param.tensor}' has unknown {field} {key!r} "
            f"(known: {', '.join(table)})",
        )
    return table[key]

"""Binding launch arguments to a kernel's manifest, without touching the driver.

`bind` checks everything a launch depends on before any driver call: argument count and kinds,
dtypes, ranks, symbolic dimensions, and the layout rules of the Hopper tensor-map encoder
(cuTensorMapEncodeTiled), so that a bad argument is reported by name instead of as an opaque
CUDA_ERROR_INVALID_VALUE from the driver. Box-shape limits depend only on compile-time values
and are checked by the compiler, not here. Being pure, it is fully testable on a CPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from ..targets import dtypes, tma
from . import assumptions
from .arrays import array_view, is_array_like
from .manifest import BulkParam, DimParam, Manifest, ScalarArg, TensorArg, TensorMapParam
from .errors import (
    ALIGNMENT, ARG_COUNT, ARG_KIND, DEVICE, DIM_MISMATCH, DIM_RANGE, DTYPE, IM2COL_PIXEL_BOX, LAUNCH_OPTION,
    LAYOUT, MANIFEST, OVERLAP, RANK, SCALAR_VALUE, LaunchError,
)
from .view import ArrayView

MAX_DIM = 2**31          # tensor maps take dims < 2**32, but TMA coordinates and the kernel's
                         # index math are signed 32-bit: a larger dim's far elements are lost
MAX_TILES = 2**31        # the kernel's tile index and its stride over the grid are 32-bit
MAX_STRIDE = 2**40       # tensor-map globalStrides entries are < 2**40
STRIDE_ALIGN = tma.GLOBAL_ALIGNMENT    # ... and multiples of 16 bytes
ADDRESS_ALIGN = tma.GLOBAL_ALIGNMENT   # globalAddress must be 16-byte aligned (without interleave)


@dataclass(frozen=True)
class Binding:
    """Validated launch arguments.

    `views` holds one ArrayView per tensor argument, with strides the encoder accepts;
    `scalars` the scalar arguments converted to their NumPy scalar types.
    """

    manifest: Manifest
    symbols: Mapping[str, int]
    views: Mapping[str, ArrayView]
    scalars: Mapping[str, np.generic]

    def dim(self, dim: str | int) -> int:
        return self.symbols[dim] if isinstance(dim, str) else dim

    def tile_count(self) -> int:
        """The work items the grid is sized from: split x prod(ceil(dim / box)) over the manifest's
        grid tile dimensions, or for stream-K the (tile, step) units, tiles x steps per tile."""
        return tile_units(self.manifest, self.symbols, self.scalars)


def bind(manifest: Manifest, args: tuple, dims: Mapping[str, int] | None = None,
         stream: int | None = None) -> Binding:
    """Validate `args` (in `manifest.args` order) and optional explicit `dims` for a launch on the
    CUstream handle `stream` (told to DLPack producers; None: no GPU launch, the interpreter)."""
    _check_count(manifest, args)
    if dims is not None and not isinstance(dims, Mapping):
        raise LaunchError(
            LAUNCH_OPTION, f"dims must be a mapping like {{'M': 1024}}, got {type(dims).__name__}"
        )
    symbols = _Symbols(manifest, dims or {})
    views, scalars = {}, {}
    for spec, value in zip(manifest.args, args):
        if isinstance(spec, TensorArg):
            views[spec.name] = _bind_tensor(spec, value, symbols, stream)
        else:
            scalars[spec.name] = _bind_scalar(spec, value)
    symbols.check_complete()
    assumptions.check(manifest, symbols.values, scalars)   # what the kernel takes for granted, first
    _check_tile_count(manifest, symbols.values, scalars)
    _check_bulk_chunks(manifest, views)
    _check_interleave(manifest, views)
    _check_pixel_boxes(manifest, views)
    common_device({name: v.device for name, v in views.items() if v.device is not None})
    return Binding(manifest, symbols.values, views, scalars)


def _tiles(manifest: Manifest, symbols: Mapping[str, int], scalars: Mapping[str, np.generic]) -> int:
    split = manifest.grid.split
    parts = int(scalars[split]) if isinstance(split, str) else split
    return parts * math.prod(
        -(-(symbols[d] if isinstance(d, str) else d) // box) for d, box in manifest.grid.tile_dims
    )


def tile_units(manifest: Manifest, symbols: Mapping[str, int], scalars: Mapping[str, np.generic]) -> int:
    """The tiles, times the K steps of each with stream-K: ceil(extent / chunk), none below 0."""
    tiles = _tiles(manifest, symbols, scalars)
    if not manifest.grid.stream:
        return tiles
    extent, chunk = manifest.grid.stream
    if isinstance(extent, str):
        extent = int(symbols[extent] if extent in symbols else scalars[extent])
    return tiles * max(-(-extent // chunk), 0)


def _check_tile_count(manifest: Manifest, symbols: Mapping[str, int],
                      scalars: Mapping[str, np.generic] | None = None) -> None:
    """E206 when the tiles to walk overflow the kernel's 32-bit tile index (each dim alone fits),
    or their stream-K units (tiles x K steps) its 32-bit range arithmetic, or when a split count
    given as a scalar argument is below 1 (no part, or a negative count)."""
    split, scalars = manifest.grid.split, scalars or {}
    if isinstance(split, str) and int(scalars[split]) < 1:
        raise LaunchError(
            DIM_RANGE,
            f"argument '{split}' splits every tile into {int(scalars[split])} parts; the split count must be at least 1",
        )
    tiles = _tiles(manifest, symbols, scalars)
    if tiles >= MAX_TILES:
        raise LaunchError(
            DIM_RANGE,
            f"these dims make {tiles} tiles of the grid's box; the kernel numbers tiles with 32-bit "
            f"integers, so there must be fewer than 2**31",
            "launch the kernel on parts of the tensors",
        )
    units = tile_units(manifest, symbols, scalars)
    if units >= MAX_TILES:
        raise LaunchError(
            DIM_RANGE,
            f"these dims make {tiles} tiles of {units // tiles} K steps each, {units} stream-K units; the "
            f"kernel cuts them into ranges with 32-bit integers, so there must be fewer than 2**31",
            "launch the kernel on parts of the tensors, or use split-K",
        )


def _check_bulk_chunks(manifest: Manifest, views: Mapping[str, ArrayView]) -> None:
    """E206 when a bulk box's chunk does not divide its tensor's innermost dim: a bulk copy has no
    out-of-bounds fill or clipping, so a partial last chunk would read or write past the tensor."""
    for p in manifest.ptx_params:
        if isinstance(p, BulkParam) and views[p.tensor].shape[-1] % p.chunk:
            raise LaunchError(
                DIM_RANGE,
                f"argument '{p.tensor}': innermost dim is {views[p.tensor].shape[-1]}, not a multiple of bulk box "
                f"'{p.box}'s chunk ({p.chunk} elements)",
                "a bulk copy cannot clip at the tensor's edge: pad the dim to a multiple of the chunk",
            )


def _check_interleave(manifest: Manifest, views: dict[str, ArrayView]) -> None:
    """Under a box with interleave 32B, the driver wants the tensor's base address (E208) and
    every outer stride (E207) 32-byte aligned. A dim of extent 1 never advances, so its stand-in
    stride is rounded up to 32 instead of failing."""
    align = tma.interleave_alignment("32B")
    for p in manifest.ptx_params:
        if not isinstance(p, TensorMapParam) or p.interleave != "32B":
            continue
        view = views[p.tensor]
        strides = tuple(-(-s // align) * align if n == 1 else s for s, n in zip(view.strides[:-1], view.shape[:-1]))
        for axis, stride in enumerate(strides):
            if stride % align:
                raise LaunchError(LAYOUT, f"argument '{p.tensor}': stride of dim {axis} is {stride} bytes; box "
                                  f"'{p.box}' (interleave 32B) needs a multiple of {align}",
                                  "pad the array so that each outer stride is a multiple of 32 bytes")
        if not view.on_host and view.ptr % align:
            raise LaunchError(ALIGNMENT, f"argument '{p.tensor}': base address {view.ptr:#x} is not {align}-byte "
                              f"aligned, which box '{p.box}' (interleave 32B) needs")
        views[p.tensor] = replace(view, strides=(*strides, view.strides[-1]))


def _check_pixel_boxes(manifest: Manifest, views: Mapping[str, ArrayView]) -> None:
    """E485 when an im2col box's pixel box holds no pixel along a spatial dim of the bound tensor
    (from `lower` to dim - 1 + `upper`): the driver refuses to encode such a map."""
    for p in manifest.ptx_params:
        if not isinstance(p, TensorMapParam) or not p.lower:
            continue
        spatial = views[p.tensor].shape[1:-1]
        for axis, (dim, lo, hi) in enumerate(zip(spatial, p.lower, p.upper), start=1):
            if dim - 1 + hi < lo:
                raise LaunchError(
                    IM2COL_PIXEL_BOX,
                    f"argument '{p.tensor}': dim {axis} is {dim}, which leaves im2col box '{p.box}' an empty "
                    f"pixel box (from {lo} to {dim} - 1 + ({hi}))",
                    "a larger image, or corners that leave room for at least one filter position",
                )


def _check_count(manifest: Manifest, args: tuple) -> None:
    if len(args) != len(manifest.args):
        names = ", ".join(a.name for a in manifest.args)
        raise LaunchError(
            ARG_COUNT,
            f"kernel '{manifest.kernel}' expects {len(manifest.args)} arguments ({names}), "
            f"got {len(args)}",
        )


class _Symbols:
    """Symbolic dimension values, each remembering who bound it first (for messages)."""

    def __init__(self, manifest: Manifest, explicit: Mapping[str, int]) -> None:
        self.values: dict[str, int] = {}
        self._bound_by: dict[str, str] = {}
        self._needed = _kernel_symbols(manifest)
        for symbol, value in explicit.items():
            self._bind_explicit(symbol, value)

    def _bind_explicit(self, symbol: str, value: object) -> None:
        if symbol not in self._needed:
            known = ", ".join(sorted(self._needed)) or "none"
            raise LaunchError(
                LAUNCH_OPTION,
                f"dims names '{symbol}', which is not a dimension of this kernel "
                f"(its dimensions: {known})",
            )
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise LaunchError(
                LAUNCH_OPTION, f"dims['{symbol}'] must be an integer, got {type(value).__name__}"
            )
        check_extent(int(value), f"dims['{symbol}']")
        self.values[symbol] = int(value)
        self._bound_by[symbol] = "dims="

    def bind(self, symbol: str, value: int, arg: str, axis: int) -> None:
        if symbol not in self.values:
            self.values[symbol] = value
            self._bound_by[symbol] = f"'{arg}'"
        elif self.values[symbol] != value:
            raise LaunchError(
                DIM_MISMATCH,
                f"argument '{arg}': dim {axis} is bound to {symbol}={self.values[symbol]} "
                f"by {self._bound_by[symbol]} but is {value} here",
            )

    def check_complete(self) -> None:
        missing = sorted(self._needed - self.values.keys())
        if missing:
            raise LaunchError(
                LAUNCH_OPTION,
                f"dimension '{missing[0]}' is not bound by any argument",
                f"pass dims={{'{missing[0]}': ...}}",
            )


def _kernel_symbols(manifest: Manifest) -> set[str]:
    symbols = {d for a in manifest.args if isinstance(a, TensorArg) for d in a.shape}
    symbols |= {p.symbol for p in manifest.ptx_params if isinstance(p, DimParam)}
    symbols |= {d for d, _ in manifest.grid.tile_dims}
    return {s for s in symbols if isinstance(s, str)}


def _bind_tensor(spec: TensorArg, value: object, symbols: _Symbols, stream: int | None) -> ArrayView:
    view = array_view(value, spec.name, stream)
    if view.dtype != spec.dtype:
        got = view.native_dtype if view.native_dtype in (view.dtype, "") else (
            f"{view.native_dtype} ({view.dtype})"
        )
        raise LaunchError(DTYPE, f"argument '{spec.name}': expected dtype {spec.dtype}, got {got}")
    if len(view.shape) != len(spec.shape):
        raise LaunchError(
            RANK,
            f"argument '{spec.name}': expected rank {len(spec.shape)} "
            f"(shape {_shape_text(spec.shape)}), got rank {len(view.shape)} (shape {view.shape})",
        )
    if spec.written and view.readonly:
        raise LaunchError(ARG_KIND, f"argument '{spec.name}' is read-only but the kernel writes it")
    for axis, (want, got) in enumerate(zip(spec.shape, view.shape)):
        check_extent(got, f"argument '{spec.name}': dim {axis}")
        if isinstance(want, str):
            symbols.bind(want, got, spec.name, axis)
        elif want != got:
            raise LaunchError(
                DIM_MISMATCH,
                f"argument '{spec.name}': dim {axis} must be {want} (fixed by the kernel), "
                f"got {got}",
            )
    view = replace(view, strides=_tma_strides(spec.name, view))
    if spec.written:
        _check_no_self_overlap(spec.name, view)
    if not view.on_host and view.ptr % ADDRESS_ALIGN:
        raise LaunchError(
            ALIGNMENT,
            f"argument '{spec.name}': base address {view.ptr:#x} is not "
            f"{ADDRESS_ALIGN}-byte aligned",
            "TMA needs 16-byte aligned tensors; a slice that starts mid-row usually causes this",
        )
    return view


def check_extent(value: int, what: str) -> None:
    if value < 1:
        raise LaunchError(
            DIM_RANGE,
            f"{what} is {value}: empty tensors cannot be launched (TMA needs every dim >= 1)",
            "skip the launch when there is no data",
        )
    if value >= MAX_DIM:
        raise LaunchError(
            DIM_RANGE,
            f"{what} is {value}; dims must be < 2**31 (TMA coordinates and the kernel's index math "
            "are signed 32-bit)",
            "split the tensor into parts below 2**31 elements along that dim",
        )


def _tma_strides(name: str, view: ArrayView) -> tuple[int, ...]:
    """Check the layout against the encoder's rules; return the strides to encode.

    A dimension of extent 1 is never stepped along, so its stride is irrelevant; frameworks
    report arbitrary values there (PyTorch does), so we substitute the contiguous value instead
    of refusing an array that TMA can read perfectly well.
    """
    size = view.itemsize
    if view.shape[-1] > 1 and view.strides[-1] != size:
        raise LaunchError(
            LAYOUT,
            f"argument '{name}': innermost dimension must be contiguous (stride 1 element), "
            f"got a stride of {view.strides[-1]} bytes",
            "pass a contiguous copy, or transpose in the kernel instead of in the array",
        )
    strides = [size]
    for axis in reversed(range(len(view.shape) - 1)):
        stride = view.strides[axis]
        if view.shape[axis] == 1:
            stride = -(-view.shape[axis + 1] * strides[0] // STRIDE_ALIGN) * STRIDE_ALIGN
        _check_outer_stride(name, axis, stride, size)
        strides.insert(0, stride)
    return tuple(strides)


def _check_no_self_overlap(name: str, view: ArrayView) -> None:
    """E216 when two elements of a written array share memory (`as_strided` rows that overlap).

    Tiles of one output are stored by different CTAs at once, so elements that alias would race.
    Taking the dims in order of stride, each stride must step past everything the smaller dims
    span; that is exact for the layouts TMA can describe (positive strides, contiguous rows).
    """
    span = view.itemsize
    for extent, stride in sorted(zip(view.shape, view.strides), key=lambda d: d[1]):
        if extent == 1:
            continue
        if stride < span:
            raise LaunchError(
                OVERLAP,
                f"argument '{name}': its elements overlap in memory (a stride of {stride} bytes "
                f"steps inside the {span} bytes the faster dims span), and the kernel writes it",
                "tiles written at once would race: pass an array whose elements do not alias",
            )
        span += (extent - 1) * stride


def _check_outer_stride(name: str, axis: int, stride: int, size: int) -> None:
    if stride <= 0:
        raise LaunchError(
            LAYOUT, f"argument '{name}': stride of dim {axis} is {stride} bytes; TMA needs it > 0"
        )
    if stride % STRIDE_ALIGN:
        raise LaunchError(
            LAYOUT,
            f"argument '{name}': stride of dim {axis} is {stride} bytes; "
            f"TMA needs a multiple of {STRIDE_ALIGN}",
            f"pad the innermost dimension to a multiple of {STRIDE_ALIGN // size} elements "
            "and pass a slice of the padded array",
        )
    if stride >= MAX_STRIDE:
        raise LaunchError(
            LAYOUT, f"argument '{name}': stride of dim {axis} is {stride} bytes; TMA needs < 2**40"
        )


def _bind_scalar(spec: ScalarArg, value: object) -> np.generic:
    if is_array_like(value):
        raise LaunchError(
            ARG_KIND,
            f"argument '{spec.name}': expected a scalar {spec.dtype}, got {type(value).__name__}",
        )
    if spec.dtype not in dtypes.NUMPY:
        raise LaunchError(MANIFEST, f"scalar '{spec.name}' has unknown dtype {spec.dtype}")
    dtype = dtypes.NUMPY[spec.dtype]
    if isinstance(value, np.ndarray):  # 0-d
        value = value[()]
    if dtype.kind in "iu":
        return _integer_scalar(spec, value, dtype)
    return _float_scalar(spec, value, dtype)


def _integer_scalar(spec: ScalarArg, value: object, dtype: np.dtype) -> np.generic:
    if not isinstance(value, (int, np.integer)):  # bool is an int
        raise LaunchError(
            ARG_KIND,
            f"argument '{spec.name}': expected an integer ({spec.dtype}), "
            f"got {type(value).__name__} {value!r}",
        )
    info = np.iinfo(dtype)
    if not info.min <= int(value) <= info.max:
        raise LaunchError(
            SCALAR_VALUE,
            f"argument '{spec.name}': {int(value)} does not fit in {spec.dtype} "
            f"(range {info.min}..{info.max})",
        )
    return dtype.type(int(value))


def _float_scalar(spec: ScalarArg, value: object, dtype: np.dtype) -> np.generic:
    real = isinstance(value, (int, float, np.integer, np.floating)) or (
        isinstance(value, np.generic) and dtypes.from_numpy(value.dtype) is not None
    )
    if not real:
        raise LaunchError(
            ARG_KIND,
            f"argument '{spec.name}': expected a real number ({spec.dtype}), "
            f"got {type(value).__name__}",
        )
    try:
        with np.errstate(over="ignore"):
            converted = dtype.type(value)
        overflow = math.isfinite(float(value)) and not math.isfinite(float(converted))
    except OverflowError:
        overflow = True
    if overflow:
        raise LaunchError(SCALAR_VALUE, f"argument '{spec.name}': {value} overflows {spec.dtype}")
    return converted


def common_device(devices: Mapping[str, int]) -> int | None:
    """The one device in `devices` (argument name -> ordinal), None if empty."""
    if len(set(devices.values())) > 1:
        where = ", ".join(f"'{name}' on cuda:{device}" for name, device in devices.items())
        raise LaunchError(DEVICE, f"arrays are on different devices: {where}")
    return next(iter(devices.values()), None)


def _shape_text(shape: tuple[str | int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"

"""The TMA's copy modes as one table: what each mode is called in PTX, which driver call encodes
its tensor map (and with which enums), the ranks it takes, the target feature it needs, and which
copies it has. Sema refuses what a mode lacks from this table, the backend spells each copy's
qualifier from it, the runtime and the C++ header pick the encode call from it.

Sources: PTX ISA 9.7.9.25 (cp.async.bulk.tensor: .tile, .im2col, .im2col::w, .im2col::w::128,
.tile::gather4 / .tile::scatter4; cp.async.bulk.prefetch.tensor with the same load modes;
cp.async.bulk and cp.async.bulk.prefetch.L2 without a tensor map), CUDA Driver API
(cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide).

A box's mode follows from its declaration (docs §4): `bulk` boxes copy without a tensor map,
`im2col` boxes gather pixels (`wide` ones along W only, sm_100a), a box copied by `rows` of an index
tensor is gathered four rows at a time (sm_100a), and every other box is tiled.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TmaMode:
    name: str
    encode: str | None           # the driver call that encodes its tensor map; None: no tensor map
    load: str                    # the load's mode qualifier (after .global); "" for a bulk copy
    store: str | None            # the store's, None where the mode has no store
    prefetch: str | None         # the L2 prefetch's, None where the mode has none
    ranks: tuple[int, ...]       # tensor ranks the mode takes
    feature: str | None = None   # the Target flag the mode needs (targets/arch.py)
    reduce: bool = False         # a store may reduce (cp.reduce.async.bulk[.tensor])
    multicast: bool = False      # a load may be multicast to a CTA set, or split over a CTA pair
    offsets: bool = False        # a load adds im2col offsets (the filter position) to the pixels


MODES = {m.name: m for m in (
    TmaMode("tiled", "cuTensorMapEncodeTiled", ".tile", ".tile", ".tile", (1, 2, 3, 4, 5), reduce=True,
            multicast=True),
    TmaMode("im2col", "cuTensorMapEncodeIm2col", ".im2col", None, ".im2col", (3, 4, 5), offsets=True),
    # the qualifier is .im2col::w or .im2col::w::128 by the box's `wide` (WIDE_QUALIFIERS)
    TmaMode("im2col_wide", "cuTensorMapEncodeIm2colWide", ".im2col::w", None, ".im2col::w", (3, 4, 5),
            feature="has_im2col_w", offsets=True),
    TmaMode("gather4", "cuTensorMapEncodeTiled", ".tile::gather4", ".tile::scatter4", ".tile::gather4", (2,),
            feature="has_gather4"),
    TmaMode("bulk", None, "", "", "", (1, 2, 3, 4, 5), reduce=True),
)}

# a wide im2col box's `wide` -> its load qualifier and the driver's CUtensorMapIm2ColWideMode
WIDE_QUALIFIERS = {"w": ".im2col::w", "w128": ".im2col::w::128"}
WIDE_MODE_ENUMS = {"w": "CU_TENSOR_MAP_IM2COL_WIDE_MODE_W", "w128": "CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128"}


@dataclass(frozen=True)
class Im2col:
    """The im2col modes' own record, one object from sema to the IR (sema/im2col.py makes it, the
    IR box holds it as `im2col={...}`): the pixel box's corners along the spatial dims, outermost
    first, its traversal strides, and for the sm_100a W-only modes the mode and the halo."""

    lower: tuple[int, ...]
    upper: tuple[int, ...]
    strides: tuple[int, ...]
    wide: str = ""       # "w" / "w128": the sm_100a W-only modes (sema/im2col_wide.py); D and H corners are 0
    halo: int = 0        # wide: the pixels past the row (wHalo), rows PIXELS.. of the tile


def mode_of(bulk: bool, im2col: bool, wide: str, gather: bool) -> str:
    """The mode of a box from its declaration's switches (the one place that reads them together)."""
    if bulk:
        return "bulk"
    if im2col:
        return "im2col_wide" if wide else "im2col"
    return "gather4" if gather else "tiled"

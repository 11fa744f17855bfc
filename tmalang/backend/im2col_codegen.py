"""Im2col copies → inline PTX (the im2col and the sm_100a wide im2col modes, targets/tma_modes.py):
a load of a box's pixels and its L2 prefetch. Coordinates are elements already (N, spatial..., C);
both they and the offsets go innermost first, the offsets as 16-bit operands after the barrier
(a load) or the coordinates (a prefetch). A wide load takes {wHalo, wOffset} instead.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import ops
from ..targets import tma_modes
from . import ptx_asm

I16 = ir.IntType(16)


def _pixels(g, o: ops.Im2colLoad | ops.Im2colPrefetch) -> tuple[list[ir.Value], list[ir.Value]]:
    """(coordinates, offsets), innermost first."""
    return [g.expr(c) for c in reversed(o.coords)], [g.b.trunc(g.expr(c), I16) for c in reversed(o.offsets)]


def im2col_load(g, o: ops.Im2colLoad) -> None:
    box = g.boxes[o.box]
    coords, offsets = _pixels(g, o)
    rank, head = len(coords), [g.address(o.dest), g.tensor_map(o.box), *coords, g.address(o.barrier)]
    if box.wide:   # {wHalo, wOffset}: the box's halo and the load's one offset
        template = ptx_asm.cache_hint(ptx_asm.tma_load_im2col_wide(rank, tma_modes.WIDE_QUALIFIERS[box.wide]),
                                      "::bytes", box.cache)
        g.asm(template, ",".join(["r", "l"] + ["r"] * rank + ["r", "h", "h"]), [*head, I16(box.halo), *offsets])
        return
    template = ptx_asm.cache_hint(ptx_asm.tma_load_im2col(rank), "::bytes", box.cache)
    g.asm(template, ",".join(["r", "l"] + ["r"] * rank + ["r"] + ["h"] * len(offsets)), [*head, *offsets])


def im2col_prefetch(g, o: ops.Im2colPrefetch) -> None:
    """The same pixels into L2; a wide box's prefetch takes {wHalo, wOffset} as its load does."""
    box = g.boxes[o.box]
    coords, offsets = _pixels(g, o)
    mode = tma_modes.WIDE_QUALIFIERS[box.wide] if box.wide else tma_modes.MODES[box.mode].prefetch
    info = [I16(box.halo), *offsets] if box.wide else offsets
    template = ptx_asm.cache_hint(ptx_asm.tma_prefetch(len(coords), mode, len(info)), mode, box.cache)
    g.asm(template, ",".join(["l"] + ["r"] * len(coords) + ["h"] * len(info)), [g.tensor_map(o.box), *coords, *info])


IM2COL_EMITTERS = {ops.Im2colLoad: im2col_load, ops.Im2colPrefetch: im2col_prefetch}

"""Which Tensor Memory cells hold a value (E422).

Tensor Memory holds nothing the program may use until something writes it: after
`tcgen05.alloc` its cells keep whatever an earlier kernel left there. So each CTA keeps, beside
its Tensor Memory, one flag per cell (lane x column): written since the allocation. The writers
are a `tcgen05.mma` that overwrites (its tile's first, or the first after `tmem_zero`), a
`tcgen05.cp` and a `tcgen05.st` (row math into a tmem tile); the flags are set when the write
happens (an MMA's or copy's when its commit completes), and cleared again by `tcgen05.dealloc`.

E422 is reported where a value that nothing wrote would be used:
  - a `tcgen05.mma` that accumulates (adds onto D) into cells not all written;
  - a `tcgen05.ld` whose values leave Tensor Memory: an epilogue into shared memory, row math
    into a row register or shared memory.
Row math from Tensor Memory back into Tensor Memory (`t.o = t.o * f.x`) only moves values: the
lanes it writes are written where every Tensor Memory cell it read in that lane was, and carry
the missing value on otherwise, to be reported where it is used. (attention_sm100's correction
rescales O before the tile's first P·V, which then overwrites it: a correct program.)
"""

from __future__ import annotations

import numpy as np

from ..ir import exprs as ex
from .state import ProtocolError

CODE = "E422"


def fresh(lanes: int, columns: int) -> np.ndarray:
    """The flags of a CTA's Tensor Memory before anything is written: none."""
    return np.zeros((lanes, columns), dtype=bool)


def freed(m, held: int) -> None:
    """tcgen05.dealloc: the columns past the `held` ones still allocated hold nothing any more."""
    m.tmem_written[:, held:] = False


def cells(m, ref: ex.BufferRef, stage: int, col: int = 0, width: int | None = None) -> tuple[slice, slice]:
    """(lanes, columns) of stage `stage` of tmem tile `ref`, from `col` on, `width` columns (all)."""
    decl = m.tmem_tiles[ref.name]
    start = decl.stage_column(stage) + col
    return slice(0, decl.shape[0]), slice(start, start + (decl.shape[1] - col if width is None else width))


def wrote(m, where: tuple[slice, slice]) -> None:
    m.tmem_written[where] = True


def mma_into(c, o, stage: int, overwrite: bool, who: str) -> None:
    """A tcgen05.mma runs in CTA `c`: an overwrite writes D; an accumulate reads it first."""
    where = cells(c, o.d, stage)
    if not overwrite:
        _require(c, where, "tcgen05.mma accumulates into", _tile(o.d, stage), o.span,
                 [who, "a tile's first MMA must overwrite it: `t.d = 0` (tmem_zero) before it makes the next MMA "
                  "overwrite; the flag is one per tile name, so every stage's first MMA needs it, not only the "
                  "tile's first; or fill the tile first (tcgen05.cp, tcgen05.st)"])
    wrote(c, where)


def read(m, ref: ex.BufferRef, stage: int, lanes: slice, col: int, width: int | None, what: str, span,
         who: str) -> None:
    """A tcgen05.ld of `lanes`, `width` columns from `col` (all), whose values leave Tensor Memory."""
    _, columns = cells(m, ref, stage, col, width)
    _require(m, (lanes, columns), what, _tile(ref, stage), span,
             [who, "no tcgen05.mma, tcgen05.cp or tcgen05.st wrote these cells since the allocation: they hold "
              "no value (a steps loop that ran no step, a stage no MMA has reached, or `t.d = 0` with no "
              "MMA after it)"])


def carried(m, refs: list[tuple[ex.BufferRef, int, int]], lanes: slice) -> np.ndarray:
    """Per lane of `lanes`, [n, 1]: whether every Tensor Memory cell that row math reads there,
    from (tile, stage) in `refs` (each from its TmemRef's column on), was written."""
    ok = np.ones((lanes.stop - lanes.start, 1), dtype=bool)
    for ref, stage, col in refs:
        _, columns = cells(m, ref, stage, col)
        ok &= m.tmem_written[lanes, columns].all(axis=1, keepdims=True)
    return ok


def tmem_reads(m, w, value: ex.Expr) -> list[tuple[ex.BufferRef, int, int]]:
    """(tile, stage, first column) of each Tensor Memory operand of a row math value."""
    return [(e.tile, m.value(w, e.tile.index), e.col) for e in ex.walk(value) if isinstance(e, ex.TmemRef)]


def stored(m, dest: ex.BufferRef, stage: int, lanes: slice, defined: np.ndarray) -> None:
    """tcgen05.st of row math into `lanes` of a tmem tile: written where its operands were."""
    _, columns = cells(m, dest, stage)
    m.tmem_written[lanes, columns] = defined


def _require(m, where: tuple[slice, slice], what: str, tile: str, span, notes: list[str]) -> None:
    missing = ~m.tmem_written[where]
    if not missing.any():
        return
    lanes, columns = where
    lane, column = (int(i) for i in np.argwhere(missing)[0])
    raise ProtocolError(CODE, f"{what} {tile} (lanes {lanes.start}..{lanes.stop - 1}, columns "
                        f"{columns.start}..{columns.stop - 1} of CTA {m.cta}'s Tensor Memory), which nothing has "
                        f"written since the allocation: lane {lanes.start + lane}, column {columns.start + column} "
                        f"and {int(missing.sum()) - 1} more cells hold no value", span, notes)


def _tile(ref: ex.BufferRef, stage: int) -> str:
    return f"'{ref.name}[{stage}]'"

"""Where a thread's rows are: the two layouts row math runs on (backend/row_codegen.py).

A row value is a list of the rows a thread holds, each a list of f32 SSA values: its columns,
or one value (per row, or uniform). The layouts differ in which rows and columns a thread holds,
how it reads and writes them, and whether a row's reduction crosses threads.

- `LaneRows` (tcgen05, sm_100a): thread t of warp w holds row 32·(w % 4) + t % 32, all of its
  columns, as tcgen05.ld/st.32x32b give them. A reduction is the thread's own.
- `FragmentRows` (wgmma, sm_90a): the m64nNk16 accumulator fragment. Thread t of warp w in
  warpgroup g holds rows 64g + 16(w % 4) + t/4 and that + 8, and of each 8 columns the two at
  2·(t % 4): register i of an accumulator is row half (i % 4) / 2, column 8(i / 4) + 2(t % 4) +
  i % 2. The four threads of a quad share a row, so a reduction ends in two butterfly
  shuffles (xor 1, xor 2).
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import exprs as ex
from ..targets.dtypes import DTYPES
from ..targets.tcgen05 import instructions as tcgen05
from .tcgen05_codegen import load_columns, tile_address
from .tile_math import STORAGE

I32, F32 = ir.IntType(32), ir.FloatType()
FULL_MASK = I32(0xFFFFFFFF)


def holds_fragments(g) -> bool:
    """Whether the role being emitted keeps wgmma accumulators: its rows are fragment rows."""
    return g.role.name in g.accumulator_roles.values()


class LaneRows:
    """One row per thread: the Tensor Memory lane tcgen05.ld.32x32b gives it."""

    def __init__(self, g):
        self.g, b = g, g.b
        quarter = b.and_(b.sub(g.warp, I32(g.role.first_warp)), I32(3))
        self.row = b.add(b.mul(quarter, I32(32)), b.and_(g.tid, I32(31)))
        self.lanes = b.shl(b.mul(quarter, I32(32)), I32(16))      # TMEM address: lane in bits 31..16

    def rows(self) -> list[ir.Value]:
        return [self.row]

    def column(self, index: int) -> ir.Value:
        return I32(index)

    def offset(self, index: int) -> int:
        """Element `index`'s column minus element 0's."""
        return index

    def width(self, held: int) -> int:
        """The row's column count, from the values a thread holds of it."""
        return held

    def combine(self, value: ir.Value, combine) -> ir.Value:
        return value

    def leaf(self, e: ex.Expr) -> list[list[ir.Value]]:
        if isinstance(e, ex.RowVar):
            return [[self.g.b.load(slot) for slot in self.g.rows[e.name]]]
        width = self.g.tmem_tiles[e.tile.name].shape[1] - e.col
        taddr = self.g.b.add(self.g.b.add(tile_address(self.g, e.tile), self.lanes), I32(e.col))
        return [[self.g.b.bitcast(v, F32) for v in load_columns(self.g, taddr, width)]]


class FragmentRows:
    """Two rows per thread, a quarter of each row's columns: the wgmma accumulator fragment."""

    def __init__(self, g):
        self.g, b = g, g.b
        thread = g.here(b.sub(g.tid, I32(32 * g.role.first_warp)))
        lane = b.and_(thread, I32(31))
        top = b.add(b.mul(b.lshr(thread, I32(7)), I32(64)), b.mul(b.and_(b.lshr(thread, I32(5)), I32(3)), I32(16)))
        self.row0 = b.add(top, b.lshr(lane, I32(2)))
        self.col0 = b.mul(b.and_(lane, I32(3)), I32(2))
        self.quad_leader = b.icmp_unsigned("==", b.and_(lane, I32(3)), I32(0))

    def rows(self) -> list[ir.Value]:
        return [self.row0, self.g.b.add(self.row0, I32(8))]

    def column(self, index: int) -> ir.Value:
        """Column of a held row's element `index` (pairs of adjacent columns, 8 apart)."""
        return self.g.b.add(self.col0, I32(self.offset(index)))

    def offset(self, index: int) -> int:
        return 8 * (index // 2) + index % 2

    def width(self, held: int) -> int:
        return 4 * held

    def combine(self, value: ir.Value, combine) -> ir.Value:
        """Combine a thread's partial reduction with its quad's: every thread gets the row's."""
        shuffle = _shuffle(self.g)
        for distance in (1, 2):
            value = combine(value, self.g.b.call(shuffle, [FULL_MASK, value, I32(distance), I32(0x1F)]))
        return value

    def leaf(self, e: ex.Expr) -> list[list[ir.Value]]:
        if isinstance(e, ex.RowVar):
            return [[self.g.b.load(slot)] for slot in self.g.rows[e.name]]
        if isinstance(e, ex.BufferRef):
            return [self.column_vector(e)] * 2
        return [[self.g.b.load(r) for r in regs] for regs in accumulator_rows(self.g, e.name)]

    def row_vector(self, ref: ex.BufferRef) -> list[list[ir.Value]]:
        """The values of an smem row vector [R] at the thread's two rows, widened to f32."""
        g, b = self.g, self.g.b
        box = g.boxes[g.buffers[ref.name].box]
        itemsize = DTYPES[box.dtype].itemsize
        values = []
        for row in self.rows():
            pointer = b.inttoptr(b.add(g.address(ref), b.mul(row, I32(itemsize))), ir.PointerType(addrspace=3))
            value = b.load(pointer, typ=STORAGE[box.dtype])
            value.align = itemsize
            values.append([value if box.dtype == "f32" else b.fpext(value, F32)])
        return values

    def column_vector(self, ref: ex.BufferRef) -> list[ir.Value]:
        """The thread's columns of an smem column vector [C] (the same for both its rows): the
        pair at 8j + 2(t % 4) for each j, one two-element load per pair, widened to f32."""
        g, b = self.g, self.g.b
        box = g.boxes[g.buffers[ref.name].box]
        columns = [n for n in box.shape if n != 1][0]
        storage = STORAGE[box.dtype]
        itemsize = DTYPES[box.dtype].itemsize
        values = []
        for j in range(columns // 8):
            index = b.add(self.col0, I32(8 * j))
            address = b.add(g.address(ref), b.mul(index, I32(itemsize)))
            pointer = b.inttoptr(address, ir.PointerType(ir.VectorType(storage, 2), addrspace=3))
            pair = b.load(pointer)
            pair.align = 2 * itemsize
            for half in range(2):
                v = b.extract_element(pair, I32(half))
                values.append(v if box.dtype == "f32" else b.fpext(v, F32))
        return values


def accumulator_rows(g, name: str) -> list[list[ir.AllocaInstr]]:
    """An accumulator's registers by held row: half h has registers 4j + 2h, 4j + 2h + 1."""
    regs = g.accumulators[name]
    return [[regs[i] for i in range(len(regs)) if (i % 4) // 2 == half] for half in range(2)]


def _shuffle(g) -> ir.Function:
    name = "llvm.nvvm.shfl.sync.bfly.f32"
    return g.module.globals.get(name) or ir.Function(g.module, ir.FunctionType(F32, [I32, F32, I32, I32]), name)


def layout_of(g):
    return FragmentRows(g) if holds_fragments(g) else LaneRows(g)


def store_tmem_row(g, taddr: ir.Value, values: list[ir.Value]) -> None:
    """tcgen05.st of this thread's lane, in power-of-two chunks, then wait::st."""
    done = 0
    while done < len(values):
        n = 1 << (min(len(values) - done, g.ld_width).bit_length() - 1)
        registers = [f"${i + 1}" for i in range(n)]
        chunk = [g.b.bitcast(v, I32) for v in values[done:done + n]]
        g.asm(tcgen05.st("$0", registers, "32x32b", n), ",".join(["r"] * (n + 1)),
              [g.b.add(taddr, I32(done)), *chunk])
        done += n
    g.asm(tcgen05.WAIT_ST, "", [])


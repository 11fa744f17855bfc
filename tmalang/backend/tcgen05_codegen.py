"""Blackwell tensor-core ops → LLVM IR: tcgen05.mma, commit, and epilogues out of Tensor Memory.

The MMA role is one warp and its first thread issues every tcgen05.mma and commit (they have
single-thread semantics). Operands are described by sm_100 shared-memory descriptors built at
run time from the tile's address, the layout facts (SBO, K-slice offsets) coming from the same
K-major tile model as wgmma's. Whether an MMA adds to its accumulator is a per-tile flag, clear at the
start, that `tmem_zero` clears and every MMA sets, so the first MMA of a tile computes D = A·B.

An epilogue runs on one warpgroup: warp q reads lanes 32q .. 32q + 31 (rows) of the tile with
tcgen05.ld.32x32b, one register per column, and its tcgen05.wait::ld takes the loaded registers
as operands, so nothing that uses them can be scheduled above the wait.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import exprs as ex
from ..ir import ops
from ..targets import wgmma
from ..targets.tcgen05 import descriptors
from ..targets.tcgen05 import instructions as tcgen05
from . import cluster_codegen, pair_codegen
from .mma_codegen import store_epilogue_pair

I32, I64, F32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
LD_MAX = 128   # registers of the widest tcgen05.ld.32x32b (x128)


def tmem_base(g) -> ir.Value:
    """The TMEM address tcgen05.alloc wrote into its smem slot (published before the roles run)."""
    alloc = next(o for o in g.kernel.body if isinstance(o, ops.TmemAlloc))
    slot = g.b.inttoptr(g.b.add(g.smem_base, I32(alloc.offset)), ir.PointerType(addrspace=3))
    return g.b.load(slot, typ=I32)


def tile_address(g, ref: ex.BufferRef) -> ir.Value:
    """Lane 0, first column of stage `ref.index` of a tmem tile (stages `pitch()` columns apart)."""
    decl = g.tmem_tiles[ref.name]
    column = g.b.add(I32(decl.column), g.b.mul(g.expr(ref.index), I32(decl.pitch())))
    return g.b.add(tmem_base(g), column)


def _first_thread(g, body) -> None:
    g.if_then(g.b.icmp_unsigned("==", g.tid, I32(32 * g.role.first_warp)), body)


def _accumulate_flag(g, name: str) -> ir.AllocaInstr:
    """0 until the first MMA into the tile: Tensor Memory starts undefined, so it overwrites."""
    if name not in g.tmem_flags:
        g.tmem_flags[name] = g.alloca(f"{name}.accumulate", init=I32(0))
    return g.tmem_flags[name]


def _descriptor(g, ref: ex.BufferRef) -> tuple[wgmma.KMajorTile, ir.Value]:
    box = g.boxes[g.buffers[ref.name].box]
    dtype = "tf32" if box.dtype == "f32" else box.dtype   # f32 tiles are multiplied as tf32
    rows, cols = box.held_shape()   # a CTA holds half of a pair box
    tile = wgmma.KMajorTile(rows, cols, dtype, box.swizzle)
    base = descriptors.kmajor_descriptor(tile)
    encoded = g.b.lshr(g.b.and_(g.b.zext(g.address(ref), I64), I64(0x3FFFF)), I64(4))
    return tile, g.b.or_(encoded, I64(base))


def _tmem_zero(g, o: ops.TmemZero) -> None:
    g.b.store(I32(0), _accumulate_flag(g, o.tile.name))


def _tcgen05_mma(g, o: ops.Tcgen05Mma) -> None:
    decl = g.tmem_tiles[o.d.name]
    flag = _accumulate_flag(g, o.d.name)
    tile_a, desc_a = _descriptor(g, o.a)
    tile_b, desc_b = _descriptor(g, o.b)
    m, n = decl.shape
    group = g.kernel.cta_group   # a pair's MMA is M = 2 x 128: each CTA's rows, in each CTA's lanes
    idesc = descriptors.instruction_descriptor(tile_a.dtype, tile_b.dtype, "f32", m * group, n, group)
    d_tmem = tile_address(g, o.d)

    def issue():
        template = tcgen05.mma("$0", "$1", "$2", "$3", "$4", tile_a.dtype, group)
        for k in range(tile_a.k_steps):
            da = g.b.add(desc_a, I64(tile_a.k_step_offset(k) >> 4))
            db = g.b.add(desc_b, I64(tile_b.k_step_offset(k) >> 4))
            g.asm(template, "r,l,l,r,r", [d_tmem, da, db, I32(idesc), g.b.load(flag)])
            g.b.store(I32(1), flag)
    _first_thread(g, issue)


def _tcgen05_cp(g, o: ops.Tcgen05Cp) -> None:
    """tcgen05.cp.128x256b per 8 columns: the descriptor's start address steps 32 bytes along the
    tile's swizzled rows, as an MMA's does per K step of 8 tf32 elements."""
    flag = _accumulate_flag(g, o.d.name)
    tile, desc = _descriptor(g, o.source)
    d_tmem = g.b.add(tile_address(g, o.d), I32(o.col))

    def issue():
        template = tcgen05.cp("$0", "$1", "128x256b", cta_group=g.kernel.cta_group)
        for chunk in range(tile.k_steps):
            source = g.b.add(desc, I64(tile.k_step_offset(chunk) >> 4))
            g.asm(template, "r,l", [g.b.add(d_tmem, I32(8 * chunk)), source])
        g.b.store(I32(1), flag)   # the next MMA adds onto the copy
    _first_thread(g, issue)


def _tcgen05_commit(g, o: ops.Tcgen05Commit) -> None:
    """Already inside the role's elect. A pair's commit arrives in both CTAs of the pair."""
    address = g.address(o.barrier)
    if g.kernel.cta_group == 2:
        g.asm(tcgen05.commit("$0", 2, "$1"), "r,h", [address, pair_codegen.pair_mask(g)])
    else:
        g.asm(tcgen05.commit("$0"), "r", [address])


def _tcgen05_commit_cluster(g, o: ops.Tcgen05CommitCluster) -> None:
    """The release of a slot other CTAs multicast into: one arrival on the barrier at the same
    offset in every CTA of this CTA's set (the cluster: ranks 0..N-1, the 16-bit mask 2^N - 1)."""
    mask = cluster_codegen.mask(g, o.ctas)
    g.asm(tcgen05.commit("$0", g.kernel.cta_group, "$1"), "r,h", [g.address(o.barrier), mask])


def _tmem_epilogue(g, o: ops.TmemEpilogue) -> None:
    ref = next(e for e in ex.walk(o.value) if isinstance(e, ex.TmemRef))
    cols = g.boxes[g.buffers[o.dest.name].box].shape[1]
    quarter = g.b.and_(g.b.sub(g.warp, I32(g.role.first_warp)), I32(3))
    row = g.b.add(g.b.mul(quarter, I32(32)), g.b.and_(g.tid, I32(31)))
    lanes = g.b.shl(g.b.mul(quarter, I32(32)), I32(16))
    taddr = g.b.add(g.b.add(tile_address(g, ref.tile), lanes), I32(ref.col))
    values = [g.b.bitcast(v, F32) for v in load_columns(g, taddr, cols)]
    for j in range(0, cols, 2):
        store_epilogue_pair(g, o, row, I32(j), values[j:j + 2])


def load_columns(g, taddr: ir.Value, cols: int) -> list[ir.Value]:
    """`cols` 32-bit columns of this thread's lane, in tcgen05.ld chunks of a power of two."""
    values: list[ir.Value] = []
    while len(values) < cols:
        n = 1 << (min(cols - len(values), g.ld_width).bit_length() - 1)
        registers = [f"${i}" for i in range(n)]
        ret = g.registers(I32, n)
        loaded = g.asm(tcgen05.ld(registers, f"${n}", "32x32b", n), ",".join(["=r"] * n + ["r"]),
                       [g.b.add(taddr, I32(len(values)))], ret=ret)
        chunk = [g.b.extract_value(loaded, i) for i in range(n)] if n > 1 else [loaded]
        waited = g.asm(tcgen05.WAIT_LD, ",".join(["=r"] * n + [str(i) for i in range(n)]), chunk, ret=ret)
        values += [g.b.extract_value(waited, i) for i in range(n)] if n > 1 else [waited]
    return values


TCGEN05_EMITTERS = {
    ops.TmemZero: _tmem_zero,
    ops.Tcgen05Mma: _tcgen05_mma,
    ops.Tcgen05Cp: _tcgen05_cp,
    ops.Tcgen05Commit: _tcgen05_commit,
    ops.Tcgen05CommitCluster: _tcgen05_commit_cluster,
    ops.TmemEpilogue: _tmem_epilogue,
}

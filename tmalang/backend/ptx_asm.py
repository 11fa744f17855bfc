"""The PTX text of every asynchronous instruction the backend emits, in one table.

LLVM's NVPTX intrinsics for TMA and mbarriers change between LLVM releases; inline PTX does not,
so the async machinery is emitted as `asm volatile` with a memory clobber (the compiler must not
move smem loads/stores across a wait, fence or copy), and everything else — control flow, index
math, tile math — stays ordinary LLVM IR that the optimizer can improve.

Operand conventions: `$N` are LLVM inline-asm operands; shared addresses are 32-bit ("r"),
tensor-map addresses are 64-bit generic addresses of __grid_constant__ parameters ("l").
"""

from __future__ import annotations


def tma_load(rank: int, pair: bool = False) -> str:
    """With `pair` (.cta_group::2) the mbarrier may be the one of the peer CTA of a tcgen05 pair:
    the pair's leader counts both CTAs' bytes."""
    coords = ", ".join(f"${i + 2}" for i in range(rank))
    group = ".cta_group::2" if pair else ""
    return (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{group} "
            f"[$0], [$1, {{{coords}}}], [${rank + 2}];")


def tma_load_im2col(rank: int) -> str:
    """An im2col load: element coordinates of the first pixel (innermost first), then after the
    barrier the 16-bit im2col offsets, one per spatial dim (innermost first)."""
    coords = ", ".join(f"${i + 2}" for i in range(rank))
    offsets = ", ".join(f"${rank + 3 + i}" for i in range(rank - 2))
    return (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes "
            f"[$0], [$1, {{{coords}}}], [${rank + 2}], {{{offsets}}};")


def tma_load_im2col_wide(rank: int, qualifier: str) -> str:
    """A wide im2col load (sm_100a; `qualifier` is .im2col::w or .im2col::w::128): element
    coordinates innermost first, then after the barrier the 16-bit {wHalo, wOffset} pair."""
    coords = ", ".join(f"${i + 2}" for i in range(rank))
    return (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global{qualifier}"
            f".mbarrier::complete_tx::bytes [$0], [$1, {{{coords}}}], [${rank + 2}], {{${rank + 3}, ${rank + 4}}};")


def tma_load_multicast(rank: int, mask: int | str) -> str:
    """A load whose data and complete_tx go to the same smem/mbarrier offsets of every CTA in `mask`
    (an immediate, or an operand such as `$5` holding a 16-bit register)."""
    coords = ", ".join(f"${i + 2}" for i in range(rank))
    return (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            f".multicast::cluster [$0], [$1, {{{coords}}}], [${rank + 2}], {mask};")


def tma_store(rank: int, reduce: str = "") -> str:
    """With `reduce`, cp.reduce.async.bulk.tensor: the same operands, each element of the box
    reduced into global memory with the operation; no type suffix, the tensor map gives it."""
    coords = ", ".join(f"${i + 1}" for i in range(rank))
    operands = f"[$0, {{{coords}}}], [${rank + 1}];"
    if reduce:
        return f"cp.reduce.async.bulk.tensor.{rank}d.global.shared::cta.{reduce}.tile.bulk_group {operands}"
    return f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group {operands}"


def bulk_store(type_suffix: str = "", reduce: str = "") -> str:
    """A bulk store of $2 bytes from smem $1 to global $0; with `reduce`, cp.reduce.async.bulk,
    which (having no tensor map) names the element type: `type_suffix`, e.g. `s32`, `noftz.f16`."""
    if reduce:
        return f"cp.reduce.async.bulk.global.shared::cta.bulk_group.{reduce}.{type_suffix} [$0], [$1], $2;"
    return "cp.async.bulk.global.shared::cta.bulk_group [$0], [$1], $2;"


def cache_hint(template: str, qualifier_after: str, policy: str) -> str:
    """`template` with an L2 eviction policy: a createpolicy into a scoped register, the
    .L2::cache_hint qualifier after `qualifier_after`, and the policy as the last operand."""
    if policy == "none":
        return template
    hinted = template.replace(qualifier_after, qualifier_after + ".L2::cache_hint", 1)
    return (f"{{ .reg .b64 l2p; createpolicy.fractional.L2::{policy}.b64 l2p, 1.0; "
            f"{hinted[:-1]}, l2p; }}")


def tma_prefetch(rank: int, mode: str = ".tile", offsets: int = 0) -> str:
    """A box into L2 only: the tensor map and the element coordinates, innermost first. An im2col
    prefetch (`mode` .im2col) takes its 16-bit offsets after them, as an im2col load does."""
    coords = ", ".join(f"${i + 1}" for i in range(rank))
    info = f", {{{', '.join(f'${rank + 1 + i}' for i in range(offsets))}}}" if offsets else ""
    return f"cp.async.bulk.prefetch.tensor.{rank}d.L2.global{mode} [$0, {{{coords}}}]{info};"


PTX = {
    # the descriptor at a generic address (of a __grid_constant__ parameter) into the cache
    "tensormap_prefetch": "prefetch.tensormap [$0];",
    # bulk copies without a tensor map: $size bytes between a global address and shared memory
    "bulk_load": "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];",
    "bulk_commit": "cp.async.bulk.commit_group;",
    # four rows of a 2-D tensor map at {column, row0..row3} (PTX ISA 8.6, sm_100a): a gathered load's
    # rows land stacked in smem as one [4, W] box would; a scattered store writes them back
    "gather4_load": "cp.async.bulk.tensor.2d.shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes "
                    "[$0], [$1, {$2, $3, $4, $5, $6}], [$7];",
    "gather4_prefetch": "cp.async.bulk.prefetch.tensor.2d.L2.global.tile::gather4 [$0, {$1, $2, $3, $4, $5}];",
    "scatter4_store": "cp.async.bulk.tensor.2d.global.shared::cta.tile::scatter4.bulk_group "
                      "[$0, {$1, $2, $3, $4, $5}], [$6];",
    # the row of position $1 (of $2) at $3, or $4 (the tensor's rows: just past its end) past the index
    # tensor or for an index outside [0, $4): the H100 faults on a tensor store at a negative row
    "gather_index": "{ .reg .pred q; setp.lt.u32 q, $1, $2; mov.b32 $0, $4; @q ld.global.s32 $0, [$3]; "
                    "setp.ge.u32 q, $0, $4; @q mov.b32 $0, $4; }",
    # element $1 of an index expression's tensor of $2 elements at $3; 0 outside it (§18)
    "element_read": "{ .reg .pred q; setp.lt.u32 q, $1, $2; mov.b32 $0, 0; @q ld.global.nc.s32 $0, [$3]; }",
    "bulk_prefetch": "cp.async.bulk.prefetch.L2.global [$0], $1;",   # $1 bytes at global $0 into L2
    "trap": "trap;",   # a bulk copy outside its tensor (codegen.bulk_guard)
    "bulk_wait": "cp.async.bulk.wait_group $0;",
    "bulk_wait_read": "cp.async.bulk.wait_group.read $0;",
    "mbar_init": "mbarrier.init.shared::cta.b64 [$0], $1;",
    "mbar_expect_tx": "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [$0], $1;",
    "mbar_arrive": "mbarrier.arrive.shared::cta.b64 _, [$0];",
    # dynamic tile loops (backend/claim_codegen.py): the counter claim, its reset, the queue words
    "tile_claim": "atom.relaxed.gpu.global.add.u32 $0, [$1], 1;",
    "tile_counter_reset": "st.relaxed.gpu.global.u32 [$0], $1;",
    "st_shared_u32": "st.shared.u32 [$0], $1;",
    "ld_shared_u32": "ld.shared.u32 $0, [$1];",
    # cluster launch control (sm_100a, PTX ISA 8.6): cancel a CTA not yet started, the 16-byte answer
    # at $0 completing its bytes on mbarrier $1; decoded into its ctaid.x, or $1 when none was canceled
    "clc_try_cancel": "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 "
                      "[$0], [$1];",
    "clc_query": "{ .reg .b128 rr; .reg .b64 rlo, rhi; .reg .pred rc; ld.shared.v2.b64 {rlo, rhi}, [$1]; "
                 "mov.b128 rr, {rlo, rhi}; clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 rc, rr; "
                 "mov.b32 $0, $2; @rc clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 $0, rr; }",
    "mbar_arrive_expect_tx": "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;",
    # arrive on the barrier at the same offset in CTA $1 of the cluster (default .release semantics,
    # as for a local arrive: an explicit .cluster scope costs a cluster-wide fence per arrival)
    "mbar_arrive_remote": "{ .reg .b32 ra; mapa.shared::cluster.u32 ra, $0, $1; "
                          "mbarrier.arrive.shared::cluster.b64 _, [ra]; }",
    # distributed shared memory (peer pipelines, §16b): $0 is a local smem address, $1 the peer's
    # rank; .release.cluster orders this thread's reads and writes of the slot before the peer's
    # next push into it
    "mbar_arrive_peer": "{ .reg .b32 ra; mapa.shared::cluster.u32 ra, $0, $1; "
                        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra]; }",
    "mbar_arrive_expect_tx_peer": "{ .reg .b32 ra; mapa.shared::cluster.u32 ra, $0, $1; "
                                  "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [ra], $2; }",
    # $3 bytes of local smem $1 into smem $0 of CTA $4, completing on its mbarrier $2
    "bulk_push": "{ .reg .b32 rd, rb; mapa.shared::cluster.u32 rd, $0, $4; mapa.shared::cluster.u32 rb, $2, $4; "
                 "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [rd], [$1], $3, [rb]; }",
    # the shared::cluster address of smem offset $1 in CTA $2 of the cluster
    "mapa": "mapa.shared::cluster.u32 $0, $1, $2;",
    # one probe; the loop around it is LLVM IR, so no labels need to be unique
    "mbar_try_wait": "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2; selp.b32 $0, 1, 0, p; }",
    "fence_proxy_async": "fence.proxy.async.shared::cta;",
    "fence_mbarrier_init": "fence.mbarrier_init.release.cluster;",
    "fence_tcgen05_before_thread_sync": "tcgen05.fence::before_thread_sync;",
    "fence_tcgen05_after_thread_sync": "tcgen05.fence::after_thread_sync;",
    "sync_block": "bar.sync 0;",
    "sync_named": "bar.sync $0, $1;",
    "arrive_named": "bar.arrive $0, $1;",        # counts toward the phase, does not wait (turns)
    "sync_warp": "bar.warp.sync -1;",
    "sync_cluster": "barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;",
    "setmaxnreg_inc": "setmaxnreg.inc.sync.aligned.u32 $0;",
    "setmaxnreg_dec": "setmaxnreg.dec.sync.aligned.u32 $0;",
    # programmatic dependent launch (backend/prior_grid.py): wait until the kernel before this one
    # in the stream has finished and its writes are visible
    "wait_prior_grid": "griddepcontrol.wait;",
}

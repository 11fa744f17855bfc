"""CTA pairs (cta_group 2) → LLVM IR: the leader test, and addresses in the leader's smem.

The CTAs of a cluster pair up by %cluster_ctarank, 2p and 2p + 1; the even one leads. `mapa`
turns an smem address of this CTA into the shared::cluster address of the same offset in
another CTA, which is how a peer's TMA load completes on the leader's barrier and a peer's
epilogue releases the leader's accumulator slot.
"""

from __future__ import annotations

from llvmlite import ir

from ..ir import ops
from . import ptx_asm

I16, I32 = ir.IntType(16), ir.IntType(32)


def leader_rank(g) -> ir.Value:
    """The even rank of this CTA's pair."""
    return g.b.and_(g._sreg("cluster.ctarank"), I32(~1 & 0xFFFFFFFF))


def in_leader(g, o: ops.InPairLeader) -> None:
    is_leader = g.b.icmp_unsigned("==", g._sreg("cluster.ctarank"), leader_rank(g))
    g.if_then(is_leader, lambda: g.region(o.body))


def leader_address(g, address: ir.Value) -> ir.Value:
    """The shared::cluster address of `address`'s offset in the pair's leader CTA."""
    return g.asm(ptx_asm.PTX["mapa"], "=r,r,r", [address, leader_rank(g)], ret=I32)


def pair_mask(g) -> ir.Value:
    """The 16-bit CTA mask of this CTA's pair, for multicast commits: bits 2p and 2p + 1."""
    return g.b.trunc(g.b.shl(I32(3), leader_rank(g)), I16)


PAIR_EMITTERS = {
    ops.InPairLeader: in_leader,
    ops.MbarArriveLeader: lambda g, o: g.asm(ptx_asm.PTX["mbar_arrive_remote"], "r,r",
                                             [g.address(o.barrier), leader_rank(g)]),
}

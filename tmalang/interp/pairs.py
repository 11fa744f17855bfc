"""Semantics of CTA pairs (cta_group 2): which CTA leads a pair, and what runs only there.

The CTAs of a cluster pair up by rank: 2p and 2p + 1, the even one leading. One tcgen05.mma
issued in the leader computes for both CTAs (interp/tcgen05.py reads both CTAs' operands and
writes both CTAs' Tensor Memory), and its commits arrive in both. Loads of the rings the MMA
reads complete on the leader's barrier (machine._tma_load), and the releases of the pair's
accumulators arrive there (machine._mbar_arrive_leader).
"""

from __future__ import annotations

from ..ir import ops


def leader(m):
    """The CTA leading `m`'s pair: the even rank of the two."""
    return m.cluster.ctas[m.rank - m.rank % 2]


def pair(m) -> list:
    """The CTAs a tcgen05 op of `m` works for: both CTAs of its pair, or `m` alone (cta_group 1)."""
    if m.kernel.cta_group != 2:
        return [m]
    first = leader(m).rank
    return m.cluster.ctas[first : first + 2]


def in_pair_leader(m, w, o: ops.InPairLeader):
    if leader(m) is m:
        yield from m.region(w, o.body)


SEMANTICS = {ops.InPairLeader: in_pair_leader}

"""Peer pipelines (`pipeline P[S] { f: Box } peer +K`): distributed shared memory, a ring across
the CTAs of a cluster. Produce blocks in the CTA of rank r fill the slot of the CTA of rank
(r + K) % N, whose consume blocks drain it (passes/expand_pipelines.py: tile math into a local
send slot, then one thread pushes it with cp.async.bulk.shared::cluster.shared::cta and
completes the peer's `full` barrier; the consumer releases the slot on its producer's `empty`).

What makes that sound, checked here:
  - a cluster of N >= 2 CTAs and 1 <= K <= N - 1, and no CTA pairs, whose leader-side barrier
    rewriting knows nothing of peers (E458);
  - a produce block holds only tile math into its own fields, each once (E459, E070): the pushed
    bytes are exactly the slot, and the threads that wrote it fence before the push;
  - smem fields only (E478): a push moves shared memory;
  - no block under a `steps` loop whose extent names the tile loop's first index, which differs
    between the CTAs of a cluster (E479): every CTA must push as many slots as its peer consumes.
    The tile loop itself runs the same cluster tiles in every CTA of a cluster (§16), and the
    pairing rule of a role on both sides (E103: produce first) keeps a ring of CTAs from waiting
    on each other in a circle.
"""

from __future__ import annotations

import re

from ..diagnostics import error
from ..syntax import ast
from .declarations import KernelInfo, Pipeline


def check_decl(pipe: Pipeline, d: ast.PipelineDecl) -> None:
    pipe.peer, pipe.peer_span = d.peer, d.peer_span
    if d.peer and pipe.tmem_fields:
        raise error("E478", f"peer pipeline '{d.name}' has Tensor Memory fields", d.peer_span,
                    "a push moves shared memory: declare smem fields")


def check_kernel(info: KernelInfo) -> None:
    for pipe in (p for p in info.symbols.values() if isinstance(p, Pipeline) and p.peer):
        if info.cluster < 2 or not 1 <= pipe.peer < info.cluster:
            have = f"a cluster of {info.cluster}" if info.cluster > 1 else "no cluster"
            raise error("E458", f"peer pipeline '{pipe.name}' pushes {pipe.peer} rank(s) on, in a kernel with {have}",
                        pipe.peer_span, "declare `cluster N` (with `grid persistent`) and a peer offset in 1..N - 1")
        if info.cta_group == 2:
            raise error("E458", f"peer pipeline '{pipe.name}' in a kernel of CTA pairs (cta_group 2)", pipe.peer_span,
                        "v0 keeps distributed shared memory and CTA pairs apart")


def cluster_varying(info: KernelInfo, scope) -> list[str]:
    """The names whose value differs between the CTAs of one cluster: the tile indices the cluster
    spreads its CTAs along (the first; the second too for `cluster RxC` with C > 1) and the CTA's
    cluster coordinates."""
    spread = scope.tile_vars[:2 if info.cluster_cols > 1 else 1]
    return [*spread, "cluster.rank", "cluster.x", "cluster.y"]


def check_block(info: KernelInfo, s, pipe: Pipeline, scope, producing: bool) -> None:
    """Before the block's statements: the loops around it, and what a produce block holds."""
    if not pipe.peer:
        return
    for loop in scope.nest:
        names = set(re.findall(r"[A-Za-z_][\w.]*", loop[1])) if loop[0] == "steps" else set()
        varying = next((v for v in cluster_varying(info, scope) if v in names), None)
        if varying is not None:
            raise error("E479", f"a block of peer pipeline '{pipe.name}' under a steps loop whose extent uses "
                        f"'{varying}'", s.span, f"'{varying}' differs between the CTAs of a cluster, so their trip "
                        "counts would differ and a push would wait for a peer that never consumes it")
    if producing:
        for x in s.body:
            if not (isinstance(x, ast.Assign) and x.target.name == s.slot and x.target.field is not None):
                raise error("E459", f"a produce block of peer pipeline '{pipe.name}' holds only tile math into "
                            f"its slot ({s.slot}.field = ...)", x.span,
                            "the compiler pushes the slot to the peer CTA once the role has written every field")


def check_assign(s: ast.Assign, scope) -> bool:
    """Tile math into a peer pipeline's slot from its produce block: true when it is one (the
    field is recorded; a second write of it is E070)."""
    pipe = scope.pipeline
    if pipe is None or not scope.producing or not pipe.peer or s.target.name != scope.slot:
        return False
    if s.target.field in scope.loaded:
        raise error("E070", f"field '{s.target.field}' is written twice in this produce block", s.span,
                    "the slot is pushed once: write each field once")
    scope.loaded.add(s.target.field)
    return True

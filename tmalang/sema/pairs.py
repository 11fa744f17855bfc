"""CTA pairs in sema: `cta_group 2`, pair boxes, and what the pair's MMA role may do.

With `cta_group 2` the CTAs of a cluster pair up (ranks 2p and 2p + 1) and one tcgen05.mma works
for both: each CTA holds its own 128 rows of A and half of B (a `pair` box), and the MMA writes
each CTA's 128 rows of D into that CTA's Tensor Memory. Only the pair's leader CTA (the even
rank) runs the MMA role, so that role holds nothing a peer CTA would have to run: loops,
produce/consume blocks, `mma` and `t.d = 0`. The rings it consumes are filled by TMA loads,
whose bytes complete on the leader's barrier; the tmem pipelines it produces are drained by
another role in each CTA.
"""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from .declarations import Box, KernelInfo, Pipeline

CTA_GROUPS = (1, 2)
_MMA_ROLE_STATEMENTS = (ast.ForTiles, ast.ForSteps, ast.Produce, ast.Consume, ast.Mma, ast.Assign)


def check_cta_group(info: KernelInfo, d: ast.CtaGroupDecl) -> None:
    if info.cta_group_decl is not None:
        raise error("E057", "cta_group is already declared", d.span,
                    f"first declared at {info.cta_group_decl.span.location()}")
    if d.size not in CTA_GROUPS:
        raise error("E060", f"cta_group must be 1 or 2, got {d.size}", d.span,
                    "tcgen05 pairs at most two CTAs (.cta_group::2)")
    info.cta_group, info.cta_group_decl = d.size, d


def check_pair_box(d: ast.BoxDecl, box: Box) -> None:
    """Each CTA of the pair loads half the rows: whole swizzle atoms of 8 rows when swizzled."""
    rows = box.shape[0]
    if rows % 2 or (box.swizzle != "none" and rows // 2 % 8):
        atoms = " of whole 8-row swizzle atoms" if box.swizzle != "none" else ""
        raise error("E060", f"pair box '{box.name}' has {rows} rows, which do not split in two halves{atoms}",
                    d.option_spans["pair"], "each CTA of the pair loads and holds half of the box's rows")


def check_pair_tile(box: Box, span) -> None:
    """A pair box's tile holds half the box in each CTA: only the pair's MMA reads it, whole."""
    if box.pair:
        raise error("E060", f"box '{box.name}' is a pair box: each CTA holds half of it, and only tcgen05.mma "
                    "reads it (as its b operand)", span, "declare a second box over the tensor for other uses")


def check_kernel(info: KernelInfo) -> None:
    """Whole-kernel rules, once every role body has been checked."""
    for box in info.symbols.values():
        if isinstance(box, Box) and box.pair and info.cta_group != 2:
            raise error("E060", f"pair box '{box.name}' needs `cta_group 2`", box.pair_span,
                        "a pair box is split between the two CTAs of a tcgen05 CTA pair")
    if info.cta_group != 2:
        return
    decl = info.cta_group_decl
    if info.cluster % 2:
        raise error("E060", "cta_group 2 pairs the CTAs of a cluster, so the cluster size must be even", decl.span,
                    "declare `cluster 2` (or 4, 8)")
    if info.cluster_cols > 1:   # a pair is two CTAs of adjacent tile rows, same tile column
        raise error("E464", "cta_group 2 with a 2-D cluster is not in v0", info.cluster_decl.span,
                    "a CTA pair takes two adjacent tile rows: declare `cluster N`")
    mma_roles = [r for r in info.roles if any(isinstance(s, ast.Mma) for s in ast.statements(r.decl.body))]
    if not mma_roles:
        raise error("E060", "cta_group 2 pairs tcgen05.mma, and this kernel has no mma", decl.span)
    for role in mma_roles:
        _check_mma_role(info, role)


def _check_mma_role(info: KernelInfo, role) -> None:
    body = ast.statements(role.decl.body)
    for s in body:
        if not isinstance(s, _MMA_ROLE_STATEMENTS) or (isinstance(s, ast.Assign) and s.target.field is None):
            raise error("E060", f"role '{role.name}' issues the pair's MMAs, so it runs in the leader CTA only; "
                        "it may hold loops, produce/consume blocks, mma and `t.d = 0`", s.span)
    for s in body:
        if isinstance(s, ast.Consume):
            _check_fed_by_loads(info, info.symbols[s.pipeline.name], s)
        elif isinstance(s, ast.Produce):
            pipe = info.symbols[s.pipeline.name]
            if role.name in pipe.consumers:
                raise error("E060", f"pipeline '{pipe.name}' is produced and consumed by the pair's MMA role",
                            s.span, "a tmem pipeline of a CTA pair is drained by another role in each CTA")


def _check_fed_by_loads(info: KernelInfo, pipe: Pipeline, block: ast.Consume) -> None:
    """Both CTAs' bytes of a ring the pair's MMA reads complete on the leader's full barrier."""
    produced = [s for r in info.roles for s in ast.statements(r.decl.body)
                if isinstance(s, ast.Produce) and s.pipeline.name == pipe.name]
    if pipe.tmem_fields or not all(any(isinstance(x, ast.Load) for x in p.body) for p in produced):
        raise error("E060", f"the pair's MMA role consumes pipeline '{pipe.name}', which TMA loads do not fill",
                    block.span, "in a CTA pair, both CTAs' loads complete on the leader's barrier, where the MMA "
                    "waits; a pipeline filled by threads has no such barrier")

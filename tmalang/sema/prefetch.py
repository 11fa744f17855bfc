"""Prefetch and L2 cache hints: `prefetch BOX[c..]` (a tensor box into L2), the kernel-level
`prefetch tensormaps` (every tensor-map descriptor, once, at kernel start), and the rule that a
box's `cache` policy must qualify some copy (a hint on a box nothing copies reaches no L2).

A tensor prefetch is issued by one thread like a load outside a pipeline, but it waits for
nothing and lands nowhere: no barrier, no shared memory, and a box partly or wholly outside the
tensor is allowed (the hardware skips what lies outside). Through a bulk box it is a bulk prefetch
(cp.async.bulk.prefetch.L2), which, like a bulk copy, must lie inside the tensor: checked where
the coordinates are known (the interpreter's E477, a trap on the GPU)."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets.tma_modes import MODES
from . import gather, im2col, im2col_wide, offsets
from .declarations import Box, KernelInfo
from .scope import Scope, int_expr

PREFETCH_DECLS = ("tensormaps",)


def check_prefetch(info: KernelInfo, s: ast.Prefetch, scope: Scope) -> None:
    box = info.box_for(s.box)
    if MODES[box.mode].prefetch is None:
        raise error("E487", f"{box.mode.replace('_', ' ')} box '{box.name}' cannot be prefetched (v0)", s.span,
                    "prefetch through a tiled box over the tensor")
    # through an im2col box, element coordinates of the tensor and its offsets; through another, none
    (im2col_wide.check_copy if box.mode == "im2col_wide" else im2col.check_copy)(box, s, "prefetch")
    coords = gather.check_copy(info, s, box, s.coords, scope)
    if box.im2col is None and len(coords) != len(box.shape):
        raise error("E065", f"box '{box.name}' has rank {len(box.shape)}, got {len(coords)} coordinates", s.span)
    for c in coords:
        int_expr(info, c, scope)
    offsets.check_prefetch(box, s)
    if scope.pipeline is not None:
        _in_block(s)
    if box.pair:
        raise error("E452", f"box '{box.name}' is a pair box, whose tensor map covers half of its rows", s.span,
                    "declare a second box over the tensor for the prefetch")


def check_block(body: list) -> None:
    """Before a produce/consume block's own checks (which would call a prefetch a stray statement)."""
    stmt = next((x for x in ast.statements(body) if isinstance(x, ast.Prefetch)), None)
    if stmt is not None:
        _in_block(stmt)


def _in_block(s: ast.Prefetch) -> None:
    raise error("E451", "a prefetch inside a produce/consume block", s.span,
                "the block's barriers count the bytes that land in its slot, and a prefetch lands none: "
                "issue it in `elect { ... }` before the block")


def check_decl(info: KernelInfo, d: ast.PrefetchDecl) -> None:
    if d.what.name not in PREFETCH_DECLS:
        raise error("E453", f"unknown prefetch declaration '{d.what.name}'", d.what.span,
                    f"expected: prefetch {' | '.join(PREFETCH_DECLS)}; a box is prefetched by a statement in a role")
    if info.prefetch_maps is not None:
        raise error("E453", "tensor maps are already prefetched", d.span,
                    f"first `prefetch tensormaps` at {info.prefetch_maps.span.location()}")
    info.prefetch_maps = d


def check_kernel(info: KernelInfo) -> None:
    """After every role: a multicast box's map covers one CTA's slice (no whole box to prefetch),
    and a cache policy needs a copy through its box."""
    copied: set[str] = set()
    for role in info.roles:
        for s in ast.statements(role.decl.body):
            if isinstance(s, ast.Store) and s.through is not None:   # a staged store copies through its blocks' box
                copied.add(info.symbols[s.through.name].box.name)
            elif isinstance(s, (ast.Load, ast.Store, ast.Prefetch)):
                box = info.box_for(s.source if isinstance(s, ast.Load) else
                                   s.target if isinstance(s, ast.Store) else s.box)
                copied.add(box.name)
            if isinstance(s, ast.Prefetch) and info.multicast_boxes.get(info.box_for(s.box).name):
                raise error("E452", f"box '{s.box.name}' is loaded with multicast, so its tensor map covers one "
                            "CTA's slice of the box", s.span, "declare a second box over the tensor for the prefetch")
    for box in (b for b in info.symbols.values() if isinstance(b, Box)):
        if box.cache != "none" and box.name not in copied:
            decl = next(i for i in info.node.items if isinstance(i, ast.BoxDecl) and i.name == box.name)
            raise error("E455", f"box '{box.name}' has L2 cache policy {box.cache}, but nothing copies through it",
                        decl.option_spans.get("cache", decl.span),
                        "the policy qualifies the box's loads, stores and prefetches; it only names an smem tile here")

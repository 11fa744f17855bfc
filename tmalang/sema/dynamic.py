"""Dynamic tile loops: `for tile (m, n) in tiles(c, T) dynamic` hands tiles out in linear order to
whichever CTA asks next, through a global tile counter (passes/claim_tiles.py).

On sm_100a a `grid tiles` kernel may be dynamic too: each CTA starts with its own tile and takes
the tiles of CTAs it cancels before they start (cluster launch control), with no counter.

The rules keep the claims' protocol sound: every tile loop of the kernel agrees on `dynamic`
(E546: the roles of a CTA share each claim, so all must take claimed tiles); the grid is
persistent, or of tiles on a target with cluster launch control (E547: on sm_90a one CTA per
tile has nothing to balance, and the reset argument counts one claim past the end per CTA); a
role runs one tile loop (E548: every loop would claim again, and the CTA would claim past the
end more than once, or cancel again after a failed cancel); and the cluster has one CTA (E549: the
CTAs of a cluster take adjacent tiles of one block, which one claim per CTA cannot hand out
without sharing the claim through distributed shared memory, not in v0)."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from .declarations import KernelInfo


def check_loop(info: KernelInfo, s: ast.ForTiles, role: str) -> None:
    first = info.tile_space[-1] if info.tile_space is not None else s
    if first.dynamic != s.dynamic:
        one, other = (s, first) if s.dynamic else (first, s)
        raise error("E546", "every tile loop of a kernel must agree on `dynamic`", other.span,
                    f"the loop at {one.span.location()} is dynamic: the roles of a CTA share each claimed tile, "
                    "so all of them must walk claimed tiles")
    if not s.dynamic:
        return
    if info.grid != "persistent" and not info.target.has_launch_control:
        raise error("E547", f"a dynamic tile loop on {info.target.name} needs `grid persistent`", s.span,
                    "the CTAs that finish early take more tiles; a `grid tiles` launch has one CTA per tile, "
                    "and only sm_100a can cancel a CTA that has not started (cluster launch control)")
    if s.stream is not None:
        raise error("E552", "a tile loop is `stream` or `dynamic`, not both", s.stream,
                    "stream-K gives each CTA a fixed range of every tile's steps by its index; there is no tile "
                    "left to hand out to whichever CTA asks")
    if info.cluster > 1:
        shared = ("a cancel's answer with every CTA of the cluster (try_cancel .multicast::cluster::all)"
                  if info.grid == "tiles" else "one claim across the cluster (distributed shared memory)")
        raise error("E549", f"a dynamic tile loop runs in clusters of one CTA, not {info.cluster}",
                    s.span, f"the CTAs of a cluster take adjacent tiles of one block; sharing {shared} "
                    "is not in v0: use `cluster 1`")
    seen = info.dynamic_roles.setdefault(role, s)
    if seen is not s:
        why = ("a second loop would cancel again after a cancel failed, which the PTX ISA leaves undefined"
               if info.grid == "tiles" else "each loop would claim past the end again, and the counter's reset "
               "counts one such claim per CTA")
        raise error("E548", "a role runs one dynamic tile loop", s.span,
                    f"its loop at {seen.span.location()} already claims tiles; {why}")

"""Semantic analysis: AST → KernelInfo (names resolved, hardware rules checked)."""

from __future__ import annotations

from ..diagnostics import error
from ..syntax import ast
from ..targets.arch import Target
from . import declarations as d
from . import assumptions, bulk, dsmem, gather, im2col, im2col_wide, pairs, prefetch, split
from .declarations import KernelInfo, Pipeline
from .statements import check_role_body
from . import wait_cycles
from . import global_races
from . import tmem_init

def _box_decl(info: KernelInfo, x) -> None:
    wide = x.im2col and (x.wide or x.halo is not None)
    (bulk.check_decl if x.bulk else im2col_wide.check_decl if wide else im2col.check_decl if x.im2col
     else d.check_box)(info, x)


_DECLS = {
    ast.GridDecl: d.check_grid, ast.OccupancyDecl: d.check_occupancy, ast.ClusterDecl: d.check_cluster, ast.BoxDecl: _box_decl, ast.PipelineDecl: d.check_pipeline,
    ast.SmemDecl: d.check_smem, ast.MbarrierDecl: d.check_mbarrier, ast.TmemDecl: d.check_tmem,
    ast.CtaGroupDecl: pairs.check_cta_group, ast.PrefetchDecl: prefetch.check_decl,
    ast.AssumeDecl: assumptions.check_decl,
}

# The kernel's name is its PTX entry name, which the launcher looks up, so it is never mangled.
# PTX identifiers are `[a-zA-Z][a-zA-Z0-9_$]*` or `[_$%][a-zA-Z0-9_$]+`: a lone `_` is none, and
# WARP_SZ is PTX's one predefined constant (its other predefined names begin with `%`).
PTX_RESERVED = ("_", "WARP_SZ")


def check(program: ast.Program, target: Target) -> list[KernelInfo]:
    names: dict[str, ast.Kernel] = {}
    infos = []
    for kernel in program.kernels:
        if kernel.name in names:
            raise error("E010", f"kernel '{kernel.name}' is already defined", kernel.name_span)
        if kernel.name in PTX_RESERVED:
            raise error("E018", f"'{kernel.name}' cannot name a kernel: the name is reserved in PTX",
                        kernel.name_span, "a kernel's name is its PTX entry point; pick another")
        names[kernel.name] = kernel
        infos.append(check_kernel(kernel, target))
    return infos


def check_kernel(kernel: ast.Kernel, target: Target) -> KernelInfo:
    info = KernelInfo(kernel, target)
    for p in kernel.params:
        d.check_param(info, p)
    for item in kernel.items:
        if not isinstance(item, ast.RoleDecl):
            _DECLS[type(item)](info, item)
        if isinstance(item, ast.BoxDecl) and item.pair:
            pairs.check_pair_box(item, info.symbols[item.name])
        if isinstance(item, ast.PipelineDecl):
            dsmem.check_decl(info.symbols[item.name], item)
    d.check_roles(info, [i for i in kernel.items if isinstance(i, ast.RoleDecl)])
    for role in info.roles:
        check_role_body(info, role)
    assumptions.check_im2col_slices(info)
    _check_pipelines_used(info)
    dsmem.check_kernel(info)
    prefetch.check_kernel(info)
    gather.check_kernel(info)
    _check_smem_owned(info)
    pairs.check_kernel(info)
    if info.cluster > 1 and info.grid != "persistent":
        raise error("E058", "clusters need `grid persistent` in v0", info.cluster_decl.span,
                    "a persistent grid pads the tile space to whole clusters")
    if info.tile_space is None:
        raise error("E055", f"kernel '{kernel.name}' has no tile loop", kernel.name_span,
                    "the grid is sized from a `for tile (...) in tiles(T, BOX)` loop")
    split.check_used(info)
    wait_cycles.check(info)   # needs each pipeline's roles and blocks checked (E056, E068, E103)
    global_races.check_kernel(info)   # needs every access checked: it compares them pairwise
    tmem_init.check(info)     # needs each pipeline's blocks (E056, E068) and tmem writes (E085, E099) checked
    return info


def _check_smem_owned(info: KernelInfo) -> None:
    """Without the explicit layer nothing orders two roles' accesses to a plain smem buffer: the
    compiler derives barriers for pipelines only. With user mbarriers the protocol is the user's
    (and the interpreter checks it)."""
    if any(isinstance(s, d.Mbarrier) for s in info.symbols.values()):
        return
    for buffer in info.symbols.values():
        if isinstance(buffer, d.SmemBuffer) and len(buffer.users) > 1:
            (first, _), (second, span) = list(buffer.users.items())[:2]
            raise error("E104", f"smem buffer '{buffer.name}' is used by role '{first}' and by role '{second}', "
                        "and nothing orders their accesses", span,
                        "hand data between roles through a pipeline, or order it yourself with mbarriers (§17)")


def _check_pipelines_used(info: KernelInfo) -> None:
    for pipe in info.symbols.values():
        if not isinstance(pipe, Pipeline):
            continue
        if not pipe.producers or not pipe.consumers:
            missing = "produces" if not pipe.producers else "consumes"
            raise error("E068", f"no role {missing} pipeline '{pipe.name}'", pipe.span,
                        "its barriers would never complete: the other side would hang")
        if len(pipe.producers) != len(pipe.consumers):
            raise error("E056", f"pipeline '{pipe.name}' is produced {len(pipe.producers)} time(s) per tile "
                        f"but consumed {len(pipe.consumers)} time(s)", pipe.span,
                        "every produced slot must be consumed once, or one side waits forever")
        produced = sorted(n for n, _ in pipe.produce_nests)
        consumed = sorted(n for n, _ in pipe.consume_nests)
        if produced != consumed:
            where = pipe.consume_nests[0][1]
            raise error("E056", f"pipeline '{pipe.name}' is produced and consumed under different loops, "
                        "so their trip counts can differ", where,
                        "wrap produce and consume blocks in the same tile and steps(...) loops")

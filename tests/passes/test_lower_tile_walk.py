"""lower_tile_walk: the tile loop is lowered once, into plain IR that the interpreter and the
backend both run; neither has tile-walk code of its own. The lowered walk, run in the
interpreter, takes the tiles a small Python reference takes, at odd shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from llvmlite import binding as llvm
from llvmlite import ir as llir

from conftest import EXAMPLES, example_arch
from tmalang.backend import codegen
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.interp import Launch
from tmalang.interp.machine import CTA, SEMANTICS, Cluster
from tmalang.ir import exprs as ex
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES, lower_tile_walk
from tmalang.targets.arch import SM_90A


def _kernel(dims: list, box: list[int], cluster: int, group: int, cols: int = 1, reverse=False) -> ops.KernelOp:
    """A persistent kernel whose one warp walks the tiles, doing nothing but a let per tile; the
    cluster takes (cluster / cols) x cols tiles."""
    walk = ops.ForTiles([f"v{d}" for d in range(len(box))], "t", "B", "i", group, [ops.Let("probe", ex.Const(0))],
                        reverse=reverse)
    return ops.KernelOp("walk", "persistent", cluster, 1, 32, 0, [
        ops.TensorDecl("t", "f32", dims),
        ops.BoxDecl("B", "t", "f32", box, [1] * len(box), "none", "zero", "none", 1, False),
        ops.RoleOp("r", 0, 0, 0, [walk]),
    ], cluster_cols=cols)


def _lowered(dims, box, cluster, group, cols=1, reverse=False) -> ops.KernelOp:
    kernel = _kernel(dims, box, cluster, group, cols, reverse)
    lower_tile_walk.run(kernel, SM_90A)
    return kernel


def _walked(kernel: ops.KernelOp, params: dict, ctas: int) -> dict[int, list[tuple]]:
    """The tile each CTA's warp holds at each probe, running the lowered IR in the interpreter."""
    launch = Launch({}, params, None, SM_90A)
    role = ops.roles(kernel)[0]
    seen = {}
    for first in range(0, ctas, kernel.cluster):
        cluster = Cluster()
        for cta in [CTA(kernel, launch, c, ctas, cluster) for c in range(first, first + kernel.cluster)]:
            warp = cta.warps[0]
            # one step per probe, then the loop's own: vals and the loop's bookkeeping are no steps
            steps = [tuple(warp.env.get(v) for v in ("i", "v0", "v1", "v2")) for _ in cta.region(warp, role.body)]
            seen[cta.cta] = [s[1:] for s in steps[:-1]]
            assert [s[0] for s in steps[:-1]] == list(range(len(steps) - 1)), "the index counts the iterations"
    return seen


def _reference(counts: list[int], cluster: int, group: int, ctas: int, cols: int = 1,
               reverse=False) -> dict[int, list[tuple]]:
    """Tile t of a CTA's cluster, t = ctaid / S, ctaid / S + nctaid / S, ..: row-major, or in
    bands of G/R cluster rows walked column by column (the dims after the first one column,
    row-major); the CTA of rank r takes the tile at (r mod R, r / R) of its cluster's R x C
    block. Reversed, walk index t is the forward order's tile (tiles - 1 - t)."""
    side = cluster // cols
    rows = -(-counts[0] // side)
    space = [rows, -(-counts[1] // cols), *counts[2:]] if len(counts) > 1 else [rows]
    walks = {}
    for cta in range(ctas):
        tiles = []
        for t in range(cta // cluster, math.prod(space), ctas // cluster):
            t = math.prod(space) - 1 - t if reverse else t
            if group:
                height = group // side
                band, at = divmod(t, height * math.prod(space[1:]))
                band_rows = min(rows - band * height, height)
                coords = [band * height + at % band_rows, *np.unravel_index(at // band_rows, space[1:])]
            else:
                coords = list(np.unravel_index(t, space))
            coords[0] = coords[0] * side + cta % cluster % side
            if cols > 1:
                coords[1] = coords[1] * cols + cta % cluster // side
            tiles.append(tuple(int(c) for c in coords) + (None,) * (3 - len(coords)))
        walks[cta] = tiles
    return walks


@pytest.mark.parametrize("dims,box,cluster,group,ctas,cols,reverse", [(*case, 1, False) for case in [
    ([7 * 32 - 5, 5 * 16 - 1], [32, 16], 1, 3, 3),     # grouped, last band short, 3 CTAs
    ([7 * 32 - 5, 5 * 16 - 1], [32, 16], 1, 3, 1),     # the same on one CTA
    ([8 * 32, 8 * 16], [32, 16], 1, 8, 2),
    ([32, 9 * 16 + 1], [32, 16], 1, 4, 5),              # one row of tiles, more CTAs than bands
    ([9 * 32, 16], [32, 16], 2, 2, 4),                  # one column, clusters of 2
    ([6 * 32 - 31, 4 * 16], [32, 16], 1, 0, 3),         # row-major
    ([13 * 32 + 3, 5 * 16 - 7], [32, 16], 2, 6, 6),     # grouped and clustered, dim 0 an odd number of tiles
    ([11 * 32, 7 * 16 + 2], [32, 16], 4, 0, 8),         # row-major in clusters of 4
    ([3 * 8 - 1, 5 * 4 + 1, 7 * 2], [8, 4, 2], 1, 0, 4),   # rank 3
    ([5 * 8 - 1, 5 * 4 + 1, 3 * 2], [8, 4, 2], 1, 2, 3),   # rank 3, bands of 2 rows, last band short
]] + [(*case, False) for case in [
    ([5 * 32 - 3, 3 * 16 + 1], [32, 16], 4, 0, 8, 2),      # 2 x 2 clusters, both dims padded
    ([5 * 32 - 3, 7 * 16 + 1], [32, 16], 4, 4, 4, 2),      # 2 x 2, bands of 2 cluster rows, one cluster
    ([9 * 32, 5 * 16], [32, 16], 8, 8, 16, 4),             # 2 x 4, grouped
    ([3 * 32, 9 * 16 - 2], [32, 16], 8, 0, 8, 2),          # 4 x 2, dim 0 one short of a cluster row
    ([3 * 32, 9 * 16 - 2], [32, 16], 4, 0, 12, 4),         # 1 x 4: along the second index only
    ([3 * 8 - 1, 5 * 4 + 1, 3 * 2], [8, 4, 2], 4, 0, 8, 2),   # rank 3, 2 x 2 over the first two indices
    ([7 * 8, 3 * 4 - 1, 2 * 2], [8, 4, 2], 4, 4, 8, 2),       # rank 3, 2 x 2, grouped
]] + [(*case, True) for case in [                             # reversed: the last tile first
    ([7 * 32 - 5, 5 * 16 - 1], [32, 16], 1, 0, 3, 1),
    ([7 * 32 - 5, 5 * 16 - 1], [32, 16], 1, 3, 1, 1),
    ([13 * 32 + 3, 5 * 16 - 7], [32, 16], 2, 6, 6, 1),
    ([5 * 8 - 1, 5 * 4 + 1, 3 * 2], [8, 4, 2], 1, 2, 4, 1),   # rank 3, grouped: a causal attention walk's shape
    ([5 * 32 - 3, 3 * 16 + 1], [32, 16], 4, 0, 8, 2),
]])
def test_the_lowered_walk_takes_the_reference_tiles(dims, box, cluster, group, ctas, cols, reverse):
    kernel = _lowered(["M", "N", "K"][: len(dims)], box, cluster, group, cols, reverse)
    verify(kernel, "lower_tile_walk", ["lower", *PASS_NAMES])
    assert not any(isinstance(o, ops.ForTiles) for o in ops.walk(kernel.body))
    text = print_ir(kernel)
    assert print_ir(parse_ir(text)) == text
    counts = [-(-d // b) for d, b in zip(dims, box)]
    walked = _walked(kernel, dict(zip("MNK", dims)), ctas)
    assert walked == _reference(counts, cluster, group, ctas, cols, reverse)
    every = sorted(t[: len(dims)] for tiles in walked.values() for t in tiles)
    side = cluster // cols
    padded = [-(-counts[0] // side) * side, -(-counts[1] // cols) * cols, *counts[2:]]   # whole cluster blocks
    assert every == sorted(np.ndindex(*padded)), "every tile once, over all CTAs"
    if group and counts[0] > 1 and ctas // cluster == 1 and not reverse:
        assert walked[0][1] == (side, 0, None), "a band walks its rows first"


def test_the_interpreter_and_the_backend_have_no_tile_walk_of_their_own():
    assert ops.ForTiles not in SEMANTICS and ops.ForTiles not in codegen.EMITTERS
    assert ops.ForStep in SEMANTICS and ops.ForStep in codegen.EMITTERS
    assert ops.Val in SEMANTICS and ops.Val in codegen.EMITTERS


STATIC_WALKS = [p for p in EXAMPLES if " dynamic {" not in p.read_text()]    # a dynamic walk is a claim loop


@pytest.mark.parametrize("path", STATIC_WALKS[:3] + [p for p in STATIC_WALKS if "bias_relu" in p.stem],
                         ids=lambda p: p.stem)
def test_no_tile_loop_reaches_the_final_ir(path):
    c = compile_source(path.read_text(), str(path), Options(arch=example_arch(path)), until="ir")
    assert not any(isinstance(o, ops.ForTiles) for o in ops.walk(c.ir.body))
    assert any(isinstance(o, ops.ForStep) for o in ops.walk(c.ir.body))
    assert c.manifest.grid.tile_dims, "the launch grid still comes from the tile loop"


def test_a_tile_loop_after_lower_tile_walk_is_an_internal_error():
    kernel = _kernel(["M", "N"], [32, 16], 1, 0)
    verify(kernel, "dispatch_roles", ["lower", *PASS_NAMES[:-1]])
    with pytest.raises(TmalangError, match="E999.*after 'lower_tile_walk': for_tiles: none may remain after lower_tile_walk"):
        verify(kernel, "lower_tile_walk", ["lower", *PASS_NAMES])


def test_the_ir_text_names_only_the_special_registers_the_ir_reads():
    text = print_ir(_lowered(["M", "N"], [32, 16], 2, 2))
    assert "sreg(ctaid.x)" in text and "sreg(nctaid.x)" in text
    with pytest.raises(TmalangError, match="E090.*unknown special register 'tid.y'"):
        parse_ir(text.replace("sreg(ctaid.x)", "sreg(tid.y)", 1))


def test_a_val_is_a_register_unless_a_let_binds_its_name_too():
    """x is a let and a val: the val stores into the let's slot. y is only a val: no slot."""
    use = lambda name: ops.If(ex.Var(name), [ops.Sync("role")])   # noqa: E731
    kernel = ops.KernelOp("k", "tiles", 1, 1, 64, 0, [
        ops.RoleOp("a", 0, 0, 0, [ops.Val("x", ex.Sreg("ctaid.x")), use("x"), ops.Val("y", ex.Const(2)), use("y")]),
        ops.RoleOp("b", 1, 1, 0, [ops.Let("x", ex.Const(3)), ops.Val("x", ex.add(ex.Var("x"), ex.Const(1))), use("x")]),
    ])
    verify(kernel, "lower_tile_walk", ["lower", *PASS_NAMES])
    module = llir.Module("k")
    codegen.KernelCodegen(kernel, [], module).emit()
    text = str(module)
    llvm.parse_assembly(text).verify()
    assert '%"x" = alloca' in text and '%"y" = alloca' not in text

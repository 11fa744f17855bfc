"""Panelled boxes (docs §4 "Panelled boxes"): a swizzled box whose rows are P swizzle spans is P panels.

The tensor map describes one panel (manifest, runtime fields, C++ header); every load, store,
reduce and prefetch through the box is P TMA instructions, panel p at inner element coordinate
c + p·span/itemsize into shared memory at p·panel_bytes; expect_tx and smem sizes count the whole
tile. The IR carries nothing new (the split follows from shape, dtype and swizzle), so it round
trips unchanged, and the verifier checks the panelled-box rules. The interpreter keeps tiles logical:
it runs these kernels unchanged. H100 tests: round trips at odd shapes, bit-exact, and multicast
of a panelled box (whose per-CTA row slice lands inside each panel) against an unicast load.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import tmalang
from tmalang.backend import launch_header, ptxas
from tmalang.compiler import Options, compile_source
from tmalang.contract.arrays import array_view
from tmalang.diagnostics import TmalangError
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES
from tmalang.runtime.tensormap import tensor_map_fields

BF16 = ml_dtypes.bfloat16
LOAD = "cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
STORE = "cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group"

# (dtype, box, swizzle): panels = inner bytes / span
CASES = [
    ("bf16", [1, 64, 128], "128B"),    # 2 panels of [1, 64, 64]: attention's head dim 128
    ("f32", [32, 64], "128B"),         # 2 panels of [32, 32]
    ("f32", [16, 64], "64B"),          # 4 panels of [16, 16]
    ("bf16", [8, 128], "32B"),         # 8 panels of [8, 16]: the most a box may have
]


def copy_source(dtype: str, box: list[int], swizzle: str) -> str:
    dims = ", ".join(["B", "M", "N"][-len(box):])
    idx = ", ".join("bmn"[-len(box):])
    shape = ", ".join(map(str, box))
    return f"""
kernel copy(src: {dtype}[{dims}], dst: {dtype}[{dims}]) {{
    grid persistent
    box In  = src[{shape}] swizzle {swizzle}
    box Out = dst[{shape}] swizzle {swizzle}
    pipeline ring[3] {{ t: In }}
    role producer: warp 0 {{
        for tile ({idx}) in tiles(src, In) {{
            produce ring as s {{ load In[{idx}] -> s.t }}
        }}
    }}
    role consumer: warps 4..7 {{
        for tile ({idx}) in tiles(dst, Out) {{
            consume ring as s {{ store Out[{idx}] <- s.t }}
        }}
    }}
}}
"""


def panels(dtype, box, swizzle) -> int:
    return box[-1] * np.dtype(_numpy(dtype)).itemsize // int(swizzle[:-1])


def _numpy(dtype):
    return {"bf16": BF16, "f32": np.float32}[dtype]


def padded(rng, shape, dtype, fill=None):
    """An array of `shape` whose rows are 16-byte aligned (a view into padded rows)."""
    per_row = 16 // np.dtype(dtype).itemsize
    full = (*shape[:-1], -(-shape[-1] // per_row) * per_row)
    base = np.full(full, fill, dtype) if rng is None else rng.standard_normal(full).astype(dtype)
    return base[..., :shape[-1]]


@pytest.mark.parametrize("dtype,box,swizzle", CASES, ids=str)
def test_copy_issues_one_instruction_per_panel(dtype, box, swizzle):
    k = tmalang.compile(copy_source(dtype, box, swizzle))
    p = panels(dtype, box, swizzle)
    assert k.ptx.count(LOAD.format(rank=len(box))) == p
    assert k.ptx.count(STORE.format(rank=len(box))) == p
    # panel p's inner coordinate c·extent + p·panel_cols (an `or` where c·extent has those bits
    # clear) and its smem address tile + p·panel_bytes
    cols, panel_bytes = box[-1] // p, int(np.prod(box[:-1])) * int(swizzle[:-1])
    for i in range(1, p):
        assert re.search(rf"(add\.s32|or\.b32)\s+%r\d+, %r\d+, {i * cols};", k.ptx)
        assert re.search(rf"add\.s32\s+%r\d+, %r\d+, {i * panel_bytes};", k.ptx)
    ptxas.assemble(k.ptx, "sm_90a")


def test_tile_bytes_and_alignment_are_the_whole_box():
    k = tmalang.compile(copy_source("bf16", [1, 64, 128], "128B"))
    explain = k.explain()
    assert re.search(r"ring\.full\s+3\s+1\s+16384\b", explain)       # expect_tx: the whole tile
    buffer = next(o for o in ops.walk(k._c.ir.body) if isinstance(o, ops.BufferDecl))
    assert (buffer.bytes, buffer.align) == (16384, 1024)


def test_explain_lists_the_panels():
    explain = tmalang.compile(copy_source("f32", [16, 64], "64B")).explain()
    assert "  In: 4 panels of [16, 16] (1024 bytes), one TMA copy each, at inner coordinate + p x 16" in explain
    assert "panelled boxes" not in tmalang.compile(copy_source("f32", [16, 16], "64B")).explain()


def test_tensor_map_is_one_panel():
    k = tmalang.compile(copy_source("bf16", [1, 64, 128], "128B"))
    maps = [p for p in k.manifest.ptx_params if hasattr(p, "box_shape")]
    assert [p.box_shape for p in maps] == [(1, 64, 64), (1, 64, 64)]
    src = padded(np.random.default_rng(0), (3, 77, 200), BF16)
    fields = tensor_map_fields(maps[0], array_view(src, "src"), 0x1000)
    assert fields.box_dim == (64, 64, 1) and fields.swizzle == "CU_TENSOR_MAP_SWIZZLE_128B"
    assert fields.global_dim == (200, 77, 3)
    header = launch_header.render(k.manifest, "copy.tma")
    assert header.count("const uint32_t box[] = {1, 64, 64};") == 2


def test_ir_round_trips_and_names_no_panels():
    """The panel split is derived from (shape, dtype, swizzle): nothing new in the IR text."""
    c = compile_source(copy_source("bf16", [1, 64, 128], "128B"), "copy.tma", Options(arch="sm_90a"), until="ir")
    text = print_ir(c.ir)
    assert "shape=[1, 64, 128]" in text and "panel" not in text
    assert print_ir(parse_ir(text)) == text


def _verify(text: str) -> None:
    [kernel] = parse_ir(text)
    verify(kernel, PASS_NAMES[-1], ["lower", *PASS_NAMES])


def test_verifier_checks_panelled_boxes():
    c = compile_source(copy_source("bf16", [1, 64, 128], "128B"), "copy.tma", Options(arch="sm_90a"), until="ir")
    text = print_ir(c.ir)
    _verify(text)
    with pytest.raises(TmalangError, match="E999.*panelled box: rows not whole"):
        _verify(text.replace("shape=[1, 64, 128]", "shape=[1, 64, 96]", 1))
    with pytest.raises(TmalangError, match="E999.*panelled box: rows not whole"):
        _verify(text.replace("shape=[1, 64, 128]", "shape=[1, 4, 128]", 1))
    with pytest.raises(TmalangError, match="E999.*pair, gathered"):
        _verify(re.sub(r"(box @In [^\n]*?)pair=false", r"\1pair=true", text, count=1))


@pytest.mark.parametrize("dtype,box,swizzle", CASES, ids=str)
def test_interpreter_round_trip(dtype, box, swizzle):
    k = tmalang.compile(copy_source(dtype, box, swizzle))
    shape = (3, 77, 200)[-len(box):]
    src = padded(np.random.default_rng(1), shape, _numpy(dtype))
    dst = padded(None, shape, _numpy(dtype), np.nan)
    k.interpret(src, dst, seed=2, explore=1)
    np.testing.assert_array_equal(dst.view(np.uint8), src.view(np.uint8))


CROSS = """
kernel cross(a: f32[M, K], b: f32[P, N], dst: f32[M, N]) {
    grid persistent
    cluster ROWSxCOLS
    box A = a[64, 64] swizzle 128B
    box B = b[64, 64] swizzle 128B
    box Out = dst[64, 64] swizzle 128B
    pipeline ring[2] { a: A, b: B }
    role producer: warp 0 {
        for tile (m, n) in tiles(dst, Out) {
            produce ring as s {
                load A[m, 0] -> s.a MA
                load B[0, n] -> s.b MB
            }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(dst, Out) {
            consume ring as s {
                s.a = s.a + s.b
                store Out[m, n] <- s.a
            }
        }
    }
}
"""


def cross_source(rows: int, cols: int) -> str:
    """dst tile (m, n) = A tile (m, 0) + B tile (0, n) through panelled boxes (two 128-byte panels of
    32 f32): A multicast along a cluster row, B along a cluster column, each CTA loading its rows
    of each panel into every CTA of its set."""
    return (CROSS.replace("ROWSxCOLS", f"{rows}x{cols}").replace("MA", "multicast(n)" if cols > 1 else "")
            .replace("MB", "multicast(m)" if rows > 1 else ""))


def cross_operands(rng, m, n):
    a, b = padded(rng, (m, 64 + 3), np.float32), padded(rng, (64 + 5, n), np.float32)
    expected = a[:, np.arange(n) % 64] + b[np.arange(m) % 64, :]
    return a, b, padded(None, (m, n), np.float32, np.nan), expected


@pytest.mark.parametrize("shape", [(1, 2), (2, 1), (2, 2)], ids=str)
def test_multicast_of_a_panelled_box(shape):
    """Each CTA's slice of rows lands inside every panel: offset part · panel_bytes / CTAs."""
    k = tmalang.compile(cross_source(*shape))
    assert k.ptx.count("multicast::cluster") == 2 * (shape[0] > 1) + 2 * (shape[1] > 1)
    ptxas.assemble(k.ptx, "sm_90a")
    a, b, dst, expected = cross_operands(np.random.default_rng(3), 5 * 64 - 17, 3 * 64 - 5)
    k.interpret(a, b, dst, seed=1, explore=1, ctas=2 * shape[0] * shape[1])
    np.testing.assert_array_equal(dst, expected)


ELEMENTS = """
kernel window(src: bf16[M, N], dst: bf16[M, N]) {
    box In = src[64, 128] swizzle 128B
    box Out = dst[64, 128] swizzle 128B
    smem buf: In
    mbarrier loaded(1)
    role main: warps 0..3 {
        for tile (m, n) in tiles(dst, Out) as i {
            elect {
                prefetch In[m, n]
                expect_tx loaded, 16384
                load In@[m*64 + 1, n*128 + 8] -> buf, loaded
                arrive loaded
            }
            wait loaded, i & 1
            elect {
                store Out[m, n] <- buf
                commit_group
                wait_group read 0
            }
        }
    }
}
"""


def window_reference(src):
    """dst[r, c] = src[r + 1, c + 8], zero past the tensor."""
    shifted = np.zeros(src.shape, np.float32)
    shifted[:-1, :-8] = src[1:, 8:].astype(np.float32)
    return shifted


def test_element_coordinates_and_prefetch_take_panels():
    """Panel p of a box at element coordinate c is at c + p·64: any 16-byte aligned c works."""
    k = tmalang.compile(ELEMENTS)
    assert k.ptx.count(LOAD.format(rank=2)) == 2
    assert k.ptx.count("cp.async.bulk.prefetch.tensor.2d.L2.global.tile") == 2
    assert k.ptx.count(STORE.format(rank=2)) == 2
    ptxas.assemble(k.ptx, "sm_90a")
    src = padded(np.random.default_rng(4), (130, 300), BF16)
    dst = padded(None, (130, 300), BF16, np.nan)
    k.interpret(src, dst, seed=1, explore=1)
    np.testing.assert_array_equal(dst.astype(np.float32), window_reference(src))


def test_reduce_takes_panels():
    k = tmalang.compile(ELEMENTS.replace("store Out[m, n] <- buf", "reduce add Out[m, n] <- buf"))
    assert k.ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group") == 2
    ptxas.assemble(k.ptx, "sm_90a")


STRIDED = """
kernel rows(src: bf16[M, N], dst: bf16[P, N]) {
    grid persistent
    box In  = src[128, 128] strides [2, 1] swizzle 128B
    box Out = dst[64, 128] swizzle 128B
    pipeline ring[2] { t: In }
    role producer: warp 0 {
        for tile (m, n) in tiles(dst, Out) {
            produce ring as s { load In[m, n] -> s.t }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(dst, Out) {
            consume ring as s { store Out[m, n] <- s.t }
        }
    }
}
"""


def test_strided_panelled_box():
    """Every other row of a [128, 128] bf16 box: a [64, 128] tile of two [64, 64] panels, the
    second 64 × 128 bytes in; the strided box's tile matches the unstrided [64, 128] box (E064)."""
    k = tmalang.compile(STRIDED)
    assert k.ptx.count(LOAD.format(rank=2)) == 2 and k.ptx.count(STORE.format(rank=2)) == 2
    assert re.search(r"add\.s32\s+%r\d+, %r\d+, 8192;", k.ptx)
    ptxas.assemble(k.ptx, "sm_90a")
    src = padded(np.random.default_rng(6), (300, 200), BF16)
    dst = padded(None, (150, 200), BF16, np.nan)
    k.interpret(src, dst, seed=1, explore=1)
    np.testing.assert_array_equal(dst.view(np.uint16), src[::2].view(np.uint16))


# ---- H100 ----------------------------------------------------------------------------------------

def _on_gpu(torch, x):
    base = x.base if x.base is not None else x
    raw = torch.from_numpy(np.ascontiguousarray(base).view(np.uint8)).cuda()
    view = raw.view(torch.bfloat16 if x.dtype == BF16 else torch.float32)
    return view[(slice(None),) * (x.ndim - 1) + (slice(0, x.shape[-1]),)]


def _back(torch, t, dtype):
    return t.cpu().contiguous().view(torch.uint8).numpy().view(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,box,swizzle", CASES, ids=str)
@pytest.mark.parametrize("shape", [(3, 77, 200), (2, 1000, 1000), (1, 1, 8)], ids=str)
def test_h100_round_trip_is_exact(dtype, box, swizzle, shape):
    """Panel coordinates and the one-panel tensor map: a wrong inner coordinate moves columns, a
    full-width map overflows the tile (and the barrier's byte count)."""
    torch = pytest.importorskip("torch")
    k = tmalang.compile(copy_source(dtype, box, swizzle))
    shape = shape[-len(box):]
    src = padded(np.random.default_rng(sum(shape)), shape, _numpy(dtype))
    dst = padded(None, shape, _numpy(dtype), np.nan)
    gsrc, gdst = _on_gpu(torch, src), _on_gpu(torch, dst)
    k(gsrc, gdst)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(_back(torch, gdst, np.uint8), np.ascontiguousarray(src).view(np.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 2), (2, 1), (2, 2)], ids=str)
def test_h100_multicast_of_a_panelled_box(shape):
    """A multicast A (and B) against the sum the interpreter and NumPy give, exactly: a row slice
    placed across panels instead of inside each would mix rows of A into B's place."""
    torch = pytest.importorskip("torch")
    k = tmalang.compile(cross_source(*shape))
    for m, n in [(5 * 64 - 17, 3 * 64 - 5), (3 * 64 - 1, 5 * 64 + 7)]:
        a, b, dst, expected = cross_operands(np.random.default_rng(m + n), m, n)
        ga, gb, gdst = _on_gpu(torch, a), _on_gpu(torch, b), _on_gpu(torch, dst)
        k(ga, gb, gdst)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(gdst.cpu().numpy(), expected)


@pytest.mark.gpu
def test_h100_element_coordinates_take_panels():
    """A panelled box at element coordinates (r + 1, c + 8): both panels shifted alike, bit-exact."""
    torch = pytest.importorskip("torch")
    k = tmalang.compile(ELEMENTS)
    for shape in [(130, 300), (1000, 1000)]:
        src = padded(np.random.default_rng(shape[0]), shape, BF16)
        gsrc, gdst = _on_gpu(torch, src), _on_gpu(torch, padded(None, shape, BF16, np.nan))
        k(gsrc, gdst)
        torch.cuda.synchronize()
        got = _back(torch, gdst, BF16)
        np.testing.assert_array_equal(got.astype(np.float32), window_reference(src))


@pytest.mark.gpu
def test_h100_strided_panelled_box():
    """Outer element strides through a panelled box: every other row, both panels, bit-exact."""
    torch = pytest.importorskip("torch")
    k = tmalang.compile(STRIDED)
    src = padded(np.random.default_rng(7), (300, 200), BF16)
    gsrc, gdst = _on_gpu(torch, src), _on_gpu(torch, padded(None, (150, 200), BF16, np.nan))
    k(gsrc, gdst)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(_back(torch, gdst, np.uint16), np.ascontiguousarray(src[::2]).view(np.uint16))

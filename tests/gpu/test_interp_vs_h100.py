"""The interpreter is the definition of each construct, and it must agree with the H100.

For every option a box has (element strides, swizzle, L2 promotion, OOB fill, ranks 1-5,
dtypes), clusters of 2, 4 and 8 with multicast, and every sm_90a example, the same inputs go
through the GPU and the interpreter: data movement must agree bit for bit, and with an
independent NumPy reference; GEMMs agree within their tolerance. The first tests pin the raw
hardware facts behind sema's rules with hand-written PTX (tests/tma_probe.py), so that a rule
that contradicts the hardware fails here rather than hanging a user's kernel.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import EXAMPLES, example_arch

pytestmark = pytest.mark.gpu

NP_DTYPES = {"f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f8e4m3": ml_dtypes.float8_e4m3fn,
             "i8": np.int8, "u8": np.uint8, "i32": np.int32}


@pytest.fixture(scope="module")
def probe():
    pytest.importorskip("torch")
    from tma_probe import Probe

    return Probe()


def _indexed(rows: int, cols: int) -> np.ndarray:
    """u32 elements that name their own position: row in the high half, column in the low."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return ((r << 16) | c).astype(np.uint32) + 0x01000000


def test_tma_ignores_the_innermost_element_stride(probe):
    """Why E025 refuses an innermost stride: the unit moves every element of the rows anyway."""
    tensor = _indexed(256, 256)
    landed, smem = probe.landed_bytes(tensor, box=(64, 64), strides=(1, 2), at=(0, 0))
    assert landed == 64 * 64 * 4, "the whole box lands, not ceil(64 / 2) columns of it"
    np.testing.assert_array_equal(smem.reshape(64, 64), tensor[:64, :64])
    written = probe.store_box(tensor[:64, :64].copy(), np.zeros((256, 256), np.uint32), (64, 64), (1, 2), (0, 0))
    assert (written[:64, :64] == tensor[:64, :64]).all(), "a store writes every column too"


@pytest.mark.parametrize("box,strides,at", [((64, 64), (2, 1), (0, 0)), ((16, 64), (3, 1), (0, 0)),
                                            ((64, 32), (3, 1), (192, 64)), ((8, 16), (8, 1), (0, 16))])
def test_outer_stride_bytes_layout_and_store_match_the_interpreter(probe, box, strides, at):
    """Bytes on the barrier, the dense smem layout and the rows a store writes, against
    interp.tiles (the interpreter's definition) and sema's box size."""
    from tmalang.interp.tiles import box_tile_bytes, read_box, write_box
    from tmalang.ir import ops

    tensor = _indexed(250, 256)
    decl = ops.BoxDecl("B", "t", "u32", list(box), list(strides), "none", "zero", "none", 1, False)
    shape, size = box_tile_bytes(decl)
    coords = [at[0] // box[0], at[1] // box[1]]
    landed, smem = probe.landed_bytes(tensor, box, strides, at)
    assert landed == size
    np.testing.assert_array_equal(smem.reshape(shape), read_box(tensor, decl, coords))
    pattern = np.arange(1, 1 + int(np.prod(shape)), dtype=np.uint32).reshape(shape)
    expected = np.zeros_like(tensor)
    write_box(expected, decl, coords, pattern)
    np.testing.assert_array_equal(probe.store_box(pattern, np.zeros_like(tensor), box, strides, at), expected)


def copy_source(dtype: str, box: list[int], *, strides=None, swizzle=None, oob=None, l2=None, stages=2) -> str:
    """A pipelined copy from `src` into the larger `dst` through the same box shape: tiles of
    dst beyond src receive the load's out-of-bounds fill, so the fill is observable."""
    rank = len(box)
    dims = [f"S{i}" for i in range(rank)]
    out_dims = [f"D{i}" for i in range(rank)]
    idx = ", ".join(f"i{i}" for i in range(rank))
    options = "".join([f" strides [{', '.join(map(str, strides))}]" if strides else "",
                       f" swizzle {swizzle}" if swizzle else "", f" oob {oob}" if oob else "",
                       f" l2 {l2}" if l2 else ""])
    extents = ", ".join(map(str, box))
    return f"""
kernel copy(src: {dtype}[{', '.join(dims)}], dst: {dtype}[{', '.join(out_dims)}]) {{
    grid persistent
    box In = src[{extents}]{options}
    box Out = dst[{extents}]{options}
    pipeline ring[{stages}] {{ t: In }}
    role producer: warp 0 {{
        for tile ({idx}) in tiles(dst, Out) {{
            produce ring as s {{ load In[{idx}] -> s.t }}
        }}
    }}
    role consumer: warps 1..4 {{
        for tile ({idx}) in tiles(dst, Out) {{
            consume ring as s {{ store Out[{idx}] <- s.t }}
        }}
    }}
}}
"""


def _random(rng, dtype: str, shape) -> np.ndarray:
    np_dtype = NP_DTYPES[dtype]
    if np.dtype(np_dtype).kind in "iu":
        info = np.iinfo(np_dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(np_dtype)
    return (rng.standard_normal(shape) * 3).astype(np_dtype)


def copy_reference(src, dst, box, strides, nan_fill: bool):
    """What the copy must leave in dst, computed from the box rule of docs §4 alone. TMA's NaN
    (seen on the H100) repeats the half-word 0x7FF7: f32 0x7FF77FF7, f16/bf16 0x7FF7."""
    strides = strides or [1] * len(box)
    picked = np.ix_(*[np.nonzero(np.arange(d) % e % s == 0)[0] for d, e, s in zip(dst.shape, box, strides)])
    loaded = np.zeros(dst.shape, dst.dtype)                   # what the load leaves in smem
    if nan_fill:
        loaded.view(np.uint8)[...] = np.resize(np.array([0xF7, 0x7F], np.uint8), loaded.nbytes).reshape(
            loaded.view(np.uint8).shape)
    loaded[tuple(slice(0, n) for n in src.shape)] = src
    expected = dst.copy()
    expected[picked] = loaded[picked]
    return expected


def _run_both(k, src, dst):
    gpu_dst, interp_dst = dst.copy(), dst.copy()
    k(src, gpu_dst)
    k.interpret(src, interp_dst, seed=3, explore=2)
    return gpu_dst, interp_dst


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


COPY_CASES = [
    # rank, dtype, box, src shape, options
    ("f32", [64, 32], (150, 72), {}),
    ("f32", [64, 64], (150, 100), {"strides": [2, 1]}),
    ("f32", [30, 16], (71, 52), {"strides": [3, 1], "oob": "nan"}),
    ("bf16", [16, 6, 64], (21, 11, 96), {"strides": [4, 5, 1], "swizzle": "128B"}),
    ("f16", [8, 32], (37, 40), {"swizzle": "64B", "oob": "nan", "l2": "128B"}),
    ("f32", [8, 8], (19, 12), {"swizzle": "32B", "l2": "64B"}),
    ("u8", [16, 64], (45, 80), {"strides": [2, 1], "l2": "256B"}),
    ("i8", [8, 128], (20, 144), {"swizzle": "128B"}),
    ("i32", [4, 8], (10, 12), {"strides": [2, 1]}),
    ("f8e4m3", [32, 64], (70, 80), {}),
    ("f32", [128], (300,), {}),
    ("f64", [16, 8], (41, 26), {"strides": [3, 1], "oob": "nan"}),
    ("f32", [2, 3, 4, 8], (3, 5, 7, 12), {"strides": [1, 2, 3, 1], "oob": "nan"}),
    ("bf16", [2, 2, 3, 4, 16], (3, 3, 5, 7, 24), {"strides": [2, 1, 2, 3, 1]}),
]


@pytest.mark.parametrize("dtype,box,src_shape,options", COPY_CASES,
                         ids=[f"{d}-{'x'.join(map(str, b))}-{'-'.join(f'{k}{v}' for k, v in o.items())}"
                              for d, b, _, o in COPY_CASES])
def test_copy_agrees_bit_for_bit(dtype, box, src_shape, options):
    """Ranks 1-5, every dtype class, strides, swizzles, L2 promotion and OOB fill."""
    rng = np.random.default_rng(len(box) * 100 + sum(box))
    k = tmalang.compile(copy_source(dtype, box, **options))
    src = _random(rng, dtype, src_shape)
    inner = -(-(src_shape[-1] + 3) * src.itemsize // 16) * 16 // src.itemsize   # rows stay 16-byte aligned
    dst = _random(rng, dtype, tuple(d + 5 for d in src_shape[:-1]) + (inner,))
    gpu_dst, interp_dst = _run_both(k, src, dst)
    np.testing.assert_array_equal(_bits(gpu_dst), _bits(interp_dst))
    expected = copy_reference(src, dst, box, options.get("strides"), options.get("oob") == "nan")
    np.testing.assert_array_equal(_bits(interp_dst), _bits(expected))


def broadcast_source(cluster: int, rows: int) -> str:
    """Every output tile receives the first `rows` rows of src's column tile, multicast across
    the cluster (each CTA loads rows / cluster of them)."""
    return f"""
kernel broadcast(src: f32[R, N], dst: f32[M, N]) {{
    grid persistent
    cluster {cluster}
    box Head = src[{rows}, 32]
    box Out = dst[{rows}, 32]
    pipeline ring[3] {{ t: Head }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(dst, Out) {{
            produce ring as s {{ load Head[0, n] -> s.t multicast }}
        }}
    }}
    role consumer: warps 4..7 {{
        for tile (m, n) in tiles(dst, Out) {{
            consume ring as s {{ store Out[m, n] <- s.t }}
        }}
    }}
}}
"""


@pytest.mark.parametrize("cluster", [2, 4, 8])
def test_multicast_clusters_agree_bit_for_bit(cluster):
    rng = np.random.default_rng(cluster)
    rows = 64
    k = tmalang.compile(broadcast_source(cluster, rows))
    src = rng.standard_normal((rows + 3, 100)).astype(np.float32)
    dst = rng.standard_normal((rows * (2 * cluster + 1) + 7, 100)).astype(np.float32)
    gpu_dst, interp_dst = _run_both(k, src, dst)
    np.testing.assert_array_equal(gpu_dst, interp_dst)
    expected = np.tile(src[:rows], (-(-dst.shape[0] // rows), 1))[: dst.shape[0]]
    np.testing.assert_array_equal(interp_dst, expected)


SM90_EXAMPLES = [p for p in EXAMPLES if example_arch(p) == "sm_90a"]


@pytest.mark.parametrize("path", SM90_EXAMPLES, ids=[p.stem for p in SM90_EXAMPLES])
def test_every_example_agrees_with_the_interpreter(path):
    """Same inputs through both: copies bit for bit, GEMMs within the reference tolerance of
    each other and of float64."""
    from references import CASES, RTOL, check, padded_copy

    k = tmalang.compile_file(path)
    name = k.name               # the reference cases are keyed by kernel, as in test_interp
    args, expected = CASES[name](np.random.default_rng(5), (197, 330))
    gpu_args = [padded_copy(a) if isinstance(a, np.ndarray) else a for a in args]
    k(*gpu_args)
    k.interpret(*args, seed=1)
    out_gpu, out_interp = gpu_args[-1], args[-1]
    check(name, out_gpu, expected)
    check(name, out_interp, expected)
    if name in RTOL:
        gpu64, interp64 = np.asarray(out_gpu, np.float64), np.asarray(out_interp, np.float64)
        assert np.linalg.norm(gpu64 - interp64) / np.linalg.norm(expected) < RTOL[name]
    else:
        np.testing.assert_array_equal(_bits(out_gpu), _bits(out_interp))


EVEN_ROWS = """
kernel even_rows(x: f32[M, N], out: f32[P, N]) {
    grid persistent
    box X = x[64, 64] strides [2, 1]       // rows 0, 2, ..., 62 of each 64-row block: a [32, 64] tile
    box O = out[32, 64]
    pipeline ring[3] { t: X }
    role producer: warp 0 {
        for tile (m, n) in tiles(out, O) {
            produce ring as s { load X[m, n] -> s.t }
        }
    }
    role consumer: warps 4..7 {
        for tile (m, n) in tiles(out, O) {
            consume ring as s {
                s.t = 2.0 * s.t - 1.0
                store O[m, n] <- s.t
            }
        }
    }
}
"""


def test_strided_rows_feed_tile_math():
    """A strided tile is dense in smem: tile math and a store through an unstrided box of the
    tile's shape compact every other row."""
    rng = np.random.default_rng(2)
    k = tmalang.compile(EVEN_ROWS)
    x = rng.standard_normal((203, 100)).astype(np.float32)
    out = np.full((102, 100), 7.0, np.float32)
    gpu_out, interp_out = _run_both(k, x, out)
    np.testing.assert_array_equal(gpu_out, interp_out)
    np.testing.assert_array_equal(interp_out, np.float32(2) * x[::2] - np.float32(1))

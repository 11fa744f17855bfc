"""Bulk boxes (`bulk Row = x[CHUNK]`, cp.async.bulk without a tensor map): copies through a ring
and through the explicit layer in the interpreter against NumPy (odd row counts, padded row
strides, rank 3, several dtypes); the launch-time chunk rule; the manifest's bulk parameters and
their packing; the IR field and its verifier; ptxas; `--emit header`; and on the H100 each copy
bit for bit against NumPy and the interpreter."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.cli.main import main as cli_main
from tmalang.compiler import Options, compile_source
from tmalang.contract.binding import bind
from tmalang.contract.manifest import BulkParam, BulkStrideParam, Manifest, TensorMapParam
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir
from tmalang.ir.verifier import verify
from tmalang.passes import PASS_NAMES
from tmalang.runtime.params import pack_params

RING = """
kernel bulk_ring(src: {dt}[{dims}], dst: {dt}[{dims}]) {{
    grid {grid}
    bulk In  = src[{chunk}]
    bulk Out = dst[{chunk}]
    pipeline ring[{stages}] {{ r: In }}
    role producer: warp 0 {{
        for tile ({vars}) in tiles(src, In) {{ produce ring as s {{ load In[{vars}] -> s.r }} }}
    }}
    role consumer: warp 1 {{
        for tile ({vars}) in tiles(dst, Out) {{ consume ring as s {{ store Out[{vars}] <- s.r }} }}
    }}
}}
"""

EXPLICIT = """
kernel bulk_explicit(src: f32[M, N], dst: f32[M, N]) {
    bulk In  = src[32]
    bulk Out = dst[32]
    smem buf: In
    mbarrier loaded(1)
    role main: warps 0..1 {
        for tile (m, n) in tiles(dst, Out) as i {
            elect {
                expect_tx loaded, 128
                load In[m, n] -> buf, loaded
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

NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "u8": np.uint8, "i64": np.int64,
         "f64": np.float64, "i32": np.int32, "u32": np.uint32, "u64": np.uint64}

# Bulk reduce: rows of x fold into row k % R of out, so several CTAs reduce into one chunk
FOLD = """
kernel bulk_fold(x: {dt}[K, N], out: {dt}[R, N]) {{
    grid tiles
    bulk In  = x[{chunk}]
    bulk Out = out[{chunk}]
    pipeline ring[2] {{ t: In }}
    role producer: warp 0 {{
        for tile (k, n) in tiles(x, In) {{ produce ring as s {{ load In[k, n] -> s.t }} }}
    }}
    role consumer: warp 1 {{
        for tile (k, n) in tiles(x, In) {{ consume ring as s {{ reduce {op} Out[k % {rows}, n] <- s.t }} }}
    }}
}}
"""
REDUCE_PAIRS = ([("add", d) for d in ("u32", "i32", "u64", "f32", "f64", "f16", "bf16")]
                + [(op, d) for op in ("min", "max") for d in ("u32", "i32", "u64", "i64", "f16", "bf16")]
                + [(op, "u32") for op in ("inc", "dec")]
                + [(op, d) for op in ("and", "or", "xor") for d in ("i32", "u32", "i64", "u64")])
FOLD_K, FOLD_N = 11, 3 * 32      # 11 rows into R = 3 (or 11 for inc/dec), 3 chunks of 32 per row


def fold_kernel(op, dtype):
    rows = FOLD_K if op in ("inc", "dec") else 3   # inc/dec of different operands do not commute
    return tmalang.compile(FOLD.format(dt=dtype, chunk=32, op=op, rows=rows), name=f"bulk_fold_{op}_{dtype}.tma"), rows


FLOATS = ("f64", "f32", "f16", "bf16")   # bf16 too: a name test on 'f' missed it


def fold_case(rng, op, dtype, rows):
    if dtype in FLOATS:
        x, out = rng.standard_normal((FOLD_K, FOLD_N)), rng.standard_normal((rows, FOLD_N))
    else:
        high = 40 if op in ("inc", "dec") else 1 << 30
        x, out = rng.integers(0, high, (FOLD_K, FOLD_N)), rng.integers(0, high, (rows, FOLD_N))
    x, out = x.astype(NUMPY[dtype]), out.astype(NUMPY[dtype])
    expected = out.astype(np.float64) if dtype in FLOATS and op == "add" else out.copy()
    for k in range(FOLD_K):
        r, v = k % rows, x[k]
        if op == "add":
            expected[r] = expected[r] + (v.astype(np.float64) if dtype in FLOATS else v)
        elif op in ("min", "max"):
            expected[r] = (np.minimum if op == "min" else np.maximum)(expected[r], v)
        elif op == "inc":
            expected[r] = np.where(expected[r] >= v, 0, expected[r] + 1)
        elif op == "dec":
            expected[r] = np.where((expected[r] == 0) | (expected[r] > v), v, expected[r] - 1)
        else:
            expected[r] = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](expected[r], v)
    return x, out, expected


def check_fold(dtype, op, out, expected):
    if dtype in FLOATS and op == "add":
        tolerance = {"f64": 1e-12, "f32": 1e-5, "f16": 2e-2, "bf16": 1e-1}[dtype]
        np.testing.assert_allclose(out.astype(np.float64), expected, rtol=tolerance, atol=tolerance)
    else:
        np.testing.assert_array_equal(out.astype(np.float64) if dtype in ("f16", "bf16") else out,
                                      expected.astype(np.float64) if dtype in ("f16", "bf16") else expected)


def ring(dtype="f32", chunk=64, rank=2, grid="persistent", stages=3):
    dims = ", ".join(["B", "M", "N"][3 - rank:])
    names = ", ".join(["b", "m", "n"][3 - rank:])
    return tmalang.compile(RING.format(dt=dtype, dims=dims, chunk=chunk, grid=grid, stages=stages, vars=names),
                           name=f"bulk_{dtype}_{rank}d.tma")


def data(rng, shape, dtype, pad=0):
    """Random values of `dtype`, as a view into rows `pad` elements wider (a padded row stride)."""
    wide = (*shape[:-1], shape[-1] + pad)
    values = rng.integers(0, 250, wide) if dtype in ("u8", "i64") else rng.standard_normal(wide)
    return np.asarray(values).astype(NUMPY[dtype])[..., : shape[-1]]


# dtype, chunk, rank, grid, shape, row padding (elements)
CASES = [
    ("f32", 64, 2, "persistent", (37, 192), 0),
    ("f32", 64, 2, "tiles", (1, 64), 0),
    ("f32", 4, 2, "persistent", (13, 20), 4),          # 16-byte chunks, rows 96 bytes apart
    ("f16", 128, 2, "persistent", (9, 384), 8),
    ("bf16", 8, 2, "tiles", (5, 24), 0),
    ("u8", 16, 2, "persistent", (7, 48), 16),
    ("i64", 2, 2, "persistent", (11, 6), 2),
    ("f32", 32, 3, "persistent", (3, 5, 96), 4),
    ("f32", 32, 1, "tiles", (160,), 0),
]
IDS = [f"{dt}-{chunk}-{rank}d-{grid}-{'x'.join(map(str, shape))}" for dt, chunk, rank, grid, shape, _ in CASES]


@pytest.mark.parametrize("dtype,chunk,rank,grid,shape,pad", CASES, ids=IDS)
def test_ring_copy_matches_numpy(dtype, chunk, rank, grid, shape, pad):
    k = ring(dtype, chunk, rank, grid)
    rng = np.random.default_rng(len(shape) * 97 + shape[-1])
    src, dst = data(rng, shape, dtype, pad), data(rng, shape, dtype, pad)
    expected = src.copy()
    k.interpret(src, dst, seed=2, explore=2)
    np.testing.assert_array_equal(dst.view(np.uint8) if dtype == "bf16" else dst,
                                  expected.view(np.uint8) if dtype == "bf16" else expected)


@pytest.mark.parametrize("op,dtype", REDUCE_PAIRS, ids=[f"{op}-{d}" for op, d in REDUCE_PAIRS])
def test_bulk_reduce_matches_numpy(op, dtype):
    k, rows = fold_kernel(op, dtype)
    x, out, expected = fold_case(np.random.default_rng(len(op) + len(dtype)), op, dtype, rows)
    k.interpret(x, out, seed=4, explore=1)
    check_fold(dtype, op, out, expected)


@pytest.mark.parametrize("op,dtype", REDUCE_PAIRS, ids=[f"{op}-{d}" for op, d in REDUCE_PAIRS])
def test_ptxas_accepts_every_bulk_reduce(op, dtype):
    k, _ = fold_kernel(op, dtype)
    assert f"cp.reduce.async.bulk.global.shared::cta.bulk_group.{op}." in k.ptx
    assert ptxas.assemble(k.ptx, "sm_90a")[0][:4] == b"\x7fELF"


def test_explicit_layer_copy_matches_numpy():
    k = tmalang.compile(EXPLICIT, name="bulk_explicit.tma")
    rng = np.random.default_rng(3)
    src, dst = data(rng, (7, 96), "f32"), np.zeros((7, 96), np.float32)
    k.interpret(src, dst, seed=1)
    np.testing.assert_array_equal(dst, src)


def test_a_dim_that_is_not_whole_chunks_is_refused_at_launch():
    k = ring(chunk=64)
    with pytest.raises(TmalangError) as e:
        k.interpret(np.zeros((4, 100), np.float32), np.zeros((4, 100), np.float32))
    assert e.value.code == "E206" and "chunk (64 elements)" in e.value.message


OUTSIDE = RING.replace("load In[{vars}] -> s.r", "load In[m, n + 1] -> s.r")


@pytest.mark.parametrize("what", ["load", "store"])
def test_a_chunk_outside_the_tensor_is_an_interpreter_error_and_a_gpu_trap(what):
    """A bulk copy at computed coordinates may leave the tensor, which TMA would clip and a bulk
    copy cannot: the interpreter reports E477 at the statement, the PTX traps before the copy."""
    source = RING if what == "store" else OUTSIDE
    if what == "store":
        source = source.replace("store Out[{vars}] <- s.r", "store Out[m + 1, n] <- s.r")
    k = tmalang.compile(source.format(dt="f32", dims="M, N", chunk=32, grid="persistent", stages=2, vars="m, n"),
                        name="outside.tma")
    with pytest.raises(TmalangError) as e:
        k.interpret(np.zeros((3, 64), np.float32), np.zeros((3, 64), np.float32))
    assert e.value.code == "E477" and f"bulk {what} through box" in e.value.message
    assert e.value.span is not None and e.value.span.line == (11 if what == "store" else 8)
    assert "trap;" in k.ptx


def test_only_bulk_kernels_get_address_and_stride_parameters():
    params = ring(chunk=64, rank=3).manifest.ptx_params
    assert not any(isinstance(p, TensorMapParam) for p in params)
    assert params[-6:] == (BulkParam("In", "src", "f32", 64), BulkStrideParam("In", "src", 0),
                           BulkStrideParam("In", "src", 1), BulkParam("Out", "dst", "f32", 64),
                           BulkStrideParam("Out", "dst", 0), BulkStrideParam("Out", "dst", 1))
    manifest = ring(chunk=64, rank=3).manifest
    assert Manifest.from_json(manifest.to_json()) == manifest
    tma_copy = tmalang.compile_file(ROOT / "examples" / "tma_copy.tma").manifest.ptx_params
    assert not any(isinstance(p, (BulkParam, BulkStrideParam)) for p in tma_copy)


def test_packed_parameters_are_the_address_and_byte_strides():
    k = ring(chunk=32, rank=3)
    src, dst = data(np.random.default_rng(0), (2, 3, 64), "f32", pad=4), np.zeros((2, 3, 64), np.float32)
    binding = bind(k.manifest, (src, dst))
    params = pack_params(binding, lambda p: b"", {"src": 0x1000, "dst": 0x2000}.__getitem__)
    values = [struct.unpack("<Q", params.value(i))[0] for i in range(len(params)) if len(params.value(i)) == 8]
    assert values == [0x1000, 3 * 68 * 4, 68 * 4, 0x2000, 3 * 64 * 4, 64 * 4]


def test_ir_round_trips_and_the_verifier_holds_the_bulk_rules():
    c = compile_source(RING.format(dt="f32", dims="M, N", chunk=64, grid="persistent", stages=2, vars="m, n"),
                       "bulk.tma", Options(arch="sm_90a"), until="ir")
    text = print_ir(c.ir)
    assert "mode=bulk" in text and print_ir(parse_ir(text)) == text
    done = ["lower", *PASS_NAMES]
    verify(parse_ir(text)[0], "lower_tile_walk", done)
    for wrong in ("shape=[2, 64]", "shape=[1, 3]"):
        with pytest.raises(TmalangError, match="shape"):
            verify(parse_ir(text.replace("shape=[1, 64]", wrong, 1))[0], "lower_tile_walk", done)
    with pytest.raises(TmalangError, match="no tensor map"):
        verify(parse_ir(text.replace("swizzle=none", "swizzle=128B", 1))[0], "lower_tile_walk", done)
    for mode, complaint in (("mode=copy", "not a TMA mode"), ("mode=im2col", "the record goes with an im2col mode")):
        with pytest.raises(TmalangError, match=complaint):
            verify(parse_ir(text.replace("mode=bulk", mode, 1))[0], "lower_tile_walk", done)


@pytest.mark.parametrize("dtype,rank", [("f32", 2), ("f16", 3), ("u8", 1)])
def test_ptxas_accepts_bulk_copies(dtype, rank):
    k = ring(dtype, 64, rank)
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in k.ptx
    assert "cp.async.bulk.global.shared::cta.bulk_group" in k.ptx
    cubin, stats = ptxas.assemble(k.ptx, "sm_90a")
    assert cubin[:4] == b"\x7fELF" and stats.spill_stores == 0


def test_the_launch_header_passes_bulk_addresses_and_strides(tmp_path):
    """The header (which test_cli compiles with g++ for every example) checks the chunk rule and
    passes each bulk box's address and outer strides in the manifest's order."""
    path = tmp_path / "bulk.tma"
    path.write_text(RING.format(dt="f32", dims="B, M, N", chunk=64, grid="persistent", stages=2, vars="b, m, n"))
    header = tmp_path / "bulk.h"
    assert cli_main([str(path), "--emit", "header", "-o", str(header)]) == 0
    text = header.read_text()
    assert "void* params[] = {&p_B, &p_M, &p_N, &b_In, &b_In_s0, &b_In_s1, &b_Out, &b_Out_s0, &b_Out_s1};" in text
    assert "uint64_t b_In_s1 = args.src.strides[1];" in text
    assert "args.src.shape[args.src.rank - 1] % 64 != 0" in text


# ---- on the H100 ------------------------------------------------------------------------------

GPU_CASES = CASES + [("f32", 4096, 2, "persistent", (301, 3 * 4096), 0), ("f32", 2048, 2, "tiles", (3, 2048), 4)]
GPU_IDS = [f"{dt}-{chunk}-{rank}d-{grid}-{'x'.join(map(str, shape))}" for dt, chunk, rank, grid, shape, _ in GPU_CASES]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,chunk,rank,grid,shape,pad", GPU_CASES, ids=GPU_IDS)
def test_gpu_bulk_copy_equals_numpy_and_the_interpreter(dtype, chunk, rank, grid, shape, pad):
    """NumPy arrays (staged to the device with their padded strides): bit for bit."""
    k = ring(dtype, chunk, rank, grid)
    rng = np.random.default_rng(7)
    src = data(rng, shape, dtype, pad)
    gpu_dst, interp_dst = data(rng, shape, dtype, pad), data(rng, shape, dtype, pad)
    k(src, gpu_dst)
    k.interpret(src, interp_dst, seed=1)
    bits = lambda a: np.ascontiguousarray(a).view(np.uint8)   # noqa: E731
    np.testing.assert_array_equal(bits(gpu_dst), bits(src))
    np.testing.assert_array_equal(bits(gpu_dst), bits(interp_dst))


@pytest.mark.gpu
@pytest.mark.parametrize("op,dtype", REDUCE_PAIRS, ids=[f"{op}-{d}" for op, d in REDUCE_PAIRS])
def test_gpu_bulk_reduce_equals_numpy_and_the_interpreter(op, dtype):
    """Bit for bit against the interpreter wherever the order of the reduces cannot matter
    (everything but float add of several rows into one)."""
    k, rows = fold_kernel(op, dtype)
    x, out, expected = fold_case(np.random.default_rng(9), op, dtype, rows)
    gpu_out, interp_out = out.copy(), out.copy()
    k(x, gpu_out)
    k.interpret(x, interp_out, seed=1)
    check_fold(dtype, op, gpu_out, expected)
    if not (dtype in FLOATS and op == "add"):
        np.testing.assert_array_equal(gpu_out.view(np.uint8), interp_out.view(np.uint8))


@pytest.mark.gpu
def test_gpu_bulk_copy_of_torch_tensors_with_padded_rows():
    torch = pytest.importorskip("torch")
    k = tmalang.compile_file(ROOT / "examples" / "bulk_copy_sm90.tma")
    base = torch.randn(517, 3 * 4096 + 64, device="cuda")
    src = base[:, : 3 * 4096]
    dst = torch.full((517, 3 * 4096), float("nan"), device="cuda")
    k(src, dst)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)

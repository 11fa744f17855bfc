"""Bulk prefetch (`prefetch Row[...]` through a bulk box, cp.async.bulk.prefetch.L2): the PTX
(an address and a byte count, guarded by the copies' trap), ptxas, the interpreter against NumPy
(a prefetch changes no value), the range rule (E477 at the statement, tests/verify/prefetch.tma
has the grouped case), --explain, and on the H100 the same bits as NumPy and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from tmalang.backend import ptxas
from tmalang.diagnostics import TmalangError
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir

NUMPY = {"f32": np.float32, "f16": np.float16}

# the producer prefetches the chunk after the one it loads, wrapping at the row's end: a bulk
# prefetch, like a bulk copy, must stay inside the tensor
SOURCE = """
kernel bulk_prefetch(src: {dt}[M, N], dst: {dt}[M, N]) {{
    grid {grid}
    bulk In  = src[{chunk}]
    bulk Out = dst[{chunk}]
    pipeline ring[2] {{ r: In }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(src, In) {{
            elect {{ prefetch In[{ahead}] }}
            produce ring as s {{ load In[m, n] -> s.r }}
        }}
    }}
    role consumer: warp 1 {{
        for tile (m, n) in tiles(dst, Out) {{ consume ring as s {{ store Out[m, n] <- s.r }} }}
    }}
}}
"""
WRAP = "(m + (n + 1) / (N / {chunk})) % M, (n + 1) % (N / {chunk})"   # the next chunk in row-major order


def kernel(dtype="f32", chunk=64, grid="persistent", ahead=WRAP):
    return tmalang.compile(SOURCE.format(dt=dtype, chunk=chunk, grid=grid, ahead=ahead.format(chunk=chunk)),
                           name=f"bulk_prefetch_{dtype}_{chunk}.tma")


def test_ptx_is_a_guarded_bulk_prefetch_that_ptxas_accepts():
    k = kernel()
    assert "cp.async.bulk.prefetch.L2.global [%rd" in k.ptx
    assert "cp.async.bulk.prefetch.tensor" not in k.ptx
    assert k.ptx.count("trap;") == 3    # the prefetch, the load and the store each check their chunk
    assert ptxas.assemble(k.ptx, "sm_90a")[0][:4] == b"\x7fELF"


def test_the_byte_count_is_the_chunk():
    k = kernel("f16", 256)
    assert "cp.async.bulk.prefetch.L2.global" in k.ptx and "512;" in k.ptx.replace(" ", "")


CASES = [("f32", 64, "persistent", (37, 192)), ("f16", 128, "tiles", (5, 384)), ("f32", 4, "persistent", (13, 20))]
IDS = [f"{dt}-{chunk}-{grid}-{m}x{n}" for dt, chunk, grid, (m, n) in CASES]


@pytest.mark.parametrize("dtype,chunk,grid,shape", CASES, ids=IDS)
def test_interpreter_copies_exactly(dtype, chunk, grid, shape):
    rng = np.random.default_rng(shape[0])
    src = rng.standard_normal(shape).astype(NUMPY[dtype])
    dst = np.full(shape, np.nan, src.dtype)
    kernel(dtype, chunk, grid).interpret(src, dst, seed=3, explore=2)
    np.testing.assert_array_equal(dst, src)


def test_a_prefetch_past_the_tensor_is_e477_at_its_line():
    k = kernel(ahead="m, n + 1")
    with pytest.raises(TmalangError) as e:
        k.interpret(np.zeros((3, 128), np.float32), np.zeros((3, 128), np.float32))
    assert e.value.code == "E477" and "bulk prefetch through box 'In'" in e.value.message
    assert e.value.span.line == 9


def test_explain_lists_the_prefetched_bulk_box():
    assert "boxes prefetched into L2: In" in kernel().explain()


def test_verifier_takes_a_bulk_prefetch_through_the_ir_text():
    c = kernel()._c
    text = print_ir(c.ir)
    assert "bulk_prefetch box=In" in text and print_ir(parse_ir(text)) == text


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,chunk,grid,shape", CASES + [("f32", 4096, "persistent", (301, 3 * 4096))],
                         ids=IDS + ["f32-4096-persistent-301x12288"])
def test_gpu_bulk_prefetch_copy_equals_numpy_and_the_interpreter(dtype, chunk, grid, shape):
    """Bit for bit: the prefetch changes nothing, and wrapping at the end keeps it inside (no trap)."""
    k = kernel(dtype, chunk, grid)
    rng = np.random.default_rng(11)
    src = rng.standard_normal(shape).astype(NUMPY[dtype])
    gpu, interp = np.full(shape, np.nan, src.dtype), np.full(shape, np.nan, src.dtype)
    k(src, gpu)
    np.testing.assert_array_equal(gpu.view(np.uint8), src.view(np.uint8))
    if src.size <= 1 << 16:
        k.interpret(src, interp, seed=1)
        np.testing.assert_array_equal(gpu.view(np.uint8), interp.view(np.uint8))

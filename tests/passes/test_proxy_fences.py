"""Generic-proxy writes to shared memory are fenced before the async proxy reads them (issue 11,
item 5, and the cross-role verifier class), and a tcgen05.cp copy is not row math.

  - row math writing smem, a whole tile (`cs = t.d`) or a row register (`os = r`), before a
    TMA store: fence.proxy.async and a sync in between (the interpreter reported E406);
  - an accumulator epilogue (wgmma or tcgen05) handed to a TMA store in another role through
    hand-written barriers: the writing role fences before its arrive;
  - `t.d = q.v` in a one-warp role without an mma is tcgen05.cp (§15b), not row math (was E099).
Each kernel runs on the interpreter across random schedules against NumPy and assembles with
ptxas; the sm_90a one also runs on the H100 (`-m gpu`).
"""

from __future__ import annotations

import re
import ml_dtypes
import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.backend import ptxas
from tmalang.ir import ops

BF16 = ml_dtypes.bfloat16
KERNELS = ROOT / "tests" / "soundness"
SOURCES = {"rows_store_sm100": "sm_100a", "copy_role_sm100": "sm_100a", "handoff_store_sm100": "sm_100a",
           "handoff_store": "sm_90a"}


def _compile(name: str):
    return tmalang.compile_file(KERNELS / f"{name}.tma", arch=SOURCES[name])


def _bf16(rng, rows, cols):
    return rng.standard_normal((rows, -(-cols // 8) * 8)).astype(BF16)[:, :cols]


def _role(kernel, name: str) -> ops.RoleOp:
    return next(r for r in ops.roles(kernel._c.ir) if r.symbol == name)


def _between(region: list[ops.Op], first, last) -> list[ops.Op]:
    """The ops of a region strictly between the first op matching `first` and the next matching `last`."""
    start = next(i for i, o in enumerate(region) if first(o))
    end = next(i for i in range(start + 1, len(region)) if last(region[i]))
    return region[start + 1:end]


def _fenced_and_synced(ops_between: list[ops.Op]) -> bool:
    fences = [i for i, o in enumerate(ops_between) if isinstance(o, ops.Fence) and o.kind == "proxy_async"]
    return bool(fences) and any(isinstance(o, ops.Sync) for o in ops_between[fences[0] + 1:])


@pytest.mark.parametrize("name", list(SOURCES))
def test_ptxas_accepts(name):
    kernel = _compile(name)
    cubin, stats = ptxas.assemble(kernel.ptx, SOURCES[name])
    assert cubin[:4] == b"\x7fELF"
    syncs = [o for o in ops.walk(kernel._c.ir.body) if isinstance(o, ops.Sync) and o.scope != "cluster"]
    assert len(re.findall(r"\bbar\.(?:warp\.)?sync\b", kernel.ptx)) == len(syncs)   # none duplicated


def test_row_math_into_smem_is_fenced_before_the_store():
    epilogue = _role(_compile("rows_store_sm100"), "epilogue")
    tile = next(o for o in ops.walk(epilogue.body) if isinstance(o, ops.ForStep))
    stores = lambda o: isinstance(o, ops.Elect) and any(isinstance(s, ops.TmaStore) for s in o.body)  # noqa: E731
    writes_os = lambda o: isinstance(o, ops.RowAssign) and getattr(o.dest, "name", None) == "os"  # noqa: E731
    assert _fenced_and_synced(_between(tile.body, writes_os, stores))


def test_rows_store_runs_clean_and_matches_numpy():
    kernel = _compile("rows_store_sm100")
    m, n, k = 130, 200, 100
    blocks = -(-n // 64)
    rng = np.random.default_rng(5)
    a, b = _bf16(rng, m, k), _bf16(rng, n, k)
    c = np.full((m, n), np.nan, np.float32)
    mx = np.full((m, 8 * blocks), np.nan, np.float32)
    kernel.interpret(a, b, c, mx, seed=2, explore=3)
    product = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c, product, rtol=1e-5, atol=1e-4)
    padded = np.zeros((m, 64 * blocks))        # the last block's columns past N are zero-filled products
    padded[:, :n] = product
    row_max = padded.reshape(m, blocks, 64).max(axis=2)
    np.testing.assert_allclose(mx, np.repeat(row_max, 8, axis=1), rtol=1e-5, atol=1e-4)


def test_a_tmem_copy_in_a_one_warp_role_without_mma_is_a_copy():
    kernel = _compile("copy_role_sm100")
    copy = _role(kernel, "copy")
    assert any(isinstance(o, ops.Tcgen05Cp) for o in ops.walk(copy.body))
    assert not any(isinstance(o, ops.RowAssign) for o in ops.walk(copy.body))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((130, 100)).astype(np.float32)
    y = np.full((130, 100), np.nan, np.float32)
    kernel.interpret(x, y, seed=4, explore=3)
    np.testing.assert_array_equal(y, x)


def test_a_tmem_copy_in_a_row_math_role_is_refused_as_a_copy():
    """The same statement in a warpgroup is still refused, now as a copy outside the MMA role."""
    text = (KERNELS / "copy_role_sm100.tma").read_text().replace("role copy: warp 1", "role copy: warps 8..11")
    with pytest.raises(tmalang.TmalangError, match="E099.*one warp"):
        tmalang.compile(text, arch="sm_100a")


@pytest.mark.parametrize("name", ["handoff_store", "handoff_store_sm100"])
def test_an_epilogue_handed_to_another_roles_store_is_fenced_before_the_arrive(name):
    epilogue = _role(_compile(name), "consumer" if name == "handoff_store" else "epilogue")
    tile = next(o for o in ops.walk(epilogue.body) if isinstance(o, ops.ForStep))
    writes = lambda o: isinstance(o, (ops.AccStore, ops.TmemEpilogue))  # noqa: E731
    ready = lambda o: isinstance(o, ops.Elect) and any(  # noqa: E731
        isinstance(s, ops.MbarArrive) and s.barrier.name == "ready" for s in o.body)
    assert _fenced_and_synced(_between(tile.body, writes, ready))


@pytest.mark.parametrize("name", ["handoff_store", "handoff_store_sm100"])
def test_handoff_runs_clean_and_matches_float64(name):
    kernel = _compile(name)
    m, n, k = 130, 300, 200
    rng = np.random.default_rng(13)
    a, b = _bf16(rng, m, k), _bf16(rng, n, k)
    c = np.full((m, -(-n // 8) * 8), np.nan, dtype=BF16)[:, :n]
    kernel.interpret(a, b, c, seed=6, explore=3)
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.linalg.norm(c.astype(np.float64) - reference) / np.linalg.norm(reference) < 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(130, 300, 200), (1000, 1000, 1000), (257, 513, 2000)])
def test_h100_handoff_matches_float64(m, n, k):
    torch = pytest.importorskip("torch")
    kernel = _compile("handoff_store")
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)

    def matrix(rows, cols):
        return torch.randn(rows, -(-cols // 8) * 8, device="cuda", generator=gen).to(torch.bfloat16)[:, :cols]

    a, b = matrix(m, k), matrix(n, k)
    c = torch.full((m, -(-n // 8) * 8), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    kernel(a, b, c)
    torch.cuda.synchronize()
    reference = a.double() @ b.double().T
    assert (torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference)).item() < 1e-2

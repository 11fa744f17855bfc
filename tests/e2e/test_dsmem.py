"""Distributed shared memory: peer pipelines (`pipeline P[S] {...} peer +K`, §16b). The ring
example and a cluster-wide sum in the interpreter against NumPy (odd shapes, cluster sizes 2, 4
and 8, every peer offset, random schedules); the protocol the compiler derives (broken on
purpose, the interpreter reports the hang or the race); PTX, ptxas, IR text, --explain; and on
the H100 the same bits as NumPy and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from references import dsmem_ring_case, padded
from tmalang.backend import ptxas
from tmalang.diagnostics import TmalangError
from tmalang.ir import ops
from tmalang.ir.parser import parse_ir
from tmalang.ir.printer import print_ir

EXAMPLE = ROOT / "examples" / "dsmem_ring_sm90.tma"
RING = EXAMPLE.read_text()


def ring(cluster=4, peer=1, stages=2):
    src = RING.replace("cluster 4", f"cluster {cluster}").replace("peer +1", f"peer +{peer}")
    return tmalang.compile(src.replace("pipeline hop[2]", f"pipeline hop[{stages}]"), name=f"ring_{cluster}_{peer}.tma")


def ring_reference(x: np.ndarray, cluster: int, peer: int, rows=64) -> np.ndarray:
    """Tile row i = cluster q + r gets x's tile row cluster q + (r - peer) % cluster added."""
    tiles = -(-x.shape[0] // rows)
    t = np.zeros((tiles * rows, x.shape[1]), np.float32)
    t[: x.shape[0]] = x
    t = t.reshape(tiles, rows, -1)
    moved = np.zeros_like(t)
    for i in range(tiles):
        j = i - i % cluster + (i % cluster - peer) % cluster
        if j < tiles:
            moved[i] = t[j]
    return (t + moved).reshape(-1, x.shape[1])[: x.shape[0]]


SHAPES = [(300, 100), (64, 64), (513, 132), (1, 4), (700, 257)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_example_matches_numpy(shape):
    args, expected = dsmem_ring_case(np.random.default_rng(shape[0]), shape)
    tmalang.compile_file(EXAMPLE).interpret(*args, seed=shape[1], explore=3)
    np.testing.assert_array_equal(args[-1], expected)


OFFSETS = [(2, 1), (4, 1), (4, 2), (4, 3), (8, 1), (8, 5)]


@pytest.mark.parametrize("cluster,peer", OFFSETS, ids=[f"cluster{c}-peer{k}" for c, k in OFFSETS])
def test_every_cluster_size_and_offset_matches_numpy(cluster, peer):
    rng = np.random.default_rng(cluster * 10 + peer)
    x, out = padded(rng, (1100, 70)), padded(rng, (1100, 70), np.nan)
    ring(cluster, peer, stages=1 + peer % 3).interpret(x, out, seed=peer, explore=2)
    np.testing.assert_array_equal(out, ring_reference(x, cluster, peer))


# a cluster-wide sum: every CTA ends with the sum of its cluster's tiles, passed round the ring
# in N - 1 steps (each step forwards what arrived in the step before)
SUM = """
kernel cluster_sum(x: f32[M, N], out: f32[M, N]) {{
    grid persistent
    cluster {cluster}
    box X = x[32, 64]
    box O = out[32, 64]
    pipeline ring[2] {{ t: X }}
    pipeline hop[2] {{ t: X }} peer +1
    smem acc: X
    smem cur: X
    role loader: warp 0 {{
        for tile (m, n) in tiles(out, O) {{ produce ring as s {{ load X[m, n] -> s.t }} }}
    }}
    role adder: warps 4..7 {{
        for tile (m, n) in tiles(out, O) {{
            consume ring as s {{
                acc = s.t
                cur = s.t
            }}
            for k in steps({hops}, 1) {{
                produce hop as d {{ d.t = cur }}
                consume hop as h {{
                    acc = acc + h.t
                    cur = h.t
                }}
            }}
            fence proxy_async
            sync
            elect {{
                store O[m, n] <- acc
                commit_group
                wait_group read 0
            }}
            sync
        }}
        elect {{ wait_group 0 }}
    }}
}}
"""


def cluster_sum(cluster):
    return tmalang.compile(SUM.format(cluster=cluster, hops=cluster - 1), name=f"cluster_sum_{cluster}.tma")


def sum_reference(x: np.ndarray, cluster: int, rows=32) -> np.ndarray:
    """In the kernel's order: own tile, then the tiles of ranks r - 1, r - 2, ... (f32 adds)."""
    tiles = -(-x.shape[0] // rows)
    t = np.zeros((-(-tiles // cluster) * cluster * rows, x.shape[1]), np.float32)
    t[: x.shape[0]] = x
    t = t.reshape(-1, rows, x.shape[1])
    out = np.empty_like(t)
    for i in range(t.shape[0]):
        base, r = i - i % cluster, i % cluster
        acc = t[i].copy()
        for hop in range(1, cluster):
            acc = acc + t[base + (r - hop) % cluster]
        out[i] = acc
    return out.reshape(-1, x.shape[1])[: x.shape[0]]


@pytest.mark.parametrize("cluster", [2, 4, pytest.param(8, marks=pytest.mark.slow)])
def test_cluster_sum_matches_numpy(cluster):
    rng = np.random.default_rng(cluster)
    x, out = padded(rng, (333, 130)), padded(rng, (333, 130), np.nan)
    cluster_sum(cluster).interpret(x, out, seed=cluster, explore=2)
    np.testing.assert_array_equal(out, sum_reference(x, cluster))


# ---- the protocol, broken on purpose: the interpreter must notice ---------------------------


def _strip(kernel, drop) -> None:
    def strip(region):
        region[:] = [o for o in region if not drop(o)]
        for o in region:
            for r in o.regions():
                strip(r)
    strip(kernel._c.ir.body)


def _run(kernel):
    args, _ = dsmem_ring_case(np.random.default_rng(0), (1100, 64))   # 5 uses of a 2-stage ring
    kernel.interpret(*args, seed=1)


def test_without_the_release_the_pusher_waits_forever():
    k = tmalang.compile_file(EXAMPLE)
    _strip(k, lambda o: isinstance(o, ops.MbarArrive) and o.peer)
    with pytest.raises(TmalangError) as e:
        _run(k)
    assert e.value.code == "E401"


def test_without_the_empty_wait_a_push_races_with_the_peer():
    k = tmalang.compile_file(EXAMPLE)
    _strip(k, lambda o: isinstance(o, ops.MbarWait) and o.barrier.name == "hop.empty")
    with pytest.raises(TmalangError) as e:
        _run(k)
    assert e.value.code in ("E402", "E405"), e.value.render()


def test_without_the_proxy_fence_the_push_reads_unfenced_writes():
    k = tmalang.compile_file(EXAMPLE)
    pushes = [o for o in ops.walk(k._c.ir.body) if isinstance(o, ops.BulkPush)]
    assert pushes
    _strip(k, lambda o: isinstance(o, ops.Fence) and o.kind == "proxy_async")
    with pytest.raises(TmalangError) as e:
        _run(k)
    assert e.value.code == "E406", e.value.render()


# ---- what the compiler emits ------------------------------------------------------------------


def test_ptx_maps_the_peer_and_pushes_with_complete_tx():
    k = tmalang.compile_file(EXAMPLE)
    assert "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [rd]" in k.ptx
    assert "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64" in k.ptx
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in k.ptx
    assert k.ptx.count("mapa.shared::cluster.u32") == 4   # expect_tx, push (data, barrier), release
    assert "%cluster_ctarank" in k.ptx
    for arch in ("sm_90a", "sm_100a"):
        c = tmalang.compile(RING, arch=arch)
        assert ptxas.assemble(c.ptx, arch)[0][:4] == b"\x7fELF"


def test_ptxas_accepts_the_cluster_sum():
    assert ptxas.assemble(cluster_sum(8).ptx, "sm_90a")[0][:4] == b"\x7fELF"


def test_the_ir_round_trips_with_peers_and_pushes():
    c = tmalang.compile_file(EXAMPLE)._c
    text = print_ir(c.ir)
    assert "bulk_push source=@hop.t.send" in text and "peer=1" in text and "peer=3" in text
    assert print_ir(parse_ir(text)) == text


def test_explain_shows_the_push_and_who_arrives():
    text = tmalang.compile_file(EXAMPLE).explain()
    assert "hop.t.send -> hop.t of rank (r + 1) % 4, 16384 bytes on hop.full there" in text
    assert "passer of rank (r - 1) % 4" in text and "hop.t.send (2 stages)" in text


# ---- on the H100 ------------------------------------------------------------------------------

GPU_SHAPES = SHAPES + [(4099, 1000)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=[f"{m}x{n}" for m, n in GPU_SHAPES])
def test_gpu_ring_equals_numpy_and_the_interpreter(shape):
    """Bit for bit: one f32 add per element."""
    k = tmalang.compile_file(EXAMPLE)
    args, expected = dsmem_ring_case(np.random.default_rng(3), shape)
    gpu = padded(np.random.default_rng(0), shape, np.nan)
    k(args[0], gpu)
    np.testing.assert_array_equal(gpu, expected)
    if shape[0] * shape[1] <= 1 << 18:
        k.interpret(*args, seed=1)
        np.testing.assert_array_equal(gpu, args[-1])


@pytest.mark.gpu
@pytest.mark.parametrize("cluster,peer", OFFSETS, ids=[f"cluster{c}-peer{k}" for c, k in OFFSETS])
def test_gpu_every_cluster_size_and_offset(cluster, peer):
    rng = np.random.default_rng(cluster + peer)
    x, out = padded(rng, (2049, 300)), padded(rng, (2049, 300), np.nan)
    ring(cluster, peer, stages=1 + peer % 3)(x, out)
    np.testing.assert_array_equal(out, ring_reference(x, cluster, peer))


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", [2, 4, 8])
def test_gpu_cluster_sum_equals_numpy_and_the_interpreter(cluster):
    rng = np.random.default_rng(cluster)
    x = padded(rng, (1000, 130))
    gpu, interp = padded(rng, (1000, 130), np.nan), padded(rng, (1000, 130), np.nan)
    k = cluster_sum(cluster)
    k(x, gpu)
    np.testing.assert_array_equal(gpu, sum_reference(x, cluster))
    k.interpret(x, interp, seed=2)
    np.testing.assert_array_equal(gpu, interp)

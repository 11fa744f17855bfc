"""Programmatic dependent launch on the GPU (backend/prior_grid.py): each launch of a chain may start
while the one before it still runs, and must still see everything it wrote (read after write) and
never overwrite what it still reads (write after read).

The chain multiplies by a permutation matrix, which a bf16 GEMM computes exactly (one product per
output, f32 accumulation), so step k must equal X0 with its columns permuted k times, bit for bit:
a single element read too early or overwritten too soon shows. Two buffers take turns, so every
launch writes the buffer the launch before it read."""

from __future__ import annotations

import numpy as np
import pytest

import tmalang

STEPS = 24


def _chain(torch, x0, perm_matrix, steps, out):
    buffers = [x0.clone(), torch.empty_like(x0)]
    for step in range(steps):
        tmalang.gemm(buffers[step % 2], perm_matrix, out=buffers[(step + 1) % 2])
    out.copy_(buffers[steps % 2])


def _expected(x0, perm, steps):
    x = x0
    for _ in range(steps):
        x = x[:, perm]
    return x


@pytest.mark.gpu
@pytest.mark.parametrize("m, n", [(200, 136), (1000, 1000), (3, 520)])
def test_a_chain_of_dependent_launches_sees_every_write_eagerly_and_in_a_graph(m, n):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(m + n)
    x0 = rng.standard_normal((m, n)).astype(np.float32)
    perm = rng.permutation(n)
    matrix = np.zeros((n, n), np.float32)
    matrix[perm, np.arange(n)] = 1.0                       # (x @ matrix)[:, j] = x[:, perm[j]]
    x0_gpu = torch.from_numpy(x0).to("cuda", torch.bfloat16)
    expected = _expected(x0_gpu.double().cpu().numpy(), perm, STEPS)
    matrix_gpu = torch.from_numpy(matrix).to("cuda", torch.bfloat16)

    eager = torch.empty_like(x0_gpu)
    _chain(torch, x0_gpu, matrix_gpu, STEPS, eager)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(eager.double().cpu().numpy(), expected)

    graphed = torch.empty_like(x0_gpu)
    _chain(torch, x0_gpu, matrix_gpu, 2, graphed)            # warm: compiled and loaded
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _chain(torch, x0_gpu, matrix_gpu, STEPS, graphed)
    for _ in range(3):
        graphed.zero_()
        graph.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(graphed.double().cpu().numpy(), expected)

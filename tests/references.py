"""NumPy references for every example: inputs for a shape, and the expected output.

Shared by the interpreter tests (CPU) and the GPU tests, so both check the same meaning.
Float sums accumulate in float32 in the kernel's order, so the comparison is exact — except for
tensor-core GEMMs, whose summation order is the hardware's: RTOL gives their tolerance.
"""

from __future__ import annotations

import numpy as np


def padded(rng, shape, fill=None, xp=np):
    """A float32 matrix whose rows are 16-byte aligned (a view into padded rows when needed)."""
    rows, cols = shape
    base = np.empty((rows, -(-cols // 4) * 4), dtype=np.float32)
    base[...] = rng.standard_normal(base.shape) if fill is None else fill
    return base[:, :cols]


def padded_copy(a: np.ndarray) -> np.ndarray:
    """A copy with the same (16-byte aligned, maybe padded) row stride as `a`, a view of rows
    padded in the innermost dimension (2-D or more: lse [BH, S], fp8 attention's vt [BHKV, D, T])."""
    if a.ndim < 2 or a.flags.c_contiguous:
        return a.copy()
    base = np.empty((*a.shape[:-1], a.strides[-2] // a.itemsize), dtype=a.dtype)
    base[..., : a.shape[-1]] = a
    return base[..., : a.shape[-1]]


def copy_case(rng, shape):
    src = padded(rng, shape)
    return [src, padded(rng, shape, np.nan)], src.copy()


BULK_CHUNK = 4096   # examples/bulk_copy_sm90.tma: a bulk copy cannot clip, so N is a whole number of chunks


def bulk_copy_case(rng, shape):
    rows, cols = shape
    return copy_case(rng, (rows, -(-cols // BULK_CHUNK) * BULK_CHUNK))


def saxpy_case(rng, shape):
    a, x, y = np.float32(rng.standard_normal()), padded(rng, shape), padded(rng, shape)
    return [a, x, y, padded(rng, shape, np.nan)], a * x + y


def blocksum_case(rng, shape):
    rows, k = shape
    x = padded(rng, (rows, k))
    expected = np.zeros((rows, 64), dtype=np.float32)
    for start in range(0, k, 64):
        chunk = np.zeros((rows, 64), dtype=np.float32)
        part = x[:, start:start + 64]
        chunk[:, : part.shape[1]] = part
        expected = expected + chunk
    return [x, padded(rng, (rows, 64), np.nan)], expected


def gemm_case(rng, shape):
    import ml_dtypes

    m, n = shape
    k = max(1, (m + n) // 3)
    def matrix(rows, cols):
        return rng.standard_normal((rows, -(-cols // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :cols]
    a, b = matrix(m, k), matrix(n, k)
    c = np.full((m, -(-n // 8) * 8), np.nan, dtype=ml_dtypes.bfloat16)[:, :n]
    return [a, b, c], a.astype(np.float64) @ b.astype(np.float64).T


SPLITK_PARTS = 3   # examples/gemm_splitk_sm90.tma: parts per tile (with small K, some parts get no step)


def gemm_splitk_case(rng, shape, parts=SPLITK_PARTS, k=None):
    """C += A·Bᵀ with C f32 and not zero at the start (the kernel only adds to it): the parts'
    f32 sums land in the GPU's order, so RTOL holds their rounding."""
    [a, b, _], product = gemm_case(rng, shape) if k is None else gemm_case_k(rng, shape, k)
    c = padded(rng, shape)
    return [np.int32(parts), a, b, c], c.astype(np.float64) + product


def gemm_streamk_case(rng, shape, k=None):
    """C = A·Bᵀ into an f32 C that the caller zeroed, as stream-K asks (the CTAs that share a tile
    each add their partial sum): their f32 sums land in the GPU's order, so RTOL holds the rounding."""
    [a, b, _], product = gemm_case(rng, shape) if k is None else gemm_case_k(rng, shape, k)
    return [a, b, padded(rng, shape, fill=0.0)], product


def gemm_case_k(rng, shape, k):
    """gemm_case's inputs with an explicit K."""
    import ml_dtypes

    def matrix(rows, cols):
        return rng.standard_normal((rows, -(-cols // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :cols]
    a, b = matrix(shape[0], k), matrix(shape[1], k)
    return [a, b, None], a.astype(np.float64) @ b.astype(np.float64).T


def bf16_gemm_operands(m, n, k, seed):
    """A [M, K] and B [N, K] random bf16 with 16-byte rows, and C [M, N] full of NaN (a tile the
    kernel never writes shows): the dynamic-walk tests' inputs."""
    import ml_dtypes

    rng = np.random.default_rng(seed)

    def matrix(rows, cols):
        return rng.standard_normal((rows, -(-cols // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :cols]
    return matrix(m, k), matrix(n, k), np.full((m, -(-n // 8) * 8), np.nan, dtype=ml_dtypes.bfloat16)[:, :n]


def gemm_relative_error(c, a, b) -> float:
    """‖C − A·Bᵀ‖ / ‖A·Bᵀ‖ against float64."""
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    return float(np.linalg.norm(np.asarray(c, dtype=np.float64) - reference) / np.linalg.norm(reference))


def moe_gemm_case(rng, shape):
    """Y = X[idx]·Wᵀ: M routed rows (shape = (M, N)) picked from T = M // 2 + 3 tokens, in random
    order with repeats, so some rows of X are picked twice and some never."""
    [x, w, y], _ = gemm_case(rng, (shape[0] // 2 + 3, shape[1]))
    m, n = shape
    y = np.full((m, -(-n // 8) * 8), np.nan, dtype=y.dtype)[:, :n]
    idx = rng.integers(0, x.shape[0], m).astype(np.int32)
    return [x, idx, w, y], x.astype(np.float64)[idx] @ w.astype(np.float64).T


def gemm_residual_case(rng, shape):
    """C = R + A·Bᵀ with an f32 R of the output's scale."""
    [a, b, c], product = gemm_case(rng, shape)
    m, n = shape
    r = padded(rng, (m, n))
    r *= 4
    return [a, b, r, c], r.astype(np.float64) + product


def gemm_fp8_case(rng, shape):
    import ml_dtypes

    m, n = shape
    k = max(1, (m + n) // 3)
    def matrix(rows, cols, dtype):
        return rng.standard_normal((rows, -(-cols // 16) * 16)).astype(dtype)[:, :cols]
    a, b = matrix(m, k, ml_dtypes.float8_e4m3fn), matrix(n, k, ml_dtypes.float8_e4m3fn)
    c = np.full((m, -(-n // 8) * 8), np.nan, dtype=ml_dtypes.bfloat16)[:, :n]
    return [a, b, c], a.astype(np.float64) @ b.astype(np.float64).T


def gemm_bias_relu_case(rng, shape):
    import ml_dtypes

    (a, b, c), product = gemm_case(rng, shape)
    n = shape[1]
    bias = rng.standard_normal(-(-n // 4) * 4).astype(np.float32)[:n]
    alpha = np.float32(0.75)
    expected = np.maximum(alpha * product + bias.astype(np.float64), 0.0)
    return [a, b, bias, alpha, c], expected


def gemm_chain_case(rng, shape):
    """D = bf16(A·Bᵀ)·Wᵀ with an H that is not a multiple of the 64-wide slices."""
    import ml_dtypes

    (a, _, d), _ = gemm_case(rng, shape)
    m, n = shape
    h = max(1, (m + 2 * n) // 5)
    b = rng.standard_normal((h, -(-a.shape[1] // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :a.shape[1]]
    w = rng.standard_normal((n, -(-h // 8) * 8)).astype(ml_dtypes.bfloat16)[:, :h]
    p = (a.astype(np.float64) @ b.astype(np.float64).T).astype(ml_dtypes.bfloat16).astype(np.float64)
    return [a, b, w, d], p @ w.astype(np.float64).T


def attention_case(rng, shape):
    """softmax(scale · Q·Kᵀ)·V with S queries and T keys (shape = (S, T)), head dim 64; V goes in
    transposed. The reference is float64 on the same bf16 inputs."""
    import ml_dtypes

    s, t = shape
    bf16 = ml_dtypes.bfloat16
    q, k, v = (rng.standard_normal((rows, 64)).astype(bf16) for rows in (s, t, t))
    vt = np.zeros((64, -(-t // 8) * 8), dtype=bf16)[:, :t]   # rows 16-byte aligned, as TMA needs
    vt[...] = v.T
    scale = np.float32(1 / 8)
    o = np.full((s, 64), np.nan, dtype=bf16)
    logits = q.astype(np.float64) @ k.astype(np.float64).T * float(scale)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return [q, k, vt, scale, o], (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def flash_attention_case(rng, shape):
    """examples/attention_sm90.tma: two heads of S queries and T keys (shape = (S, T)), head dim
    64, causal when S + T is odd; O is checked (the LSE in tests/e2e/test_attention_sm90.py)."""
    import ml_dtypes

    s, t = shape
    causal = (s + t) % 2
    q, k, v = (rng.standard_normal((2, rows, 64)).astype(ml_dtypes.bfloat16) for rows in (s, t, t))
    logits = np.einsum("bsd,btd->bst", q.astype(np.float64), k.astype(np.float64)) / 8
    if causal:
        logits = np.where(np.arange(t)[None, None, :] > np.arange(s)[None, :, None], -np.inf, logits)
    p = np.exp(logits - logits.max(axis=2, keepdims=True))
    lse = np.full((2, -(-s // 4) * 4), np.nan, np.float32)[:, :s]
    o = np.full((2, s, 64), np.nan, dtype=ml_dtypes.bfloat16)
    return [q, k, v, np.float32(1 / 8), np.int32(causal), lse, o], \
        np.einsum("bst,btd->bsd", p / p.sum(axis=2, keepdims=True), v.astype(np.float64))


def attention_bwd_case(rng, shape):
    """examples/attention_bwd_sm90.tma: two query heads over one K/V head, S queries and T keys
    (shape = (S, T)), head dim 64, causal when S + T is odd; LSE and delta from float64. dV (the
    sum over both query heads) is checked here; dQ and dK in tests/e2e/test_attention_bwd_sm90.py."""
    import ml_dtypes

    s, t = shape
    causal = (s + t) % 2
    bf16 = ml_dtypes.bfloat16
    q, do = (rng.standard_normal((2, s, 64)).astype(bf16) for _ in range(2))
    k, v = (rng.standard_normal((1, t, 64)).astype(bf16) for _ in range(2))
    logits = np.einsum("bsd,btd->bst", q.astype(np.float64), np.repeat(k, 2, 0).astype(np.float64)) / 8
    if causal:
        logits = np.where(np.arange(t)[None, None, :] > np.arange(s)[None, :, None], -np.inf, logits)
    top = logits.max(axis=2, keepdims=True)
    total = np.exp(logits - top).sum(axis=2, keepdims=True)
    p = np.exp(logits - top) / total
    o = np.einsum("bst,btd->bsd", p, np.repeat(v, 2, 0).astype(np.float64)).astype(bf16)
    lse, delta = (np.full((2, -(-s // 4) * 4), np.nan, np.float32)[:, :s] for _ in range(2))
    lse[...] = (top + np.log(total))[..., 0]
    delta[...] = (do.astype(np.float64) * o.astype(np.float64)).sum(-1)
    dq = np.zeros((2, s, 64), np.float32)
    dk, dv = (np.full((1, t, 64), np.nan, bf16) for _ in range(2))
    expected = np.einsum("bst,bsd->td", p, do.astype(np.float64))[None]
    return [q, k, v, do, lse, delta, np.float32(1 / 8), np.int32(causal), dq, dk, dv], expected


def attention_varlen_bwd_case(rng, shape):
    """examples/attention_varlen_bwd_sm90.tma's dK/dV kernel: a packed batch of two sequences, S
    query rows and T keys split about 2:1, two query heads over one K/V head, head dim 64, causal
    (bottom-right) when S + T is odd and every row has a key; LSE and delta from float64. dV is
    checked here; dQ, dK in tests/e2e/test_attention_varlen_bwd_sm90.py."""
    import ml_dtypes

    from tmalang.library.attention_varlen_bwd import _first_blocks, key_windows

    s, t = shape
    lens_q, lens_k = [s - s // 3, s // 3], [max(1, t - t // 3), max(1, t // 3)]
    causal = (s + t) % 2 == 1 and all(k >= q for q, k in zip(lens_q, lens_k))
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lens_q, lens_k))
    bf16 = ml_dtypes.bfloat16
    q, do = (rng.standard_normal((s, 2, 64)).astype(bf16) for _ in range(2))
    k, v = (rng.standard_normal((int(cu_k[-1]), 1, 64)).astype(bf16) for _ in range(2))
    lse, delta = (np.full((2, -(-s // 4) * 4), np.nan, np.float32)[:, :s] for _ in range(2))
    dv = np.zeros((int(cu_k[-1]), 1, 64))
    for b in range(2):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        logits = np.einsum("rhd,kd->hrk", q[rows].astype(np.float64), k[keys, 0].astype(np.float64)) / 8
        n, m = logits.shape[1:]
        if causal:
            logits = np.where(np.arange(m)[None, None, :] > np.arange(n)[None, :, None] + (m - n), -np.inf, logits)
        top = logits.max(axis=2, keepdims=True)
        total = np.exp(logits - top).sum(axis=2, keepdims=True)
        p = np.exp(logits - top) / total
        o = np.einsum("hrk,kd->rhd", p, v[keys, 0].astype(np.float64)).astype(bf16)
        lse[:, rows] = (top + np.log(total))[..., 0]
        delta[:, rows] = (do[rows].astype(np.float64) * o.astype(np.float64)).sum(-1).T
        dv[keys, 0] = np.einsum("hrk,rhd->kd", p, do[rows].astype(np.float64))
    qlo, qhi = key_windows(cu_q, cu_k, int(cu_k[-1]), causal)
    base = _first_blocks(qlo, int(cu_k[-1]))
    dk_out, dv_out = (np.full((int(cu_k[-1]), 1, 64), np.nan, bf16) for _ in range(2))
    return [q, k, v, do, lse, delta, qlo, qhi, (qlo - base).astype(np.float32), (qhi - base).astype(np.float32),
            np.float32(1 / 8), dk_out, dv_out], dv


def attention_fp8_case(rng, shape):
    """examples/attention_fp8_sm90.tma: two query heads over one K/V head in e4m3, S queries and T
    keys (shape = (S, T)), V given transposed, causal when S + T is odd; O against float64
    attention of the fp8 values (the kernel's e4m3 P costs about 1e-2 of O's norm at most)."""
    import ml_dtypes

    s, t = shape
    causal = (s + t) % 2
    e4m3 = ml_dtypes.float8_e4m3fn
    q = rng.standard_normal((2, s, 128)).astype(e4m3)
    k, v = (rng.standard_normal((1, t, 128)).astype(e4m3) for _ in range(2))
    vt = np.empty((1, 128, -(-t // 16) * 16), e4m3)[:, :, :t]
    vt[...] = v.transpose(0, 2, 1)
    scale = 1 / np.sqrt(128)
    logits = np.einsum("bsd,btd->bst", q.astype(np.float64), np.repeat(k, 2, 0).astype(np.float64)) * scale
    if causal:
        logits = np.where(np.arange(t)[None, None, :] > np.arange(s)[None, :, None], -np.inf, logits)
    p = np.exp(logits - logits.max(axis=2, keepdims=True))
    rows = (np.full((2, 128), scale, np.float32), np.ones((2, 128), np.float32))
    lse = np.full((2, -(-s // 4) * 4), np.nan, np.float32)[:, :s]
    o = np.full((2, s, 128), np.nan, ml_dtypes.bfloat16)
    return [q, k, vt, *rows, np.int32(causal), lse, o], \
        np.einsum("bst,btd->bsd", p / p.sum(axis=2, keepdims=True), np.repeat(v, 2, 0).astype(np.float64))


def attention_varlen_case(rng, shape):
    """examples/attention_varlen_sm90.tma: a packed batch of two sequences, S query rows and T keys
    split about 2:1 (every sequence at least one key), two query heads over one K/V head, head dim
    64, causal (bottom-right) when S + T is odd and every row has a key; O is checked (the LSE in
    tests/e2e/test_attention_varlen_sm90.py)."""
    import ml_dtypes

    from tmalang.library.attention_varlen_kernels import windows

    s, t = shape
    lens_q, lens_k = [s - s // 3, s // 3], [max(1, t - t // 3), max(1, t // 3)]
    causal = (s + t) % 2 == 1 and all(k >= q for q, k in zip(lens_q, lens_k))
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lens_q, lens_k))
    q = rng.standard_normal((s, 2, 64)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((int(cu_k[-1]), 1, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    lo, hi = windows(cu_q, cu_k, s, causal)
    expected = np.zeros((s, 2, 64))
    for r in range(s):
        keys = slice(lo[r], hi[r])
        logits = q[r].astype(np.float64) @ k[keys, 0].astype(np.float64).T / 8
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        expected[r] = p / p.sum(axis=1, keepdims=True) @ v[keys, 0].astype(np.float64)
    lse = np.full((2, -(-s // 4) * 4), np.nan, np.float32)[:, :s]
    o = np.full((s, 2, 64), np.nan, ml_dtypes.bfloat16)
    pages = np.arange(k.shape[0], dtype=np.int32)      # contiguous keys: pages of one row
    return [q, k, v, pages, lo, hi, lo.astype(np.float32), hi.astype(np.float32), np.float32(1 / 8), lse, o], expected


def attention_decode_case(rng, shape):
    """examples/attention_decode_sm90.tma: two sequences of a contiguous cache of T rows (shape =
    (S, T)), lengths T and S % T + 1, one new row for each of 8 query heads over 1 K/V head, head
    dim 128, chunks of 128 keys. Each chunk's O (normalised over its keys) is checked: rows past the
    8 real ones have a zero query (TMA's fill), so their O is the mean of the chunk's values; a
    chunk past the sequence's end is 0."""
    import ml_dtypes

    _, t = shape
    lens = [t, shape[0] % t + 1]
    chunk, splits = 128, -(-t // 128)
    q = rng.standard_normal((2, 1, 8, 128)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((2 * t, 1, 128)).astype(ml_dtypes.bfloat16) for _ in range(2))
    expected = np.zeros((2 * splits, 1, 64, 128))
    for b in range(2):
        for c in range(splits):
            keys = slice(b * t + c * chunk, b * t + min((c + 1) * chunk, lens[b]))
            if keys.stop <= keys.start:
                continue
            rows = np.zeros((64, 128))
            rows[:8] = q[b, 0].astype(np.float64)
            logits = rows @ k[keys, 0].astype(np.float64).T / np.sqrt(128)
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            expected[b * splits + c, 0] = p / p.sum(axis=1, keepdims=True) @ v[keys, 0].astype(np.float64)
    o = np.full((2 * splits, 1, 64, 128), np.nan, np.float32)
    lse = np.full((2 * splits, 1, 64), np.nan, np.float32)
    return [q, k, v, np.arange(2 * t, dtype=np.int32), np.array([0, t], np.int32), np.array(lens, np.int32),
            np.zeros(64, np.float32), np.int32(chunk), np.float32(1 / np.sqrt(128)), lse, o], expected


def reduce_rows_case(rng, shape):
    """out (50 rows, random) plus every 64-row slab of x (shape = (K, N)), folded in float64:
    the kernel's reductions land in the GPU's order, so RTOL holds its rounding."""
    k, n = shape
    x, out = padded(rng, (k, n)), padded(rng, (50, n))
    slabs = np.zeros((-(-k // 64) * 64, n))
    slabs[:k] = x
    return [x, out], out.astype(np.float64) + slabs.reshape(-1, 64, n).sum(axis=0)[:50]


def stencil_case(rng, shape):
    """examples/stencil_sm90.tma over a grid of `shape` 4-component points: x is 0 outside the
    grid; f32, one rounding per operation, in the kernel's order: c*x + d*(((up + down) + left) + right)."""
    c, d = np.float32(rng.standard_normal()), np.float32(rng.standard_normal())
    shape = (*shape[:2], 4)
    x = rng.standard_normal(shape).astype(np.float32)
    p = np.zeros((shape[0] + 2, shape[1] + 2, 4), dtype=np.float32)
    p[1:-1, 1:-1] = x
    up, down, left, right = p[:-2, 1:-1], p[2:, 1:-1], p[1:-1, :-2], p[1:-1, 2:]
    return [c, d, x, np.full(shape, np.nan, np.float32)], c * x + d * (((up + down) + left) + right)


def dsmem_ring_case(rng, shape, cluster=4, rows=64):
    """examples/dsmem_ring_sm90.tma: tile row i = 4q + r gets x's tile row 4q + (r - 1) % 4 added
    (zero past x's end); one f32 add per element, so exact."""
    x = padded(rng, shape)
    tiles = -(-shape[0] // rows)
    padded_x = np.zeros((tiles * rows, shape[1]), np.float32)
    padded_x[: shape[0]] = x
    tile_rows = padded_x.reshape(tiles, rows, shape[1])
    neighbour = np.zeros_like(tile_rows)
    for i in range(tiles):
        j = i - i % cluster + (i % cluster - 1) % cluster
        if j < tiles:
            neighbour[i] = tile_rows[j]
    expected = (tile_rows + neighbour).reshape(-1, shape[1])[: shape[0]]
    return [x, padded(rng, shape, np.nan)], expected


def conv2d_reference(x, w, stride: int) -> np.ndarray:
    """3x3 convolution, padding 1, in float64: x NHWC [N, H, W, C], w KRSC [K, 3, 3, C]; the
    result as the kernel writes it, [N·P·Q, K] (NHWC output rows of pixels)."""
    n, h, wd, c = x.shape
    p, q = (h - 1) // stride + 1, (wd - 1) // stride + 1
    padded_x = np.zeros((n, h + 2, wd + 2, c))
    padded_x[:, 1:h + 1, 1:wd + 1] = x.astype(np.float64)
    out = np.zeros((n, p, q, w.shape[0]))
    for r in range(3):
        for s in range(3):
            window = padded_x[:, r:r + stride * (p - 1) + 1:stride, s:s + stride * (q - 1) + 1:stride]
            out += window @ w[:, r, s, :].astype(np.float64).T
    return out.reshape(n * p * q, -1)


def conv2d_inputs(rng, n, h, wd, c, k, stride):
    """bf16 activations and KRSC weights, the output NaN-filled, and the float64 reference; the
    kernel takes the weights as their [K, 9·C] view."""
    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    x = rng.standard_normal((n, h, wd, c)).astype(bf16)
    w = rng.standard_normal((k, 3, 3, c)).astype(bf16)
    p, q = (h - 1) // stride + 1, (wd - 1) // stride + 1
    o = np.full((n * p * q, k), np.nan, dtype=bf16)
    return [x, w.reshape(k, 9 * c), o], conv2d_reference(x, w, stride)


def conv2d_case(rng, shape, stride=1):
    """A small convolution picked from the test's (rows, cols): spatial dims that are not tile
    multiples, one or two images, 64 or 128 channels in and 64..192 out."""
    rows, cols = shape
    n, h, wd = 1 + rows % 2, 3 + rows % 9, 3 + cols % 13
    c, k = 64 * (1 + cols % 2), 64 * (1 + rows % 3)
    return conv2d_inputs(rng, n, h, wd, c, k, stride)


CASES = {"tma_copy": copy_case, "copy_explicit": copy_case, "saxpy": saxpy_case, "blocksum": blocksum_case,
         "blocksum_prefetch": blocksum_case,
         "gemm": gemm_case, "gemm_fp8": gemm_fp8_case, "gemm_bias_relu": gemm_bias_relu_case, "gemm_chain": gemm_chain_case,
         "attention": attention_case, "flash_attention": flash_attention_case, "attention_bwd": attention_bwd_case,
         "attention_varlen": attention_varlen_case, "attention_decode": attention_decode_case, "attention_fp8": attention_fp8_case,
         "attention_varlen_bwd_dkdv": attention_varlen_bwd_case, "gemm_pair": gemm_case, "gemm_multicast": gemm_case, "gemm_cluster2x2": gemm_case,
         "gemm_residual": gemm_residual_case, "multistage": gemm_case, "reduce_rows": reduce_rows_case,
         "bulk_copy": bulk_copy_case, "stencil": stencil_case, "moe_gemm": moe_gemm_case, "dsmem_ring": dsmem_ring_case,
         "conv2d": conv2d_case, "conv2d_s2": lambda rng, shape: conv2d_case(rng, shape, stride=2),
         "gemm_splitk": gemm_splitk_case, "gemm_streamk": gemm_streamk_case, "gemm_pingpong": gemm_case,
         "gemv": gemm_case}
RTOL = {"multistage": 1e-2, "gemm": 1e-2, "gemm_cluster2x2": 1e-2, "gemm_pair": 1e-2, "gemm_multicast": 1e-2, "gemm_residual": 1e-2, "gemm_fp8": 1e-2, "gemm_bias_relu": 1e-2, "gemm_chain": 1e-2, "attention": 1e-2,
        "flash_attention": 1e-2, "attention_bwd": 1e-2, "attention_varlen": 1e-2, "attention_decode": 1e-2, "attention_fp8": 3e-2, "attention_varlen_bwd_dkdv": 1e-2,
        "moe_gemm": 1e-2, "conv2d": 1e-2, "conv2d_s2": 1e-2, "reduce_rows": 1e-5, "gemm_splitk": 1e-5,
        "gemm_streamk": 1e-5, "gemm_pingpong": 1e-2, "gemv": 1e-2}   # relative Frobenius error against float64; others are exact


def check(name, out, expected) -> None:
    if name not in RTOL:
        np.testing.assert_array_equal(out, expected)
        return
    out = np.asarray(out, dtype=np.float64)
    assert np.isfinite(out).all(), "every output element must be written"
    error = np.linalg.norm(out - expected) / np.linalg.norm(expected)
    assert error < RTOL[name], error

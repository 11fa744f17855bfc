"""The backward of `tmalang.attention_varlen` (contiguous keys): examples/attention_varlen_bwd_sm90.tma.

    dq, dk, dv = tmalang.attention_varlen_backward(q, k, v, o, lse, do, cu_seqlens_q, cu_seqlens_k, causal=True)

and the autograd function behind `attention_varlen` on tensors that require a gradient
(attention_autograd.py). Three steps: delta = rowsum(dO ∘ O) per packed row and head ([H, TQ],
two torch or NumPy ops), dK and dV from the key-major kernel, dQ from the query-major one. Each
gradient row is written once by the CTA that owns it, so all three are the same bits in every
run. The kernels take the windows of both sides: the forward's per-query key windows (the
forward module's `windows`) and here the per-key query windows, each as i32 for the kernels'
element reads and f32 row vectors for their masks (the key side less its tile's first query
block, which the kernel's row math cannot read from a tensor).
"""

from __future__ import annotations

import math

from .attention_kernels import _empty_like, kernel, padded_rows
from .attention_varlen_kernels import _as_f32, _as_i32, _check_offsets, _check_operands, windows
from .operands import _is_torch

KEY_TILE, QUERY_BLOCK = 128, 64      # the dK/dV kernel's key tile and query blocks


def attention_varlen_backward(q, k, v, o, lse, do, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False,
                              scale: float | None = None, check: bool = True):
    """(dQ, dK, dV) like q, k, v, from the forward's O and LSE ([H, TQ]) and dO."""
    tq, h, d, page = _check_operands(q, k, v, None)
    if check:
        _check_offsets(cu_seqlens_q, cu_seqlens_k, tq, k.shape[0], causal)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    return backward(q, k, v, o, lse, do, cu_seqlens_q, cu_seqlens_k, causal, scale)


def backward(q, k, v, o, lse, do, cu_q, cu_k, causal: bool, scale: float):
    """The three steps, on checked operands (torch on the GPU, NumPy on the interpreter)."""
    tq, h, d = q.shape
    tk = k.shape[0]
    lse_rows, delta = padded_rows(q, h, tq), padded_rows(q, h, tq)   # [H, TQ], 16-byte aligned rows
    lse_rows[...] = lse
    delta[...] = _row_dot(do, o)
    klo, khi = windows(cu_q, cu_k, tq, causal)
    qlo, qhi = key_windows(cu_q, cu_k, tk, causal)
    dq, dk, dv = _empty_like(q), _empty_like(k), _empty_like(v)
    base = _first_blocks(qlo, tk)
    launch = (lambda role, *args: kernel(role, d)(*args)) if _is_torch(q) else \
        (lambda role, *args: kernel(role, d).interpret(*args))
    launch("varlen_dkdv", q, k, v, do, lse_rows, delta, qlo, qhi, _as_f32(qlo - base), _as_f32(qhi - base), scale, dk, dv)
    launch("varlen_dq", q, k, v, do, lse_rows, delta, klo, khi, _as_f32(klo), _as_f32(khi), scale, dq)
    return dq, dk, dv


def key_windows(cu_q, cu_k, keys: int, causal: bool):
    """(lo, hi) i32 [TK]: key v of sequence b is seen by the packed query rows lo[v] .. hi[v]-1:
    all of its sequence's, or (causal, bottom-right) those at or after local row j - (len_k - len_q)
    for its local index j. A key past the last sequence (cu_k[-1] <= v < TK) is seen by none:
    lo = hi = TQ, which keeps the windows moving forward along the keys."""
    if _is_torch(cu_q):
        import torch

        cu_q, cu_k = cu_q.to(torch.int64), cu_k.to(torch.int64)
        v = torch.arange(keys, device=cu_k.device)
        seq = (torch.searchsorted(cu_k, v, right=True) - 1).clamp(0, cu_k.shape[0] - 2)
        where, maximum = torch.where, torch.maximum
    else:
        import numpy as np

        cu_q, cu_k = np.asarray(cu_q, np.int64), np.asarray(cu_k, np.int64)
        v = np.arange(keys)
        seq = np.clip(np.searchsorted(cu_k, v, side="right") - 1, 0, len(cu_k) - 2)
        where, maximum = np.where, np.maximum
    lo, hi = cu_q[seq], cu_q[seq + 1]
    if causal:
        skip = (v - cu_k[seq]) - ((cu_k[seq + 1] - cu_k[seq]) - (hi - lo))     # j - (len_k - len_q)
        lo = lo + maximum(skip, skip * 0)
    outside = v >= cu_k[-1]
    return _as_i32(where(outside, cu_q[-1], lo)), _as_i32(where(outside, cu_q[-1], hi))


def _first_blocks(qlo, keys: int):
    """Per key: the first query row of its key tile's first query block, 64 · (qlo[128 t] / 64)."""
    first = qlo[::KEY_TILE]
    first = first - first % QUERY_BLOCK
    if _is_torch(qlo):
        return first.repeat_interleave(KEY_TILE)[:keys]
    import numpy as np

    return np.repeat(first, KEY_TILE)[:keys]


def _row_dot(do, o):
    """rowsum(dO ∘ O) per packed row and head, [H, TQ] f32 (the products of bf16 values, in f32)."""
    if _is_torch(do):
        return (do.float() * o.float()).sum(-1).transpose(0, 1)
    import numpy as np

    return (do.astype(np.float32) * o.astype(np.float32)).sum(-1).T

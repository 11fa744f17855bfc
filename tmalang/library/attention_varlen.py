"""`tmalang.attention_varlen`: attention over a packed batch of sequences of any lengths, on the
sm_90a kernel of examples/attention_varlen_sm90.tma (forward only).

    o = tmalang.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=True)
    o, lse = tmalang.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True)

FlashAttention's varlen layout: q [TQ, H, D] holds every sequence's query rows one after another,
k and v [TK, HKV, D] their keys; `cu_seqlens_q` and `cu_seqlens_k` ([B + 1] integers) are the
cumulative lengths, sequence b's rows cu_q[b] .. cu_q[b+1]-1. With `causal`, a sequence's last
query row sees all its keys and each earlier row one key fewer (bottom-right aligned, as
FlashAttention's varlen causal is), so every query row needs at least one key: len_k >= len_q,
and len_k >= 1 always. torch tensors (CUDA) run on the GPU, NumPy arrays on the interpreter. The
LSE is [H, TQ] f32, natural log. There is no backward yet: a call on tensors that require a
gradient, with grad mode on, is refused.

The kernel reads each query row's window of packed keys, [wlo, whi), which this module works out
from the offsets: as i32 for the kernel's element reads (the key blocks a 128-row tile walks) and
as f32 for its row vectors (the per-row masks; exact below 2^24 keys). The offsets are checked on
the host first (one copy of B + 1 integers), because a window the kernel read from garbage could
walk billions of key blocks: `check=False` skips that (inside a CUDA graph, say).
"""

from __future__ import annotations

import math

from ..contract.errors import LAUNCH_OPTION, LaunchError
from .attention_kernels import HEAD_DIMS, _empty_like, kernel, padded_rows
from .operands import _is_torch

MAX_KEYS = 1 << 24   # the windows are f32 in the kernel's row vectors: exact integers below 2^24


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False, scale: float | None = None,
                     return_lse: bool = False, check: bool = True):
    """softmax(scale · Q·Kᵀ) · V per sequence of a packed batch: O like q; with `return_lse`, also
    the LSE [H, TQ]. `scale` defaults to 1/sqrt(D)."""
    tq, h, d = _check_operands(q, k, v)
    if check:
        _check_offsets(cu_seqlens_q, cu_seqlens_k, tq, k.shape[0], causal)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    klo, khi = windows(cu_seqlens_q, cu_seqlens_k, tq, causal)
    o, lse = _empty_like(q), padded_rows(q, h, tq)     # lse [H, TQ] with 16-byte aligned rows (TMA)
    args = [q, k, v, klo, khi, _as_f32(klo), _as_f32(khi), scale, lse, o]
    compiled = kernel("varlen", d)
    compiled(*args) if _is_torch(q) else compiled.interpret(*args)
    return (o, lse) if return_lse else o


def windows(cu_q, cu_k, rows: int, causal: bool):
    """(lo, hi) i32 [TQ]: packed query row r of sequence b sees packed keys lo[r] .. hi[r]-1."""
    if _is_torch(cu_q):
        import torch

        cu_q, cu_k = cu_q.to(torch.int64), cu_k.to(torch.int64)
        lengths = cu_q[1:] - cu_q[:-1]
        seq = torch.repeat_interleave(torch.arange(lengths.shape[0], device=cu_q.device), lengths, output_size=rows)
        r = torch.arange(rows, device=cu_q.device)
    else:
        import numpy as np

        cu_q, cu_k = np.asarray(cu_q, np.int64), np.asarray(cu_k, np.int64)
        seq = np.repeat(np.arange(len(cu_q) - 1), np.diff(cu_q))
        r = np.arange(rows)
    lo, hi = cu_k[seq], cu_k[seq + 1]
    if causal:          # bottom-right: the sequence's last row sees every key, each earlier one fewer
        hi = hi - (cu_q[seq + 1] - 1 - r)
    return _as_i32(lo), _as_i32(hi)


def _check_operands(q, k, v) -> tuple[int, int, int]:
    shapes = [tuple(x.shape) for x in (q, k, v)]
    if any(len(s) != 3 for s in shapes):
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: q, k and v are 3-D [total, heads, head dim]; got {shapes}")
    (tq, h, d), (tk, hk, dk) = shapes[:2]
    if shapes[1] != shapes[2] or dk != d:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: k and v must be alike, with q's head dim; got {shapes}")
    if h % hk:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: {hk} K/V heads do not divide {h} query heads")
    if d not in HEAD_DIMS:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: head dim {d} (the kernel takes "
                          f"{', '.join(map(str, HEAD_DIMS))})")
    dtypes = {str(x.dtype).removeprefix("torch.") for x in (q, k, v)}
    if dtypes != {"bfloat16"}:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: q, k and v must be bf16; got {sorted(dtypes)}")
    if not 1 <= tk < MAX_KEYS or tq < 1:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: {tq} query rows and {tk} keys (1 .. 2^24 - 1 keys)")
    if _is_torch(q) and any(x.requires_grad for x in (q, k, v)):
        import torch

        if torch.is_grad_enabled():
            raise LaunchError(LAUNCH_OPTION, "attention_varlen has no backward yet: call it under torch.no_grad() "
                              "or on tensors that do not require a gradient")
    return tq, h, d


def _check_offsets(cu_q, cu_k, tq: int, tk: int, causal: bool) -> None:
    """The offsets as the windows need them (on the host: a copy of B + 1 integers from the GPU)."""
    qs, ks = (list(map(int, x.tolist())) for x in (cu_q, cu_k))
    problem = None
    if len(qs) != len(ks) or len(qs) < 2:
        problem = f"cu_seqlens_q and cu_seqlens_k must both hold B + 1 >= 2 offsets; got {len(qs)} and {len(ks)}"
    elif qs[0] != 0 or ks[0] != 0 or qs[-1] != tq or ks[-1] > tk:
        problem = f"the offsets must run from 0 to q's {tq} rows (k's at most {tk}); got {qs[0]}..{qs[-1]}, {ks[0]}..{ks[-1]}"
    else:
        for b, (q0, q1, k0, k1) in enumerate(zip(qs, qs[1:], ks, ks[1:])):
            if q1 < q0 or k1 <= k0 or causal and k1 - k0 < q1 - q0:
                need = "len_k >= len_q >= 0 (causal)" if causal else "len_q >= 0 and len_k >= 1"
                problem = f"sequence {b} has {q1 - q0} query rows and {k1 - k0} keys; every row needs a key: {need}"
                break
    if problem:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: {problem}")


def _as_i32(x):
    if _is_torch(x):
        import torch

        return x.to(torch.int32).contiguous()
    import numpy as np

    return np.ascontiguousarray(x, np.int32)


def _as_f32(x):
    if _is_torch(x):
        import torch

        return x.to(torch.float32)
    import numpy as np

    return x.astype(np.float32)

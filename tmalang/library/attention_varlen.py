"""`tmalang.attention_varlen`: attention over a packed batch of sequences of any lengths, on the
sm_90a kernel of examples/attention_varlen_sm90.tma.

    o = tmalang.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=True)
    o, lse = tmalang.attention_varlen(q, k, v, cu_q, cu_k, return_lse=True)
    o = tmalang.attention_varlen(q, k_cache, v_cache, cu_q, cu_k, block_table=table)   # paged KV

FlashAttention's varlen layout: q [TQ, H, D] holds every sequence's query rows one after another,
k and v [TK, HKV, D] their keys; `cu_seqlens_q` and `cu_seqlens_k` ([B + 1] integers) are the
cumulative lengths, sequence b's rows cu_q[b] .. cu_q[b+1]-1. With `causal`, a sequence's last
query row sees all its keys and each earlier row one key fewer (bottom-right aligned, as
FlashAttention's varlen causal is), so every query row needs at least one key: len_k >= len_q,
and len_k >= 1 always. torch tensors (CUDA) run on the GPU, NumPy arrays on the interpreter. The
LSE is [H, TQ] f32, natural log. On torch tensors that require a gradient the call is an autograd
function whose backward is examples/attention_varlen_bwd_sm90.tma (attention_varlen_bwd.py;
contiguous keys: a paged cache is for inference); `tmalang.attention_varlen_backward` is that
backward by itself.

A paged cache: k and v [pages, P, HKV, D] with `block_table` [B, max pages] int32, sequence b's
keys the first len_k rows of its pages block_table[b, 0], [b, 1], ... (len_k from cu_seqlens_k),
as FlashAttention's paged varlen call takes them. P is a multiple of 16 (16, 32, 48, 64, ...): the
kernel reads each key block from one page with one TMA box. Hopper has no gather4, so the per-page
design is the one that keeps a block one copy: pages smaller than the kernel's key block make the
block a page (16 or 32 keys) with more of them in flight, which costs the softmax more steps per
key; loads of several pages into bands of one block, which would not, the language cannot yet say.

The kernel reads each query row's window of packed keys, [wlo, whi), which this module works out
from the offsets: as i32 for the kernel's element reads (the key blocks a 128-row tile walks) and
as f32 for its row vectors (the per-row masks; exact below 2^24 keys). Keys are numbered in one
packed key space, sequence after sequence, and key v is row pages[v / P] * P + v % P: contiguous
keys are pages of one row with the identity table; a paged cache starts each sequence on a page. The offsets are checked on
the host first (one copy of B + 1 integers), because a window the kernel read from garbage could
walk billions of key blocks: `check=False` skips that (inside a CUDA graph, say).
"""

from __future__ import annotations

import math

from ..contract.errors import LAUNCH_OPTION, LaunchError
from .attention_varlen_kernels import _check_offsets, _check_operands, _check_pages, forward
from .operands import _is_torch


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False, scale: float | None = None,
                     return_lse: bool = False, block_table=None, check: bool = True):
    """softmax(scale · Q·Kᵀ) · V per sequence of a packed batch: O like q; with `return_lse`, also
    the LSE [H, TQ]. `scale` defaults to 1/sqrt(D). With `block_table` ([B, pages] i32), k and v
    are a paged cache [pages, P, HKV, D] and sequence b's keys are the first len_k rows of its
    pages block_table[b, 0], block_table[b, 1], ... (cu_seqlens_k gives the lengths)."""
    tq, h, d, page = _check_operands(q, k, v, block_table)
    if check:
        _check_offsets(cu_seqlens_q, cu_seqlens_k, tq, k.shape[0] * k.shape[1] if page else k.shape[0], causal)
        if page:
            _check_pages(block_table, cu_seqlens_k, page, k.shape[0])
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    if _needs_gradient(q, k, v):      # the autograd function (attention_varlen_bwd.py for its backward)
        if page:
            raise LaunchError(LAUNCH_OPTION, "attention_varlen: the backward takes contiguous keys; a paged cache "
                              "is for inference: call it under torch.no_grad()")
        from .attention_autograd import AttentionVarlen

        o, lse = AttentionVarlen.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, bool(causal), scale)
        lse = lse.detach()
    else:
        o, lse = forward(q, k, v, cu_seqlens_q, cu_seqlens_k, bool(causal), scale, block_table, page)
    return (o, lse) if return_lse else o


def _needs_gradient(*tensors) -> bool:
    if not _is_torch(tensors[0]) or not any(x.requires_grad for x in tensors):
        return False
    import torch

    return torch.is_grad_enabled()

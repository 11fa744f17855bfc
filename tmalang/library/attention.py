"""`tmalang.attention`: O = softmax(scale · Q·Kᵀ) · V and its backward, on the sm_90a kernels of
examples/attention_sm90.tma (forward) and examples/attention_bwd_sm90.tma (prep and backward).

    o = tmalang.attention(q, k, v, causal=True)                 # [B, H, S, D]; K, V [B, HKV, T, D]
    o, lse = tmalang.attention(q, k, v, layout="bshd", return_lse=True)
    dq, dk, dv = tmalang.attention_backward(q, k, v, o, lse, do, causal=True)

torch tensors (CUDA) run on the GPU, through an autograd function whose launches are torch custom
operators (so `torch.compile(fullgraph=True)` and CUDA graphs see them); NumPy arrays (bf16 from
ml_dtypes) run on the reference interpreter, the forward and `attention_backward` alike.

- **Layouts.** `layout="bhsd"` (torch's SDPA: [B, H, S, D]) or `"bshd"` (FlashAttention's:
  [B, S, H, D]). The kernels read each head's rows as [B·H, S, D]: a contiguous "bhsd" tensor is
  that already (a view); anything else is copied into it first, and the outputs come back in the
  caller's layout.
- **Heads.** K and V have HKV heads with H % HKV == 0 (grouped-query attention; HKV = 1 is
  multi-query); query head h reads K/V head h // (H // HKV), as torch's `enable_gqa` does.
- **What runs.** bf16, head dims 64 and 128, any lengths S and T. causal is top-left aligned
  (query r sees keys 0..r), as torch's `is_causal`. scale defaults to 1/sqrt(D). float8_e4m3fn
  q, k, v at head dim 128 run the fp8 forward (attention_fp8.py; no backward).
- **LSE.** The forward's log-sum-exp per query row (natural log), [B, H, S] in f32; returned with
  `return_lse=True`, without a gradient.
- **Backward.** `attention_bwd_prep` writes delta = rowsum(dO ∘ O) and zeroes an f32 dQ; the
  backward adds every key block's part into it (TMA reduce-add, so dQ's low bits depend on the
  order the CTAs finish) and writes dK and dV (summed over each K/V head's query heads); dQ is
  rounded to the inputs' dtype last.
"""

from __future__ import annotations

import math

from ..contract.errors import LAUNCH_OPTION, LaunchError
from .attention_fp8 import attention_fp8
from .attention_kernels import FP8, _dtype, backward, check, forward, heads_first, in_layout, interpret, padded_rows
from .operands import _is_torch


# ---- the public calls -------------------------------------------------------------------------------

def attention(q, k, v, *, causal: bool = False, scale: float | None = None, layout: str = "bhsd",
              return_lse: bool = False, deterministic: bool = False, q_descale=None, k_descale=None,
              v_descale=None):
    """softmax(scale · Q·Kᵀ) · V in the caller's layout; with `return_lse`, also the LSE [B, H, S].
    deterministic: the backward's dQ is the same bits in every run (attention_backward's).
    float8_e4m3fn q, k, v run the fp8 forward (attention_fp8.py), dequantised by the descales
    (one number, or [B, HKV] per K/V head); O is then bf16."""
    b, h, hk, s, t, d = check(q, k, v, layout)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    if _dtype(q) == FP8:
        o, lse = attention_fp8(q, k, v, (b, h, hk, s, t, d), bool(causal), scale, layout,
                               (q_descale, k_descale, v_descale))
        return (o, lse) if return_lse else o
    if any(x is not None for x in (q_descale, k_descale, v_descale)):
        raise LaunchError(LAUNCH_OPTION, "attention: q/k/v_descale apply to float8_e4m3fn operands only")
    if _is_torch(q):
        from .attention_autograd import Attention

        o, lse = Attention.apply(q, k, v, bool(causal), scale, layout, bool(deterministic))
        lse = lse.detach()      # no gradient; detached here, not marked in the Function (torch.compile)
    else:
        o3, lse3 = forward(*(heads_first(x, layout) for x in (q, k, v)), bool(causal), scale)
        o, lse = in_layout(o3, b, layout), lse3.reshape(b, h, s)
    return (o, lse) if return_lse else o


def attention_backward(q, k, v, o, lse, do, *, causal: bool = False, scale: float | None = None,
                       layout: str = "bhsd", deterministic: bool = False):
    """(dQ, dK, dV) in the caller's layout, from the forward's O and LSE ([B, H, S]) and dO.
    deterministic: dQ summed over the key blocks in one fixed order per query block, so that it
    is the same bits in every run (dK and dV always are); slower (attention_kernels.backward)."""
    b, h, hk, s, t, d = check(q, k, v, layout)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    lse3 = padded_rows(q, b * h, s)
    lse3[...] = lse.reshape(b * h, s)
    q3, k3, v3, o3, do3 = (heads_first(x, layout) for x in (q, k, v, o, do))
    launch = interpret
    if _is_torch(q):      # the kernels as torch operators: CUDA tensors on the GPU
        from .attention_autograd import launch
    grads = backward(q3, k3, v3, o3, lse3, do3, bool(causal), scale, launch, bool(deterministic))
    return tuple(in_layout(g, b, layout) for g in grads)

"""`tmalang.attention` on float8 e4m3 operands: examples/attention_fp8_sm90.tma, forward only.

    o = tmalang.attention(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)

q, k and v are float8_e4m3fn ([B, H, S, D] or "bshd", D 64 or 128), each the real tensor divided by its
descale; the descales are per K/V head, [B, HKV] f32 as FlashAttention-3 takes them (a query
head uses its K/V head's q_descale), or one number for the whole tensor (None: 1). O is bf16
in the caller's layout. The kernel reads V transposed ([B·HKV, D, T]: fp8 wgmma reads K-major
operands only), which this call writes once (one pass over V), and takes the scales as rows of
128 equal values per query head, which it reads as row registers. No torch import here.
"""

from __future__ import annotations

import numpy as np

from ..contract.errors import LAUNCH_OPTION, LaunchError
from .attention_kernels import empty, heads_first, in_layout, kernel, operator, padded_rows
from .operands import _is_torch

ROW = 128          # the kernel's query tile: a scale row holds one value per query row
ALIGN = 16         # bytes: vt's rows (T fp8 values) start 16-byte aligned, as TMA needs


def attention_fp8(q, k, v, shape, causal: bool, scale: float, layout: str, descales):
    """(O, LSE [B, H, S]) of fp8 operands; `shape` is check()'s (B, H, HKV, S, T, D)."""
    b, h, hk, s, t, d = shape
    if _is_torch(q) and any(x.requires_grad for x in (q, k, v)):
        import torch

        if torch.is_grad_enabled():
            raise LaunchError(LAUNCH_OPTION, "attention: the fp8 kernel has no backward; call it under "
                              "torch.no_grad() (or pass tensors that do not require grad)")
    qk, vs = _scale_rows(q, (b, h, hk), scale, descales)
    q3, k3 = heads_first(q, layout), heads_first(k, layout)
    vt = _transposed(heads_first(v, layout))
    o3 = empty(q3, q3.shape, "bfloat16")
    lse = padded_rows(q3, b * h, s)
    args = [q3, k3, vt, qk, vs, int(causal), lse, o3]
    if _is_torch(q):
        operator("fp8", d)(*args)
    else:
        kernel("fp8", d).interpret(*args)
    return in_layout(o3, b, layout), lse.reshape(b, h, s)


def _scale_rows(q, heads: tuple[int, int, int], scale: float, descales):
    """(qk, v) [B·H, 128] f32: query head h's S scale (scale · q_descale · k_descale of its K/V
    head) and V scale, each repeated over a row."""
    b, h, hk = heads
    q_d, k_d, v_d = (_per_kv_head(q, d, b, hk, name) for d, name in zip(descales, ("q", "k", "v")))
    rows = []
    for per_kv in (q_d * k_d * scale, v_d):
        per_query = per_kv.repeat_interleave(h // hk, 1) if _is_torch(q) else per_kv.repeat(h // hk, 1)
        flat = per_query.reshape(b * h, 1)
        rows.append(flat.expand(b * h, ROW).contiguous() if _is_torch(q) else np.repeat(flat, ROW, 1))
    return rows


def _per_kv_head(q, descale, b: int, hk: int, name: str):
    """A descale as [B, HKV] f32 where q lives: None is 1, a number applies to every head. Values
    on the host are checked to be positive; a CUDA tensor is not read (that would synchronize)."""
    on_host = not (_is_torch(descale) and descale.is_cuda)
    if _is_torch(q):
        import torch

        value = torch.as_tensor(1.0 if descale is None else descale, dtype=torch.float32)
    else:
        value = np.asarray(1.0 if descale is None else descale, np.float32)
    if tuple(value.shape) not in ((), (1,), (b, hk)):
        raise LaunchError(LAUNCH_OPTION, f"attention: {name}_descale is one number or [B, HKV] = [{b}, {hk}] "
                          f"(per K/V head); got shape {tuple(value.shape)}")
    if on_host and not bool((value > 0).all()):          # before any copy to the GPU: no sync
        raise LaunchError(LAUNCH_OPTION, f"attention: {name}_descale must be positive")
    if _is_torch(q):
        value = value.to(q.device)
    if tuple(value.shape) == (b, hk):
        return value
    value = value.reshape(1, 1)
    return value.expand(b, hk) if _is_torch(q) else np.broadcast_to(value, (b, hk))


def _transposed(v3):
    """v3 [B·HKV, T, D] as vt [B·HKV, D, T]: a view into rows padded to 16 bytes (one copy)."""
    rows, t, d = v3.shape
    padded = -(-t // ALIGN) * ALIGN
    if _is_torch(v3):
        import torch

        vt = torch.empty(rows, d, padded, device=v3.device, dtype=v3.dtype)[:, :, :t]
        vt.copy_(v3.transpose(1, 2))
        return vt
    vt = np.empty((rows, d, padded), v3.dtype)[:, :, :t]
    vt[...] = v3.transpose(0, 2, 1)
    return vt

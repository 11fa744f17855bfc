"""The torch autograd function behind `tmalang.attention` (library/attention.py), on the
launches of library/attention_kernels.py.

forward keeps Q, K, V in the kernels' [B·H, S, D] form (a view of a contiguous [B, H, S, D]
tensor), O and the LSE for the backward; backward runs the prep and backward kernels and returns
dQ, dK, dV in the caller's layout. AttentionVarlen does the same for packed batches
(attention_varlen.py, attention_varlen_bwd.py; its kernels launched directly, in eager mode). Every launch is a torch custom operator, so the function runs
under torch.compile and in CUDA graphs. torch is imported here only.
"""

from __future__ import annotations

import torch

from . import attention_kernels as kernels
from . import attention_varlen_bwd, attention_varlen_kernels


# One operator per role with a fixed name and schema, defined when this module is imported:
# torch.compile records calls to them like any torch.ops op. Each call compiles (once per process)
# and runs the kernel for its head dim through that kernel's own operator (torch_op.py), which
# launches CUDA tensors on torch's current stream and CPU tensors on the interpreter.
_SCHEMAS = {
    "forward": "(Tensor q, Tensor k, Tensor v, float scale, int causal, Tensor(a!) lse, Tensor(b!) o) -> ()",
    "prep": "(Tensor o, Tensor do, Tensor(a!) delta, Tensor(b!) dq) -> ()",
    "backward": "(Tensor q, Tensor k, Tensor v, Tensor do, Tensor lse, Tensor delta, float scale, int causal, "
                "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()",
    "dq": "(Tensor q, Tensor k, Tensor v, Tensor do, Tensor lse, Tensor delta, float scale, int causal, "
          "Tensor(a!) dq) -> ()",
}
_SCHEMAS["delta"] = _SCHEMAS["prep"]          # the deterministic backward's prep and dK/dV kernel
_SCHEMAS["dkdv"] = _SCHEMAS["backward"]
_library = torch.library.Library("tmalang", "FRAGMENT")


def _define(role: str) -> None:
    name = f"attention_{role}"

    def run(first, *rest):
        kernels.operator(role, first.shape[-1])(first, *rest)
    _library.define(name + _SCHEMAS[role])
    for device in ("CUDA", "CPU"):
        _library.impl(name, run, device)
    torch.library.register_fake(f"tmalang::{name}", lambda *args: None, lib=_library)


for _role in _SCHEMAS:
    _define(_role)


def launch(name: str, head_dim: int, args: list) -> None:
    """A kernel on torch tensors: CUDA on the GPU (torch's current stream), CPU on the interpreter."""
    getattr(torch.ops.tmalang, f"attention_{name}").default(*args)


class Attention(torch.autograd.Function):
    """(O, LSE) = attention(Q, K, V); LSE's gradient is ignored."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, layout: str, deterministic: bool = False):
        batch, heads = q.shape[0], q.shape[1 if layout == "bhsd" else 2]
        q3, k3, v3 = (kernels.heads_first(x, layout) for x in (q, k, v))
        o3, lse = kernels.forward(q3, k3, v3, causal, scale, launch)
        ctx.save_for_backward(q3, k3, v3, o3, lse)
        ctx.causal, ctx.scale, ctx.layout, ctx.batch = causal, scale, layout, batch
        ctx.deterministic = deterministic
        # LSE is not marked non-differentiable: AOT autograd (torch.compile) refuses a Function
        # output without a gradient; attention() detaches it and backward ignores its gradient
        lse = lse.unflatten(0, (batch, heads))
        return kernels.in_layout(o3, batch, layout), lse

    @staticmethod
    def backward(ctx, do, _lse_grad):
        q3, k3, v3, o3, lse = ctx.saved_tensors
        do3 = kernels.heads_first(do, ctx.layout)
        grads = kernels.backward(q3, k3, v3, o3, lse, do3, ctx.causal, ctx.scale, launch, ctx.deterministic)
        return (*(kernels.in_layout(g, ctx.batch, ctx.layout) for g in grads), None, None, None, None)


class AttentionVarlen(torch.autograd.Function):
    """(O, LSE) = attention_varlen(Q, K, V) over a packed batch with contiguous keys; the backward
    runs attention_varlen_bwd.py's kernels. LSE's gradient is ignored."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, causal: bool, scale: float):
        o, lse = attention_varlen_kernels.forward(q, k, v, cu_q, cu_k, causal, scale)
        ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
        ctx.causal, ctx.scale = causal, scale
        return o, lse

    @staticmethod
    def backward(ctx, do, _lse_grad):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        grads = attention_varlen_bwd.backward(q, k, v, o, lse, do.contiguous(), cu_q, cu_k, ctx.causal, ctx.scale)
        return (*grads, None, None, None, None)

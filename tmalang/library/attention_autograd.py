"""The torch autograd function behind `tmalang.attention` (library/attention.py), on the
launches of library/attention_kernels.py.

forward keeps Q, K, V in the kernels' [B·H, S, D] form (a view of a contiguous [B, H, S, D]
tensor), O and the LSE for the backward; backward runs the prep and backward kernels and returns
dQ, dK, dV in the caller's layout. Every launch is a torch custom operator, so the function runs
under torch.compile and in CUDA graphs. torch is imported here only.
"""

from __future__ import annotations

import torch

from . import attention_kernels as kernels


@torch._dynamo.assume_constant_result
def _operator(name: str, head_dim: int):
    """The kernel's operator, made (compiled, registered) outside any graph torch.compile traces:
    to the tracer it is a constant, an OpOverload it records calls to."""
    return kernels.operator(name, head_dim)


def launch(name: str, head_dim: int, args: list) -> None:
    """A kernel on torch tensors: CUDA on the GPU (torch's current stream), CPU on the interpreter."""
    _operator(name, head_dim)(*args)


class Attention(torch.autograd.Function):
    """(O, LSE) = attention(Q, K, V); LSE has no gradient."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, scale: float, layout: str):
        batch, heads = q.shape[0], q.shape[1 if layout == "bhsd" else 2]
        q3, k3, v3 = (kernels.heads_first(x, layout) for x in (q, k, v))
        o3, lse = kernels.forward(q3, k3, v3, causal, scale, launch)
        ctx.save_for_backward(q3, k3, v3, o3, lse)
        ctx.causal, ctx.scale, ctx.layout, ctx.batch = causal, scale, layout, batch
        lse = lse.unflatten(0, (batch, heads))
        ctx.mark_non_differentiable(lse)
        return kernels.in_layout(o3, batch, layout), lse

    @staticmethod
    def backward(ctx, do, _lse_grad):
        q3, k3, v3, o3, lse = ctx.saved_tensors
        do3 = kernels.heads_first(do, ctx.layout)
        grads = kernels.backward(q3, k3, v3, o3, lse, do3, ctx.causal, ctx.scale, launch)
        return (*(kernels.in_layout(g, ctx.batch, ctx.layout) for g in grads), None, None, None)

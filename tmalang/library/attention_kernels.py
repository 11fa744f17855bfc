"""The launches behind `tmalang.attention` (library/attention.py): the kernels of
examples/attention_sm90.tma and examples/attention_bwd_sm90.tma compiled once per process, the
checks of a call, the [B·H, S, D] form the kernels read, and the forward and backward launches,
on torch tensors (custom operators) or NumPy arrays (the interpreter). No torch import here."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from ..api import compile as compile_source
from ..contract.errors import LAUNCH_OPTION, LaunchError
from .operands import INPUTS, _is_torch

LAYOUTS = ("bhsd", "bshd")
HEAD_DIMS = (64, 128)
FP8, FP8_HEAD_DIMS = "float8_e4m3fn", (64, 128)     # examples/attention_fp8_sm90.tma
PAGE_ROWS = 16   # a paged cache's pages hold a multiple of this many rows (a wgmma K step, 8-row swizzle atoms)
# decode's key block and the key blocks of K (and of V) in flight: one CTA fills a multiprocessor's
# shared memory, so its ST·KB rows of each are all that keep the memory busy (bench/attention_decode.py)
DECODE = {"KB": 128, "ST": 2, "OCC": 1, "AR": 232}   # OCC: CTAs a multiprocessor, AR: the softmax's registers


def binding(role: str, head_dim: int, page: int = 1) -> tuple[str, str, dict]:
    """(file, kernel, constants) of the forward, the prep, the backward, the varlen forward or decode
    at a head dim (the last two also at a page size: 1 for contiguous keys): the backward stages dQ
    in two slots beside head dim 64's tiles, in one beside 128's (smem)."""
    if role == "forward":
        return "attention_sm90.tma", {64: "flash_attention", 128: "flash_attention_hd128"}[head_dim], {}
    if role in ("prep", "delta"):      # delta: without zeroing dq (the deterministic backward)
        return "attention_bwd_sm90.tma", "attention_bwd_prep", {"D": head_dim, "ZERO": int(role == "prep")}
    if role in ("varlen", "decode"):
        block = key_block(role, head_dim, page)
        constants = {"D": head_dim, "KB": block, "P": page, "ST": stages(role, head_dim, block)}
        if role == "decode":
            constants |= {"OCC": DECODE["OCC"], "AR": DECODE["AR"]}
        return f"attention_{role}_sm90.tma", f"attention_{role}", constants
    if role == "varlen_dkdv":
        return "attention_varlen_bwd_sm90.tma", "attention_varlen_bwd_dkdv", {"D": head_dim}
    if role == "varlen_dq":
        return "attention_varlen_bwd_sm90.tma", "attention_varlen_bwd_dq", {"D": head_dim, "KB": 64,
                                                                           "QS": 2 if head_dim == 64 else 1}
    if role == "fp8":
        return "attention_fp8_sm90.tma", "attention_fp8", {"D": head_dim}
    if role == "dq":      # the deterministic dQ: two query-tile slots fit beside head dim 64's tiles
        return "attention_bwd_sm90.tma", "attention_bwd_dq", {"D": head_dim, "KB": 64, "QS": 2 if head_dim == 64 else 1}
    # dkdv: dK and dV alone (the deterministic backward's dQ is attention_bwd_dq's); head dim 128's
    # compute warpgroups hold 216 registers then, or ptxas spills
    constants = {"D": head_dim, "DQS": 2 if head_dim == 64 else 1, "WITH_DQ": int(role == "backward")}
    if role == "dkdv" and head_dim == 128:
        constants |= {"CR": 216, "LR": 72}
    return "attention_bwd_sm90.tma", "attention_bwd", constants


def _source(name: str) -> Path:
    """The kernels' file: beside this module in a wheel, under examples/ in a checkout."""
    shipped = Path(__file__).with_name(name)
    return shipped if shipped.is_file() else Path(__file__).resolve().parents[2] / "examples" / name


def key_block(role: str, head_dim: int, page: int) -> int:
    """The varlen or decode kernel's key block: the varlen forward's 128 at head dim 64 and 112 at
    128 (its registers: two score accumulators), decode's DECODE["KB"]; a paged cache needs one
    that divides the page (one TMA box a block, from one page): the first of that, 64, 32 and 16
    that does (pages are multiples of 16 rows: PAGE_ROWS)."""
    block = DECODE["KB"] if role == "decode" else 128 if head_dim == 64 else 112
    return next(b for b in (block, 64, 32, PAGE_ROWS) if page == 1 or page % b == 0)


def stages(role: str, head_dim: int, block: int) -> int:
    """Key blocks of K (and of V) in flight: 2 of the full-size block, and as many more as keep
    the same rows in flight when a small page makes the block smaller (16-row pages: 8 in the
    varlen kernel, 16 in decode's)."""
    full = DECODE["KB"] if role == "decode" else 128 if head_dim == 64 else 112
    base = DECODE["ST"] if role == "decode" else 2
    return max(base, base * (full // block)) if block < 64 else base


@functools.cache
def kernel(role: str, head_dim: int, page: int = 1):
    """The forward, prep, backward or varlen kernel, compiled once per process (cached on disk
    across them)."""
    file, name, constants = binding(role, head_dim, page)
    path = _source(file)
    return compile_source(path.read_text(), kernel=name, name=str(path), constants=constants)


@functools.cache
def operator(name: str, head_dim: int):
    """The kernel as a torch custom operator (torch_op.py): its OpOverload, torch.ops.tmalang.*."""
    return kernel(name, head_dim).as_torch_op().op


# ---- shapes and layouts ---------------------------------------------------------------------------

def check(q, k, v, layout: str) -> tuple[int, int, int, int, int, int]:
    """(B, H, HKV, S, T, D) of a call; LaunchError for what the kernels do not run."""
    if layout not in LAYOUTS:
        raise LaunchError(LAUNCH_OPTION, f"attention: layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    shapes = [tuple(x.shape) for x in (q, k, v)]
    if any(len(s) != 4 for s in shapes):
        raise LaunchError(LAUNCH_OPTION, f"attention: q, k and v are 4-D ({layout}); got shapes {shapes}")
    (b, h, s, d), (bk, hk, t, dk) = (_bhsd(x, layout) for x in shapes[:2])
    if shapes[1] != shapes[2] or bk != b or dk != d:
        raise LaunchError(LAUNCH_OPTION, f"attention: k and v must be alike, with q's batch and head dim; got "
                          f"q {shapes[0]}, k {shapes[1]}, v {shapes[2]} ({layout})")
    if h % hk:
        raise LaunchError(LAUNCH_OPTION, f"attention: {hk} K/V heads do not divide {h} query heads")
    if _dtype(q) == FP8:
        check_head_dim_and_dtype("attention", d, (q, k, v), FP8, FP8_HEAD_DIMS)
    else:
        check_head_dim_and_dtype("attention", d, (q, k, v))
    if min(s, t) < 1 or b < 1:
        raise LaunchError(LAUNCH_OPTION, f"attention: empty sequence or batch: q {shapes[0]}, k {shapes[1]}")
    return b, h, hk, s, t, d


def check_head_dim_and_dtype(call: str, d: int, tensors, dtype: str = "bfloat16", head_dims=HEAD_DIMS) -> None:
    """What an attention kernel takes: by default head dim 64 or 128, bf16 operands (LaunchError)."""
    dtypes = {_dtype(x) for x in tensors}
    if dtypes != {dtype}:
        raise LaunchError(LAUNCH_OPTION, f"{call}: the operands must all be {INPUTS.get(dtype, dtype)}; "
                          f"got {sorted(dtypes)}")
    if d not in head_dims:
        kind = "fp8 kernel takes" if dtype == FP8 else "kernels take"
        raise LaunchError(LAUNCH_OPTION, f"{call}: head dim {d} (the {kind} head dim "
                          f"{' or '.join(map(str, head_dims))})")


def _bhsd(shape: tuple, layout: str) -> tuple:
    return shape if layout == "bhsd" else (shape[0], shape[2], shape[1], shape[3])


def _dtype(x) -> str:
    return str(x.dtype).removeprefix("torch.")


def heads_first(x, layout: str):
    """x as [B·H, S, D] with contiguous rows: a view of a contiguous [B, H, S, D], else a copy."""
    if _is_torch(x):
        x = x if layout == "bhsd" else x.transpose(1, 2)
        return x.contiguous().flatten(0, 1)
    import numpy as np

    x = x if layout == "bhsd" else x.transpose(0, 2, 1, 3)
    return np.ascontiguousarray(x).reshape(-1, *x.shape[2:])


def in_layout(x, batch: int, layout: str):
    """[B·H, S, D] back to the caller's layout (a view)."""
    x = x.reshape(batch, -1, *x.shape[1:])
    return x if layout == "bhsd" else (x.transpose(1, 2) if _is_torch(x) else x.transpose(0, 2, 1, 3))


def padded_rows(like, rows: int, cols: int):
    """[rows, cols] f32 with 16-byte aligned rows (TMA): a view into rows padded to 4 elements."""
    return empty(like, (rows, -(-cols // 4) * 4), "float32")[:, :cols]


def empty(like, shape, dtype: str):
    """An empty array of `shape` and dtype `dtype` ("float32", "bfloat16") where `like` lives: a
    torch tensor on its device, or a NumPy array (ml_dtypes for bfloat16)."""
    if _is_torch(like):
        import torch

        return torch.empty(shape, device=like.device, dtype=getattr(torch, dtype))
    import ml_dtypes
    import numpy as np

    return np.empty(shape, ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype))


def arange_i32(like, n: int, step: int = 1):
    """0, step, 2·step, ... (n of them) as i32, where `like` lives."""
    if _is_torch(like):
        import torch

        return torch.arange(n, device=like.device, dtype=torch.int32) * step
    import numpy as np

    return (np.arange(n) * step).astype(np.int32)


def _empty_like(x):
    if _is_torch(x):
        import torch

        return torch.empty_like(x)
    import numpy as np

    return np.empty_like(x)


# ---- the launches -----------------------------------------------------------------------------------

def interpret(name: str, head_dim: int, args: list) -> None:
    """A launch on the reference interpreter (NumPy arrays)."""
    kernel(name, head_dim).interpret(*args)


def forward(q3, k3, v3, causal: bool, scale: float, launch=interpret):
    """(O, LSE) of [B·H, S, D] operands: O like q3, LSE [B·H, S] f32. `launch(name, head_dim,
    args)` runs a kernel: on the interpreter, or a torch custom operator (attention_autograd.py).
    Scalars are Python numbers, as the operator's schema takes them."""
    o, lse = _empty_like(q3), padded_rows(q3, q3.shape[0], q3.shape[1])
    launch("forward", q3.shape[-1], [q3, k3, v3, float(scale), int(causal), lse, o])
    return o, lse


def backward(q3, k3, v3, o3, lse, do3, causal: bool, scale: float, launch=interpret, deterministic: bool = False):
    """(dQ, dK, dV) of [B·H, S, D] operands, the forward's O and LSE, and dO (`launch`: as forward's).
    deterministic: dQ from attention_bwd_dq, each query block's sum in one fixed order (bitwise
    the same in every run), not from the backward's reduce-adds, whose order varies; the prep and
    the backward then run without their dQ parts (WITH_DQ = 0, ZERO = 0: a compile-time `if`)."""
    d = q3.shape[-1]
    delta = padded_rows(q3, q3.shape[0], q3.shape[1])
    dq = empty(q3, q3.shape, "float32")
    dk, dv = _empty_like(k3), _empty_like(v3)
    if deterministic:     # dq32 is an argument the two kernels do not touch
        launch("delta", d, [o3, do3, delta, dq])
        launch("dkdv", d, [q3, k3, v3, do3, lse, delta, float(scale), int(causal), dq, dk, dv])
        dq = _empty_like(q3)
        launch("dq", d, [q3, k3, v3, do3, lse, delta, float(scale), int(causal), dq])
        return dq, dk, dv
    launch("prep", d, [o3, do3, delta, dq])       # delta, and dq zeroed
    launch("backward", d, [q3, k3, v3, do3, lse, delta, float(scale), int(causal), dq, dk, dv])
    return dq.to(q3.dtype) if _is_torch(dq) else dq.astype(q3.dtype), dk, dv

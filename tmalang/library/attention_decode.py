"""`tmalang.attention_decode`: a few new query rows per sequence against a KV cache, on the sm_90a
kernel of examples/attention_decode_sm90.tma (FlashDecoding: the keys split into chunks that CTAs
take in parallel, then a combine step).

    o = tmalang.attention_decode(q, k_cache, v_cache, cache_seqlens)                  # q [B, SQ, H, D]
    o = tmalang.attention_decode(q, k_cache, v_cache, cache_seqlens, block_table=table, causal=True)

The operands of FlashAttention's `flash_attn_with_kvcache`: q [B, SQ, H, D], the cache [B, T, HKV,
D] (or paged, [pages, P, HKV, D] with `block_table` [B, max pages] int32, P a multiple of 16), and
`cache_seqlens` [B] int32, the keys of each sequence (the new rows' included). `causal`: new row sq
of SQ sees the keys below len - SQ + sq + 1 (bottom-right aligned); without it every key. H / HKV
query heads share a K/V head, and the kernel takes a K/V head's G·SQ query rows in one 64-row
block, so G·SQ <= 64. bf16, head dims 64 and 128. torch tensors (CUDA) run on the GPU, NumPy
arrays on the interpreter; forward only. With `return_lse`, also the LSE [B, H, SQ] f32.

The chunks: `chunk` keys each (a multiple of the key block), chosen from the cache's length bound
(T, or the table's pages · P) so that the CTAs' rounds over the multiprocessors are few and full
(_chunk), which needs no copy to the host; the combine is four torch kernels (or NumPy ops) on the
chunks' partial outputs. The call holds nothing on the host that a CUDA graph could not capture
(`check=False`); its constant operands are built once per device. `check` checks cache_seqlens
(and the table) on the host first.
"""

from __future__ import annotations

import functools
import math

from ..contract.errors import LAUNCH_OPTION, LaunchError
from .attention_kernels import PAGE_ROWS, arange_i32, check_head_dim_and_dtype, empty, kernel, key_block
from .attention_varlen_kernels import _as_i32, _check_pages
from .operands import _is_torch

ROWS = 64          # one wgmma row block: a K/V head's query rows
OVERHEAD_BLOCKS = 2   # a chunk's fixed cost (pipeline fill, its O and LSE out), in key blocks


def attention_decode(q, k_cache, v_cache, cache_seqlens, *, block_table=None, causal: bool = False,
                     scale: float | None = None, return_lse: bool = False, chunk: int | None = None,
                     check: bool = True):
    """softmax(scale · Q·Kᵀ) · V of each sequence's new rows against its cached keys: O like q."""
    b, sq, h, d, hkv, page = _check_operands(q, k_cache, v_cache, cache_seqlens, block_table)
    paged = block_table is not None
    bound = block_table.shape[1] * page if paged else k_cache.shape[1]
    if check:
        _check_lengths(cache_seqlens, bound, sq, causal)
        if paged:
            _check_pages(block_table, _offsets(cache_seqlens), page, k_cache.shape[0])
    block = key_block("decode", d, page or 1)
    compiled = kernel("decode", d, page or 1)
    chunk = chunk or _chunk(q, compiled, b * hkv, bound, block)
    if chunk % block:
        raise LaunchError(LAUNCH_OPTION, f"attention_decode: chunk {chunk} is not a multiple of the key block {block}")
    splits = -(-bound // chunk)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    starts, pages = _key_space(q, k_cache, block_table)
    rows = _rows(q, hkv)                                  # [B, HKV, G·SQ, D]
    off = _constant(q, ("off", h // hkv, sq, causal), lambda: _row_limits(q, h // hkv, sq, causal))
    o, lse = empty(q, (b * splits, hkv, ROWS, d), "float32"), empty(q, (b * splits, hkv, ROWS), "float32")
    args = [rows, *(x.reshape(-1, hkv, d) for x in (k_cache, v_cache)), pages, starts,
            _as_i32(cache_seqlens), off, chunk, scale, lse, o]
    compiled(*args) if _is_torch(q) else compiled.interpret(*args)
    out, total = _combine(o, lse, (b, splits, hkv, h // hkv, sq), q.dtype, return_lse)
    return (out, total) if return_lse else out


def _chunk(q, compiled, heads: int, bound: int, block: int) -> int:
    """Keys a chunk. The CTAs run in rounds of as many as fit on the GPU at once: a split into S
    chunks costs about ceil(heads · S / resident) rounds of (its blocks + a chunk's fixed cost).
    The S of least cost (the fewest chunks among equals: less to combine)."""
    resident = compiled.resident_ctas(q.device.index or 0) if _is_torch(q) else 4   # interpreter: a few
    return _chunk_for(heads, -(-bound // block), resident) * block


@functools.cache
def _chunk_for(heads: int, blocks: int, resident: int) -> int:
    """Key blocks a chunk, for _chunk."""
    def cost(splits: int) -> int:
        return -(-heads * splits // resident) * (-(-blocks // splits) + OVERHEAD_BLOCKS)
    splits = min(range(1, min(blocks, resident) + 1), key=cost)
    return -(-blocks // splits)


def _combine(o, lse, shape, dtype, with_lse: bool):
    """O = Σ_s exp(lse_s - lse) O_s over the S chunks (a softmax of their LSEs weighs them), lse =
    log Σ_s exp(lse_s); back to [B, SQ, H, D] in `dtype` and [B, H, SQ] (None unless `with_lse`).
    A chunk past a sequence's end has lse_s = -inf and O_s = 0. Four kernels on torch tensors."""
    b, splits, hkv, group, sq = shape
    o = o.reshape(b, splits, hkv, ROWS, -1)[:, :, :, :group * sq]
    lse = lse.reshape(b, splits, hkv, ROWS)[:, :, :, :group * sq]
    if _is_torch(o):
        import torch

        out = (torch.softmax(lse, 1)[..., None] * o).sum(1) if splits > 1 else o[:, 0]
        out = out.reshape(b, hkv, group, sq, -1).permute(0, 3, 1, 2, 4)
        out = out.to(dtype, memory_format=torch.contiguous_format)
        total = torch.logsumexp(lse, 1) if with_lse else None
    else:
        import numpy as np

        top = lse.max(1, keepdims=True)
        weight = np.exp(lse - top)
        out = (weight[..., None] * o).sum(1) / weight.sum(1)[..., None]
        out = out.reshape(b, hkv, group, sq, -1).transpose(0, 3, 1, 2, 4).astype(dtype)
        total = top[:, 0] + np.log(weight.sum(1))
    return out.reshape(b, sq, hkv * group, -1), None if total is None else total.reshape(b, hkv * group, sq)


def _rows(q, hkv: int):
    """q [B, SQ, H, D] as [B, HKV, G·SQ, D]: K/V head g's rows, head g·G + i's new row sq at i·SQ + sq."""
    b, sq, h, d = q.shape
    x = q.permute(0, 2, 1, 3) if _is_torch(q) else q.transpose(0, 2, 1, 3)
    x = x.reshape(b, hkv, (h // hkv) * sq, d)
    if _is_torch(q):
        return x.contiguous()
    import numpy as np

    return np.ascontiguousarray(x)


def _row_limits(q, group: int, sq: int, causal: bool):
    """Each of the 64 rows' offset to its sequence's end: (causal) row i·SQ + s sees keys below
    len - SQ + s + 1; else 0. Built where q lives (torch: on its device, with no copy from the
    host, so a call can be captured in a CUDA graph)."""
    if _is_torch(q):
        import torch

        off = torch.zeros(ROWS, device=q.device, dtype=torch.float32)
        if causal:
            off[:group * sq] = (torch.arange(sq, device=q.device, dtype=torch.float32) - sq + 1).repeat(group)
        return off
    import numpy as np

    off = np.zeros(ROWS, np.float32)
    if causal:
        off[:group * sq] = np.tile(np.arange(sq) - sq + 1, group)
    return off


def _offsets(lengths):
    """[B] lengths as [B + 1] cumulative offsets."""
    if _is_torch(lengths):
        import torch

        return torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    import numpy as np

    return np.concatenate([[0], np.cumsum(lengths)])


def _key_space(q, k_cache, block_table):
    """(starts, pages) i32: sequence b's keys are b·W·P .. of a packed key space whose key v is row
    pages[v / P] · P + v % P of the cache seen as rows. A contiguous cache [B, T, ...] is W·P = T
    with pages of one row, the identity; a paged one is W = the table's width, pages = the table
    itself (its unused entries are never read: a key past a sequence's end is not loaded)."""
    b, width = (block_table.shape if block_table is not None else (k_cache.shape[0], k_cache.shape[1]))
    span = width * (k_cache.shape[1] if block_table is not None else 1)
    starts = _constant(q, ("starts", b, span), lambda: arange_i32(q, b, span))
    if block_table is not None:
        return starts, block_table.reshape(-1)
    return starts, _identity(q, b * span)


_CONSTANTS: dict = {}
_IDENTITY: dict = {}      # device -> the aranges made so far, each kept: a captured graph may read any


def _constant(like, key, build):
    """build(), kept per device for torch tensors: a call's constant operands cost no kernel after
    the first. Not kept from a CUDA graph's capture (its tensor is filled only on replay), and
    never dropped (a graph captured after the first call reads the kept tensor): they are small,
    one per decode shape; the long identity table is shared (_identity)."""
    if not _is_torch(like):
        return build()
    import torch

    key = (like.device, *key)
    if key in _CONSTANTS:
        return _CONSTANTS[key]
    value = build()
    if not torch.cuda.is_current_stream_capturing():
        _CONSTANTS[key] = value
    return value


def _identity(q, rows: int):
    """0 .. rows-1 (i32) where q lives: a view of the longest such table made on its device (grown
    as needed; the shorter ones stay alive for the graphs that may read them)."""
    if not _is_torch(q):
        return arange_i32(q, rows, 1)
    import torch

    tables = _IDENTITY.setdefault(q.device, [])
    if not tables or tables[-1].shape[0] < rows:
        if torch.cuda.is_current_stream_capturing():
            return arange_i32(q, rows, 1)
        tables.append(arange_i32(q, max(rows, 2 * tables[-1].shape[0] if tables else rows), 1))
    return tables[-1][:rows]


def _check_operands(q, k, v, lengths, block_table):
    """(B, SQ, H, D, HKV, the page size or 0); LaunchError for what the kernel does not run."""
    shapes = [tuple(x.shape) for x in (q, k, v)]
    if any(len(s) != 4 for s in shapes):
        raise LaunchError(LAUNCH_OPTION, f"attention_decode: q [B, SQ, H, D] and the caches are 4-D; got {shapes}")
    (b, sq, h, d), (rows, page, hkv, dk) = shapes[:2]
    paged = block_table is not None
    if shapes[1] != shapes[2] or dk != d or (not paged and rows != b):
        raise LaunchError(LAUNCH_OPTION, f"attention_decode: the caches must be alike, [B, T, HKV, D] (or paged "
                          f"[pages, P, HKV, D]) with q's batch and head dim; got {shapes}")
    if h % hkv or (h // hkv) * sq > ROWS:
        raise LaunchError(LAUNCH_OPTION, f"attention_decode: {hkv} K/V heads for {h} query heads and {sq} new rows: "
                          f"HKV must divide H, and H / HKV · SQ <= {ROWS} (a K/V head's rows are one block)")
    check_head_dim_and_dtype("attention_decode", d, (q, k, v))
    if tuple(lengths.shape) != (b,) or "int32" not in str(lengths.dtype):
        raise LaunchError(LAUNCH_OPTION, f"attention_decode: cache_seqlens is [{b}] int32; got "
                          f"{tuple(lengths.shape)} {lengths.dtype}")
    if paged and (page % PAGE_ROWS or len(block_table.shape) != 2 or block_table.shape[0] != b
                  or "int32" not in str(block_table.dtype)):
        raise LaunchError(LAUNCH_OPTION, f"attention_decode: a paged cache has pages of {PAGE_ROWS}·n rows (got {page}) and "
                          f"block_table [{b}, pages] int32 (got {tuple(block_table.shape)} {block_table.dtype})")
    if _is_torch(q) and any(x.requires_grad for x in (q, k, v)):
        import torch

        if torch.is_grad_enabled():
            raise LaunchError(LAUNCH_OPTION, "attention_decode has no backward: call it under torch.no_grad()")
    return b, sq, h, d, hkv, page if paged else 0


def _check_lengths(lengths, bound: int, sq: int, causal: bool) -> None:
    """Every sequence has a key (and, causal, one for each new row) within the cache."""
    for b, n in enumerate(map(int, lengths.tolist())):
        if not (sq if causal else 1) <= n <= bound:
            raise LaunchError(LAUNCH_OPTION, f"attention_decode: sequence {b} has {n} keys; the cache holds {bound} "
                              f"and every new row needs a key ({sq if causal else 1} at least)")

"""The launches and checks behind `tmalang.attention_varlen` (attention_varlen.py) and its
backward (attention_varlen_bwd.py): the forward kernel's launch, the per-row key windows worked
out from the cumulative lengths, the packed key space of a paged cache, and the checks of a call.
No torch import here.
"""

from __future__ import annotations

from ..contract.errors import LAUNCH_OPTION, LaunchError
from .attention_kernels import PAGE_ROWS, arange_i32, check_head_dim_and_dtype, _empty_like, kernel, padded_rows
from .operands import _is_torch

MAX_KEYS = 1 << 24   # the windows are f32 in the kernel's row vectors: exact integers below 2^24


def forward(q, k, v, cu_q, cu_k, causal: bool, scale: float, block_table=None, page: int = 0):
    """(O, LSE [H, TQ]) on checked operands: the kernel's launch."""
    tq, h, d = q.shape
    if page:
        starts, pages = _paged_starts(cu_k, block_table, page)
    else:                 # contiguous keys: pages of one row, the identity table
        starts, pages = cu_k[:-1], arange_i32(cu_k, k.shape[0])
    if page:      # the cache's pages as rows: [pages · P, HKV, D] (a view of a contiguous cache)
        k, v = (x.reshape(-1, *x.shape[2:]) for x in (k, v))
    klo, khi = windows(cu_q, cu_k, tq, causal, starts)
    o, lse = _empty_like(q), padded_rows(q, h, tq)     # lse [H, TQ] with 16-byte aligned rows (TMA)
    args = [q, k, v, pages, klo, khi, _as_f32(klo), _as_f32(khi), scale, lse, o]
    compiled = kernel("varlen", d, page or 1)
    compiled(*args) if _is_torch(q) else compiled.interpret(*args)
    return o, lse


def windows(cu_q, cu_k, rows: int, causal: bool, starts=None):
    """(lo, hi) i32 [TQ]: packed query row r of sequence b sees keys lo[r] .. hi[r]-1 of the packed
    key space, in which sequence b's keys start at starts[b] (default cu_k[b]: contiguous keys)."""
    if _is_torch(cu_q):
        import torch

        cu_q, cu_k = cu_q.to(torch.int64), cu_k.to(torch.int64)
        lengths = cu_q[1:] - cu_q[:-1]
        seq = torch.repeat_interleave(torch.arange(lengths.shape[0], device=cu_q.device), lengths, output_size=rows)
        r = torch.arange(rows, device=cu_q.device)
        starts = cu_k[:-1] if starts is None else starts.to(torch.int64)
    else:
        import numpy as np

        cu_q, cu_k = np.asarray(cu_q, np.int64), np.asarray(cu_k, np.int64)
        seq = np.repeat(np.arange(len(cu_q) - 1), np.diff(cu_q))
        r = np.arange(rows)
        starts = cu_k[:-1] if starts is None else np.asarray(starts, np.int64)
    lo = starts[seq]
    hi = lo + (cu_k[seq + 1] - cu_k[seq])
    if causal:          # bottom-right: the sequence's last row sees every key, each earlier one fewer
        hi = hi - (cu_q[seq + 1] - 1 - r)
    return _as_i32(lo), _as_i32(hi)


def _paged_starts(cu_k, block_table, page: int):
    """(starts, pages): sequence b's keys start at starts[b] = P · (the pages of the sequences before
    it) in the packed key space, and `pages` lists every sequence's used pages in order (its first
    ceil(len_k / P) entries of block_table), so that key v is row pages[v / P] · P + v % P. Built
    on the device without a copy to the host: the unused entries go to one spare element."""
    batch, width = block_table.shape
    if _is_torch(cu_k):
        import torch

        cu_k, table = cu_k.to(torch.int64), block_table.to(torch.int32)
        used = (cu_k[1:] - cu_k[:-1] + page - 1) // page
        first = torch.cumsum(used, 0) - used
        column = torch.arange(width, device=cu_k.device)[None, :]
        slot = torch.where(column < used[:, None], first[:, None] + column, batch * width)
        pages = torch.zeros(batch * width + 1, dtype=torch.int32, device=cu_k.device)
        pages.scatter_(0, slot.flatten(), table.flatten())
        return first * page, pages
    import numpy as np

    cu_k, table = np.asarray(cu_k, np.int64), np.asarray(block_table, np.int32)
    used = (np.diff(cu_k) + page - 1) // page
    first = np.cumsum(used) - used
    pages = np.concatenate([table[b, :used[b]] for b in range(batch)] + [np.zeros(1, np.int32)])
    return first * page, pages


def _check_operands(q, k, v, block_table) -> tuple[int, int, int, int]:
    """(TQ, H, D, the page size or 0): LaunchError for what the kernel does not run."""
    shapes = [tuple(x.shape) for x in (q, k, v)]
    paged = block_table is not None
    rank = 4 if paged else 3
    if len(shapes[0]) != 3 or any(len(s) != rank for s in shapes[1:]):
        kv = "[pages, page size, heads, head dim] (a paged cache)" if paged else "[total, heads, head dim]"
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: q is [total, heads, head dim] and k, v {kv}; got {shapes}")
    (tq, h, d), (*rows, hk, dk) = shapes[:2]
    page = rows[1] if paged else 0
    if shapes[1] != shapes[2] or dk != d:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: k and v must be alike, with q's head dim; got {shapes}")
    if h % hk:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: {hk} K/V heads do not divide {h} query heads")
    check_head_dim_and_dtype("attention_varlen", d, (q, k, v))
    keys = rows[0] * page if paged else rows[0]
    if not 1 <= keys < MAX_KEYS or tq < 1:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: {tq} query rows and {keys} keys (1 .. 2^24 - 1 keys)")
    if paged and page % PAGE_ROWS:
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: pages of {page} rows; the kernel reads each key block "
                          f"from one page with one TMA box, so a page is a multiple of {PAGE_ROWS} rows")
    if paged and (len(block_table.shape) != 2 or "int32" not in str(block_table.dtype)):
        raise LaunchError(LAUNCH_OPTION, f"attention_varlen: block_table is [B, pages] int32; got "
                          f"{tuple(block_table.shape)} {block_table.dtype}")
    return tq, h, d, page


def _check_pages(block_table, cu_k, page: int, count: int) -> None:
    """Each sequence's used pages exist: enough columns, and entries in 0 .. pages - 1."""
    table = block_table.tolist()
    ks = list(map(int, cu_k.tolist()))
    for b, (k0, k1) in enumerate(zip(ks, ks[1:])):
        used = -(-(k1 - k0) // page)
        row = table[b] if b < len(table) else []
        if len(row) < used or any(not 0 <= p < count for p in row[:used]):
            raise LaunchError(LAUNCH_OPTION, f"attention_varlen: sequence {b} has {k1 - k0} keys, {used} pages of "
                              f"{page}; block_table[{b}] holds {len(row)} entries, and its first {used} must name "
                              f"pages 0..{count - 1}: {row[:used]}")


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

"""`tmalang.copy`: a tensor's bytes copied by TMA (copy_sm90.tma), whatever its shape.

    y = tmalang.copy(x)          # a new contiguous tensor holding x's values
    tmalang.copy(x, out)         # into `out`, of x's shape and dtype

Any dtype, rank and shape: 1 x 1,048,576 and 1,048,576 x 1 as well as 8192 x 8192. A box fits
the layout, not the shape:
- **Dense** tensors (both contiguous, 16-byte aligned) are copied as the words of their bytes (4,
  2 or 1 bytes, the widest that divides the size): rows of 16 KiB by bulk copies, and the words
  past the last whole row through a 1-D box. A one-row or one-column tensor is as fast as a square.
- **Strided 2-D** tensors (rows of unit stride, row strides of whole 16-byte units) go through a
  2-D box of up to 64 rows of 512 bytes ([1, BC] for a single row).
- Anything else (a strided column, more strided dims, an unaligned view) is refused with the
  layout it has (E212): copy a contiguous tensor, or make it one first.

torch CUDA tensors run on torch's current stream; NumPy arrays on the reference interpreter. A
call with the addresses, layouts and stream of a recent one launches its kernels as that one did,
without checks or views (a copy of a few MiB costs the host what torch's does).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np

from ..api import compile as compile_source
from ..contract.errors import LAUNCH_OPTION, LaunchError
from ..runtime.launch import torch_current_stream
from .operands import is_torch_type

SOURCE = Path(__file__).with_name("copy_sm90.tma")
WORDS = {8: "u64", 4: "u32", 2: "u16", 1: "u8"}     # the unsigned type of each width: TMA moves bits
ROW_BYTES = 16384         # one bulk copy: a row of the dense view
BOX_BYTES = 512           # a 2-D box's row (a 1-D box: 256 words at most)
ALIGN = 16
REPEATS = 16              # recent calls repeated without checks
_repeats: dict[tuple, list] = {}   # addresses, layouts and stream of a checked call -> its launches


def copy(src, out=None):
    """`out` (or a new contiguous tensor) holding src's values; see the module docstring."""
    torch = is_torch_type(type(src))
    if torch and src.is_cuda and (out is None or is_torch_type(type(out))) and not (src.is_conj() or src.is_neg()):
        if out is None:
            out = _empty_like(src, True)
        key = (src.data_ptr(), src.shape, src.stride(), src.dtype, out.data_ptr(), out.shape, out.stride(),
               out.dtype, torch_current_stream((src,)))
        launches = _repeats.get(key)
        if launches is not None:        # the addresses, layouts and stream of a checked call: as launched
            for launch in launches:
                launch()
            return out
    _check(src, out, torch)
    if out is None:
        out = _empty_like(src, torch)
    if _size(src) == 0:
        return out
    if _dense(src, torch) and _dense(out, torch):
        launches = _copy_dense(src, out, torch)
    elif _rows(src, torch) and _rows(out, torch):
        launches = [_copy_rows_2d(src, out, torch)]
    else:
        raise LaunchError(LAUNCH_OPTION, f"copy: TMA cannot address {_layout(src, torch)} -> {_layout(out, torch)}",
                          "copy contiguous tensors, or 2-D ones whose rows have unit stride and start on "
                          "16-byte boundaries (make the tensor contiguous first)")
    if torch and None not in launches:
        _repeats[key] = launches
        while len(_repeats) > REPEATS:
            del _repeats[next(iter(_repeats))]
    return out


def _check(src, out, torch: bool) -> None:
    if not (torch or isinstance(src, np.ndarray)):
        raise LaunchError(LAUNCH_OPTION, f"copy: src must be a torch tensor or a NumPy array, got {type(src).__name__}")
    if torch and not src.is_cuda:
        raise LaunchError(LAUNCH_OPTION, "copy: torch tensors must be on a CUDA device")
    if out is None:
        return
    kind = is_torch_type(type(out)) if torch else isinstance(out, np.ndarray)
    if not kind or tuple(out.shape) != tuple(src.shape) or out.dtype != src.dtype \
            or (torch and out.device != src.device):
        raise LaunchError(LAUNCH_OPTION, f"copy: out must be like src ({type(src).__name__} {tuple(src.shape)} "
                          f"{src.dtype}), got {type(out).__name__} {tuple(getattr(out, 'shape', ()))} "
                          f"{getattr(out, 'dtype', '')}")


def _size(x) -> int:
    return x.numel() if hasattr(x, "numel") else x.size


def _itemsize(x) -> int:
    return x.element_size() if hasattr(x, "element_size") else x.itemsize


def _address(x, torch: bool) -> int:
    return x.data_ptr() if torch else x.__array_interface__["data"][0]


def _dense(x, torch: bool) -> bool:
    contiguous = x.is_contiguous() if torch else x.flags.c_contiguous
    return contiguous and _address(x, torch) % ALIGN == 0


def _strides(x, torch: bool) -> tuple:
    """In elements."""
    return tuple(x.stride()) if torch else tuple(s // x.itemsize for s in x.strides)


def _rows(x, torch: bool) -> bool:
    """A 2-D layout a 2-D box reads: unit inner stride, row starts on 16-byte boundaries."""
    if len(x.shape) != 2:
        return False
    row, col = _strides(x, torch)
    rows, cols = x.shape
    return (col == 1 or cols == 1) and (rows == 1 or row * _itemsize(x) % ALIGN == 0) \
        and _address(x, torch) % ALIGN == 0


def _layout(x, torch: bool) -> str:
    return f"shape {tuple(x.shape)}, strides {_strides(x, torch)} (elements), address {_address(x, torch):#x}"


def _empty_like(x, torch: bool):
    if torch:
        return sys.modules["torch"].empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    return np.empty(x.shape, dtype=x.dtype)


def _words(x, torch: bool, width: int):
    """x's bytes as a flat array of `width`-byte unsigned words (x dense)."""
    flat = x.reshape(-1)
    return _as_words(flat.view(sys.modules["torch"].uint8) if torch else flat.view(np.uint8), torch, width)


def _copy_dense(src, out, torch: bool) -> None:
    nbytes = _size(src) * _itemsize(src)
    width = next(w for w in (4, 2, 1) if nbytes % w == 0)
    s, d = _words(src, torch, width), _words(out, torch, width)
    chunk = ROW_BYTES // width
    rows, tail = divmod(s.shape[0], chunk)
    word = WORDS[width]
    launches = []
    if rows:
        launches.append(_run(_kernel("copy_rows", (("T", word), ("CHUNK", chunk))), s[:rows * chunk].reshape(rows, chunk),
                             d[:rows * chunk].reshape(rows, chunk), torch))
    if tail:
        launches.append(_run(_kernel("copy_flat", (("T", word), ("B", 256))), s[rows * chunk:], d[rows * chunk:], torch))
    return launches


def _copy_rows_2d(src, out, torch: bool) -> None:
    width = _itemsize(src)
    rows = src.shape[0]
    bound = (("T", WORDS[width]), ("BR", 1 if rows == 1 else 64), ("BC", min(256, BOX_BYTES // width)))
    return _run(_kernel("copy_2d", bound), _as_words(src, torch, width), _as_words(out, torch, width), torch)


def _as_words(x, torch: bool, width: int):
    """x reinterpreted as unsigned words of its width (same shape and strides)."""
    if torch:
        return x.view(getattr(sys.modules["torch"], f"uint{8 * width}"))
    return x.view(np.dtype(f"u{width}"))


def _run(kernel, src, dst, torch: bool):
    """The launch, repeatable (torch: `Kernel.launch_repeatable`'s callable), or None (NumPy: the
    interpreter)."""
    if torch:
        return kernel.launch_repeatable(src, dst)
    dst[...] = kernel.interpret(src, dst)[0]
    return None


@functools.cache
def _kernel(name: str, bound: tuple):
    return compile_source(SOURCE.read_text(), kernel=name, name=str(SOURCE), constants=dict(bound))


__all__ = ["copy"]

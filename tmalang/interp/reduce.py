"""What a TMA reduce (`cp.reduce.async.bulk.tensor`) does to each element of global memory.

`combine(op, old, src)` is the new value of every destination element: `old` the tensor's
elements, `src` the box's, both of the tensor's dtype (sema admits only the types of
targets/reduce.py). The reduction is applied when the reduce's transfer writes global memory,
in one step per transfer (interp/bulk.py): each element's read-modify-write is atomic.

- add: integers wrap (two's complement); f64 (bulk reduces) adds in f64; f32, f16 and bf16 round to nearest even once, in the
  destination type (computed in f32, which is exact enough for f16/bf16 that one rounding to
  them is the correctly rounded sum), subnormals kept;
- min, max: integers by value; f16/bf16 as PTX `min`/`max`: a NaN operand is ignored (the
  other wins), two NaNs give the canonical NaN 0x7FFF, and -0.0 counts below +0.0;
- inc: old >= src ? 0 : old + 1; dec: (old == 0 or old > src) ? src : old - 1 (u32, as `atom`);
- and, or, xor: bitwise.
"""

from __future__ import annotations

import numpy as np

CANONICAL_NAN_HALFWORD = 0x7FFF


def combine(op: str, old: np.ndarray, src: np.ndarray) -> np.ndarray:
    return _OPS[op](old, src)


def _add(old, src):
    if old.dtype.kind in "iu":
        return old + src                       # NumPy integer arrays wrap
    wide = np.float64 if old.dtype == np.float64 else np.float32   # f64: bulk reduces only
    return (old.astype(wide) + src.astype(wide)).astype(old.dtype)


def _extremum(smaller: bool):
    def apply(old, src):
        if old.dtype.kind in "iu":
            return np.minimum(old, src) if smaller else np.maximum(old, src)
        a, b = old.astype(np.float32), src.astype(np.float32)
        out = np.where((a < b) == smaller, old, src)
        out = np.where(a == b, old, out)
        zeros = (a == 0) & (b == 0)            # ±0: min takes either sign bit, max needs both
        bits = old.view(np.uint16) | src.view(np.uint16) if smaller else old.view(np.uint16) & src.view(np.uint16)
        out = np.where(zeros, bits.view(old.dtype), out)
        out = np.where(np.isnan(a), src, out)
        out = np.where(np.isnan(b), old, out)
        both = np.isnan(a) & np.isnan(b)
        out.view(np.uint16)[both] = CANONICAL_NAN_HALFWORD
        return out
    return apply


def _inc(old, src):
    return np.where(old >= src, 0, old + 1).astype(old.dtype)


def _dec(old, src):
    return np.where((old == 0) | (old > src), src, old - 1).astype(old.dtype)


_OPS = {
    "add": _add, "min": _extremum(True), "max": _extremum(False), "inc": _inc, "dec": _dec,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}

"""What converting a value to another dtype gives: the semantic function of every cast (`i32(x)`,
`f16(x)`, ...) and of the rounding when a computed value is stored into a tile.

Each conversion is defined as the PTX instruction the backend emits for it does it on the H100
(measured there and on an H200, alike, over 376,320 f32 bit patterns: every sign and exponent with
the mantissas around each rounding boundary, and random patterns; tests/interp/test_conversions.py
checks the GPU against this):

- float → i32, `cvt.rzi.s32.f32`: toward zero; NaN gives 0; ±inf and values out of range clamp
  to INT_MIN / INT_MAX. (x86 and NumPy's cast give INT_MIN for all of these.)
- f32 → f16 / bf16, `cvt.rn.f16.f32` / `cvt.rn.bf16.f32` (and their x2 forms): round to nearest
  even, subnormal results kept; beyond the largest finite value the result is ±inf (no
  satfinite). Any NaN gives the canonical NaN 0x7FFF.
- f16 → f32, `cvt.f32.f16`: exact; any NaN gives the canonical NaN 0x7FFFFFFF.
- bf16 → f32, `cvt.f32.bf16`: exact, NaN bits included (the bf16 is the f32's upper half).
- i32 → float, `cvt.rn.f32.s32`: round to nearest even into f32, then narrowed as above.

Which NaN is not part of the language (LLVM may fold a widening and a narrowing into a plain copy,
which keeps the input's bits); the canonical NaN is what one conversion writes on the GPU, so the
interpreter writes it too. fp8 tiles take no part in tile math (sema, E080), so no conversion here
produces fp8.
"""

from __future__ import annotations

import numpy as np

# The NaN a conversion writes, by the destination's NumPy name (ml_dtypes names bf16 "bfloat16"),
# as an unsigned integer of its width.
CANONICAL_NAN = {"float16": np.uint16(0x7FFF), "bfloat16": np.uint16(0x7FFF), "float32": np.uint32(0x7FFFFFFF),
                 "float8_e4m3fn": np.uint8(0x7F), "float8_e5m2": np.uint8(0x7F)}


SATURATED = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}   # fp8: the largest finite values


def convert(values, dtype) -> np.ndarray:
    """`values` (an array or NumPy scalar) in `dtype`, as the GPU converts them."""
    values, dtype = np.asarray(values), np.dtype(dtype)
    if dtype.kind in "iu":
        return float_to_int(values, dtype) if values.dtype.kind == "f" else values.astype(dtype)
    if values.dtype.kind in "iu":
        values = values.astype(np.float32)   # cvt.rn.f32.s32; integers reach f16/bf16 through f32
    if values.dtype == dtype:
        return values.copy()
    if dtype.name in SATURATED:     # cvt.rn.satfinite: a finite value past the range is the largest
        with np.errstate(invalid="ignore"):
            values = np.clip(values.astype(np.float32), -SATURATED[dtype.name], SATURATED[dtype.name])
    return _float_to_float(values, dtype)


def float_to_int(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Toward zero, NaN → 0, saturating at the integer range (cvt.rzi; 32-bit targets or narrower,
    whose bounds float64 holds exactly)."""
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        wide = np.clip(np.trunc(values.astype(np.float64)), info.min, info.max)
    return np.where(np.isnan(wide), 0, wide).astype(dtype)


def _float_to_float(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round to nearest even (overflow to ±inf), NaN → the destination's canonical NaN, except
    from bf16, whose widening keeps every bit."""
    with np.errstate(over="ignore", invalid="ignore"):
        result = values.astype(dtype)
    nan = CANONICAL_NAN.get(dtype.name)
    if nan is None or values.dtype.name == "bfloat16":
        return result
    bits = np.dtype(f"u{dtype.itemsize}")   # on the bits: a NaN through a float select may change
    return np.where(np.isnan(values), nan, result.view(bits)).astype(bits).view(dtype)

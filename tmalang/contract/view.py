"""`ArrayView`: one description of an array argument, whatever library it came from.

Validation (binding.py) and tensor-map encoding (tensormap.py) only ever see this, so that they
never care whether an array came from NumPy, PyTorch, CuPy or a DLPack producer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..targets import dtypes
from .errors import DTYPE, LaunchError


@dataclass(frozen=True)
class ArrayView:
    """What the runtime needs to know about one array argument.

    `ptr` is the address of element [0, ..., 0]: host memory when `host` is set, device memory
    otherwise. `device` is the CUDA ordinal; it is None for host arrays and for device arrays
    whose producer does not say (the CUDA array interface does not), which the launcher asks
    the driver about.
    """

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]        # bytes, outermost first
    dtype: str                      # tmalang dtype name
    device: int | None
    host: np.ndarray | None = None  # the user's NumPy array, read for staging and written back
    native_dtype: str = ""          # the dtype as the array's library spells it (messages)
    readonly: bool = False
    stream: int | None = None       # CUDA array interface v3: stream the producer last used, for
                                    # the launcher to wait for (None where the GPU already waits)
    owner: object = None            # keeps a DLPack capsule or a cuda.core StridedMemoryView,
                                    # and so the producer's memory, alive

    @property
    def on_host(self) -> bool:
        return self.host is not None

    @property
    def itemsize(self) -> int:
        return dtypes.itemsize(self.dtype)

    @property
    def span_bytes(self) -> int:
        """Bytes from the first to one past the last element (strides are positive here)."""
        return sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + self.itemsize


def checked_dtype(tmalang: str | None, native: str, name: str) -> str:
    """`tmalang`, or a LaunchError naming the unsupported `native` dtype."""
    if tmalang is None:
        raise LaunchError(
            DTYPE,
            f"argument '{name}': dtype {native} is not supported",
            f"supported dtypes: {dtypes.SUPPORTED}",
        )
    return tmalang


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array (what a missing strides entry means)."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))

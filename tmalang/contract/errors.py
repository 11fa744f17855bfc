"""Launch-time errors.

Every problem found while binding arguments or talking to the CUDA driver is a `LaunchError`:
a `TmalangError` without a source span, so it renders as ``error[E2xx]: message``. The codes are
stable so that tests and users can match on them:

E201  wrong number of arguments
E202  wrong kind of argument: a non-array for a tensor parameter, an array for a scalar, an
      array object we cannot read (masked, NumPy masked arrays included; unknown protocol), or a
      read-only array the kernel writes
E203  dtype mismatch, or a dtype tmalang does not support
E204  rank mismatch
E205  dimension mismatch: a symbolic dimension bound to two different values, a literal
      dimension not matching, or `dims=` disagreeing with an array
E206  dimension out of range: empty (size 0), too large for the kernel's signed 32-bit TMA
      coordinates and index math (>= 2**31), or so many tiles that the 32-bit tile index
      overflows (>= 2**31 tiles, the parts of a `split` counted), 2**31 stream-K units or more
      (tiles x K steps of a `stream` walk), a `split` count scalar below 1, or an innermost dim that is not a whole number of a bulk box's chunks (a bulk copy
      cannot clip)
E207  memory layout TMA cannot describe: innermost dimension not contiguous, an outer stride
      not a positive multiple of 16 bytes (32 under an interleave 32B box) or >= 2**40 bytes
E208  base address not 16-byte aligned (32-byte under an interleave 32B box)
E209  device placement: arrays on different GPUs, or memory that is neither host nor CUDA
E210  no usable CUDA driver or device
E211  a CUDA driver call failed (the message names the call and the driver's error)
E212  invalid launch option: unknown or invalid `dims=` entry, a symbol no argument binds,
      a stream object we cannot interpret
E213  scalar value not representable in the parameter's dtype
E214  malformed manifest (compiler and runtime disagree; a tmalang bug, not a user error)
E215  grid cannot be launched: too many CTAs, or not a multiple of the cluster size
E216  a written array whose elements overlap in memory (e.g. `as_strided` rows that alias)
E217  the device cannot run the kernel's target (an sm_100a kernel on an sm_90 GPU, ...)
E218  the watchdog fired: a warp waited on an mbarrier phase longer than the timeout (the kernel
      hung); names every reported wait; the device's context was reset
E219  a kernel assumption (`assume C % 64 == 0`) does not hold for the bound dims and scalars;
      points at the `assume` line, quotes it and names the values (contract/assumptions.py)

E485  an im2col box's pixel box is empty along a spatial dim of the bound tensor (it runs from
      `lower` to dim - 1 + `upper`; cuTensorMapEncodeIm2col refuses an empty one)
"""

from __future__ import annotations

from ..diagnostics import TmalangError

ARG_COUNT = "E201"
ARG_KIND = "E202"
DTYPE = "E203"
RANK = "E204"
DIM_MISMATCH = "E205"
DIM_RANGE = "E206"
LAYOUT = "E207"
ALIGNMENT = "E208"
DEVICE = "E209"
NO_DRIVER = "E210"
DRIVER_CALL = "E211"
LAUNCH_OPTION = "E212"
SCALAR_VALUE = "E213"
IM2COL_PIXEL_BOX = "E485"
MANIFEST = "E214"
GRID = "E215"
OVERLAP = "E216"
WRONG_TARGET = "E217"
WATCHDOG = "E218"
ASSUMPTION = "E219"


class LaunchError(TmalangError):
    """A launch-time error: no source position, one of the E2xx codes above."""

    def __init__(self, code: str, message: str, *notes: str) -> None:
        super().__init__(code, message, None, list(notes))

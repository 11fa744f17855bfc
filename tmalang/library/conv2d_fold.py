"""Space to depth: a strided convolution over few channels, run as a stride-1 convolution over
more channels and a smaller filter.

The kernel takes the channels 16 at a time at least, so a 7x7 stride-2 stem over 3 channels
reduces over 49 filter taps of 16 channels, 13 of them zeros: 784 terms for 147. Folding each
sh x sw block of input pixels into one pixel of sh·sw·C channels turns the convolution into one of
stride 1 with a ceil(R/sh) x ceil(S/sw) filter over those channels: the stem becomes 4x4 taps of
12 channels (padded to 16), 256 terms, and a patchify convolution (a 16x16 filter of stride 16)
becomes a 1x1 one, a GEMM.

With x padded by the convolution's padding (and zeros, or cropped, to sh·H2 rows, H2 = P + R2 − 1),
folded pixel (i, j) holds padded pixels (sh·i + a, sw·j + b) for a < sh, b < sw, as channel
(c·sh + a)·sw + b; the folded filter's tap (i, j) holds the filter's tap (sh·i + a, sw·j + b) in
the same channel, zero past the filter's R x S. Output pixel (p, q) then sums exactly the padded
pixels the strided filter reads, each times the same weight: the same terms, summed in another
order, in f32 as before.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

CHANNEL_UNIT = 16          # the kernel's smallest channel block (conv2d_kernels.Geometry.channel_block)
GAIN = 2                   # fold only where it shortens the reduction at least this much: the fold copies x


@dataclass(frozen=True)
class Fold:
    """The folded convolution's sizes, for a geometry `g` of conv2d_kernels."""

    sh: int
    sw: int
    h2: int                # folded image rows and columns
    w2: int
    r2: int                # folded filter rows and columns
    s2: int
    c2: int                # folded channels: C·sh·sw
    padded_c2: int         # rounded up to the kernel's channel unit


def fold_of(g) -> Fold | None:
    """The fold of geometry `g` where it shortens the kernel's reduction GAIN times or more (a
    stride past 1 in both directions, no dilation); None otherwise."""
    (sh, sw), (dh, dw) = g.stride, g.dilation
    if sh < 2 or sw < 2 or (dh, dw) != (1, 1):
        return None
    r2, s2 = -(-g.r // sh), -(-g.s // sw)
    c2 = g.c * sh * sw
    fold = Fold(sh, sw, g.p + r2 - 1, g.q + s2 - 1, r2, s2, c2, -(-c2 // CHANNEL_UNIT) * CHANNEL_UNIT)
    return fold if GAIN * r2 * s2 * fold.padded_c2 <= g.r * g.s * g.padded_c else None


def folded_input(x, g, f: Fold, torch: bool):
    """x [N, C, H, W] folded: [N, C2', H2, W2] (a view of NHWC memory, channels past C·sh·sw zero)."""
    padded = _padded_image(x, g, f, torch)                      # [N, C, sh·H2, sw·W2]
    blocks = padded.reshape(g.n, g.c, f.h2, f.sh, f.w2, f.sw)
    order = (0, 2, 4, 1, 3, 5)                                  # N, i, j, C, a, b
    nhwc = _buffer(x, (g.n, f.h2, f.w2, f.padded_c2), f.padded_c2 > f.c2, torch)
    if torch:
        nhwc[..., :f.c2].view(g.n, f.h2, f.w2, g.c, f.sh, f.sw).copy_(blocks.permute(*order))
        return nhwc.permute(0, 3, 1, 2)
    nhwc[..., :f.c2] = np.transpose(blocks, order).reshape(g.n, f.h2, f.w2, f.c2)
    return np.transpose(nhwc, (0, 3, 1, 2))


def folded_weights(w, g, f: Fold, torch: bool):
    """w [K, C, R, S] folded: [K, C2', R2, S2] (a view of KRSC memory, zero past the filter and C·sh·sw)."""
    rows, cols = f.sh * f.r2, f.sw * f.s2
    if torch:
        padded = _pad(w.detach(), (0, cols - g.s, 0, rows - g.r))
    else:
        padded = np.zeros((g.k, g.c, rows, cols), dtype=w.dtype)
        padded[:, :, :g.r, :g.s] = w
    taps = padded.reshape(g.k, g.c, f.r2, f.sh, f.s2, f.sw)
    order = (0, 2, 4, 1, 3, 5)                                  # K, i, j, C, a, b
    krsc = _buffer(w, (g.k, f.r2, f.s2, f.padded_c2), f.padded_c2 > f.c2, torch)
    if torch:
        krsc[..., :f.c2].view(g.k, f.r2, f.s2, g.c, f.sh, f.sw).copy_(taps.permute(*order))
        return krsc.permute(0, 3, 1, 2)
    krsc[..., :f.c2] = np.transpose(taps, order).reshape(g.k, f.r2, f.s2, f.c2)
    return np.transpose(krsc, (0, 3, 1, 2))


def _padded_image(x, g, f: Fold, torch: bool):
    """x with the convolution's padding, then zero rows and columns (or rows and columns cropped,
    which no output reads) to sh·H2 x sw·W2."""
    (ph, pw), rows, cols = g.padding, f.sh * f.h2, f.sw * f.w2
    if torch:
        return _pad(x, (pw, cols - g.w - pw, ph, rows - g.h - ph))
    padded = np.zeros((g.n, g.c, rows, cols), dtype=x.dtype)
    h, w = min(g.h, rows - ph), min(g.w, cols - pw)
    padded[:, :, ph:ph + h, pw:pw + w] = x[:, :, :h, :w]
    return padded


def _pad(t, amounts: tuple):
    """torch's F.pad (negative amounts crop), or t itself where there is nothing to pad: one kernel
    launch fewer (a patchify convolution pads nothing)."""
    return sys.modules["torch"].nn.functional.pad(t, amounts) if any(amounts) else t


def _buffer(like, shape: tuple, zeroed: bool, torch: bool):
    """Memory for a folded operand: zeroed where channels past C·sh·sw pad it (each kernel launch
    is host time a repeat call feels, so only then)."""
    if torch:
        make = sys.modules["torch"].zeros if zeroed else sys.modules["torch"].empty
        return make(shape, dtype=like.dtype, device=like.device)
    return np.zeros(shape, dtype=like.dtype)


__all__ = ["Fold", "fold_of", "folded_input", "folded_weights"]

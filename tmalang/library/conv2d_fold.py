"""Space to depth: a strided convolution over few channels, run as a stride-1 convolution over
more channels and a smaller filter.

The kernel takes the channels 16 at a time at least, so a 7x7 stride-2 stem over 3 channels
reduces over 49 filter taps of 16 channels, 13 of them zeros: 784 terms for 147. Folding each
sh x sw block of input pixels into one pixel of sh·sw·C channels turns the convolution into one of
stride 1 with a ceil(R/sh) x ceil(S/sw) filter over those channels: the stem becomes 4x4 taps of
12 channels (padded to 16), 256 terms, and a patchify convolution (a 16x16 filter of stride 16)
becomes a 1x1 one, a GEMM.

With x padded by the convolution's padding (and zeros, or cropped, to sh·H2 rows, H2 = P + R2 − 1),
folded pixel (i, j) holds padded pixels (sh·i + a, sw·j + b) for a < sh, b < sw, as channels
(a·sw + b)·C + c (each pixel's channels together, as channels_last memory holds them); the folded
filter's tap (i, j) holds the filter's tap (sh·i + a, sw·j + b) in the same channel, zero past
the filter's R x S. Output pixel (p, q) then sums exactly the padded
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
    """x [N, C, H, W] folded: [N, C2', H2, W2], a view of NHWC memory (channels past C·sh·sw zero).
    Channel (a·sw + b)·C + c of folded pixel (i, j) is channel c of padded pixel (sh·i + a, sw·j + b):
    each pixel's C channels stay together, as channels_last memory holds them."""
    padded = _padded_image(x, g, f, torch)                      # [N, C, sh·H2, sw·W2]
    nhwc = padded.permute(0, 2, 3, 1) if torch else np.transpose(padded, (0, 2, 3, 1))
    return _folded(nhwc, (g.n, f.h2, f.w2), g.c, f, x, torch)


def folded_weights(w, g, f: Fold, torch: bool):
    """w [K, C, R, S] folded: [K, C2', R2, S2], a view of KRSC memory (zero past the filter and
    C·sh·sw), in folded_input's channel order. A patchify filter (R = sh, S = sw) of channels_last
    memory folds into a view of itself: its KRSC rows are the folded channels already."""
    rows, cols = f.sh * f.r2, f.sw * f.s2
    if torch:
        padded = _pad(w.detach(), (0, cols - g.s, 0, rows - g.r))
        krsc = padded.permute(0, 2, 3, 1)
    else:
        padded = np.zeros((g.k, g.c, rows, cols), dtype=w.dtype)
        padded[:, :, :g.r, :g.s] = w
        krsc = np.transpose(padded, (0, 2, 3, 1))
    return _folded(krsc, (g.k, f.r2, f.s2), g.c, f, w, torch)


def _folded(nhwc, outer: tuple, c: int, f: Fold, like, torch: bool):
    """[A, sh·I, sw·J, C] (NHWC memory order) as [A, C2', I, J] over memory [A, I, J, C2']: element
    (a, i, j, (p·sw + q)·C + k) is (a, sh·i + p, sw·j + q, k). One copy where the blocks are not in
    place already, none where they are (a patchify filter)."""
    n, i, j = outer
    blocks = nhwc.reshape(n, i, f.sh, j, f.sw, c)
    order = (0, 1, 3, 2, 4, 5)                                  # A, I, J, sh, sw, C
    if torch:
        moved = blocks.permute(*order)
        if f.padded_c2 == f.c2:
            return moved.reshape(n, i, j, f.c2).permute(0, 3, 1, 2)      # a view where it can be, else one copy
        folded = sys.modules["torch"].zeros((n, i, j, f.padded_c2), dtype=like.dtype, device=like.device)
        folded[..., :f.c2].view(n, i, j, f.sh, f.sw, c).copy_(moved)
        return folded.permute(0, 3, 1, 2)
    folded = np.zeros((n, i, j, f.padded_c2), dtype=like.dtype)
    folded[..., :f.c2] = np.transpose(blocks, order).reshape(n, i, j, f.c2)
    return np.transpose(folded, (0, 3, 1, 2))


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


__all__ = ["Fold", "fold_of", "folded_input", "folded_weights"]

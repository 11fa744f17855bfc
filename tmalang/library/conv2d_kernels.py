"""The kernels behind `tmalang.conv2d` (library/conv2d.py): checks, layouts, the configuration
rule and the launches, on CUDA torch tensors (the operator's implementation, conv2d_op.py) or
NumPy arrays (the interpreter).

The kernel reads the activation as NHWC and the weights as KRSC: a channels_last tensor is read
where it lies, any other is copied into that layout first. The kernel takes the channels CB at a
time (64, 32 or 16), so C that is not a multiple of 16 is padded with zeros, in a copy; the
output's rows are whole 16-byte units, so K that is not a multiple of 8 is computed into a
padded buffer and copied out. A strided convolution over so few channels that padding them would
at least double the reduction runs folded, as a stride-1 one over more channels (conv2d_fold.py).
A channels_last weight that needs no padding is read as it lies; others are copied into that
layout on every call.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np

from ..api import compile as compile_source
from ..contract.errors import LAUNCH_OPTION, LaunchError
from . import conv2d_repeat as repeats
from .conv2d_fold import fold_of, folded_input, folded_weights
from .gemm import gemm
from .operands import is_torch_type

SOURCE = Path(__file__).with_name("conv2d_sm90.tma.j2")
DTYPES = {"bfloat16": "bf16", "float16": "f16"}
ACTIVATIONS = (None, "relu")
ROW_ALIGN = 8                  # output channels per 16-byte row unit (2-byte elements)
INTERPRETER_SMS = 132          # NumPy operands: choose as for an H100
BIAS_ROWS = 32                 # conv2d_sum's block rows (its BR)
SMEM_BYTES = 227 * 1024        # the opt-in shared memory of one CTA on sm_90a
# No clusters: a pair of CTAs sharing the weight tile by multicast waits on each other's ring
# slots more than the shared load saves. On the H200 (bench/results/conv2d-clusters-2026-11-29-
# h200.json, same run, every 3x3 layer, each tile and split clustered and alone) the best
# unclustered variant beat the best clustered one on every layer but the 7x7 stem (0.50x cuDNN
# against 0.52x): 14² and stride-2 28² layers of 256 channels 1.04-1.07x against 0.76-0.77x, 512
# channels at 7² and 14² 0.81-0.87x against 0.63-0.66x. The template keeps the clustered form for
# that comparison (bench/conv2d_tiles.py --clusters sets this).
CLUSTER = False


@dataclass(frozen=True)
class Geometry:
    """One call's sizes: input [N, C, H, W], weights [K, C, R, S], stride, padding, dilation."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]

    @property
    def p(self) -> int:
        return (self.h + 2 * self.padding[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.padding[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1

    @property
    def channel_block(self) -> int:
        """Channels one K slice takes: 64 (128-byte rows), else 32 or 16 where C is so divisible;
        C is padded to a multiple of the block."""
        return next((b for b in (64, 32) if self.c % b == 0), 16)

    @property
    def padded_c(self) -> int:
        return -(-self.c // self.channel_block) * self.channel_block

    @property
    def padded_k(self) -> int:
        return -(-self.k // ROW_ALIGN) * ROW_ALIGN


def relu_of(activation) -> bool:
    if activation not in ACTIVATIONS:
        raise LaunchError(LAUNCH_OPTION, f"conv2d: activation must be None or 'relu', got {activation!r}")
    return activation == "relu"


def split_count(split) -> int:
    """`split` as the operator takes it: 0 for the rule's choice."""
    if split is not None and (not isinstance(split, int) or isinstance(split, bool) or split < 1):
        raise LaunchError(LAUNCH_OPTION, f"conv2d: split must be a positive int or None, got {split!r}")
    return split or 0


def run(x, w, bias, stride: tuple, padding: tuple, dilation: tuple, relu: bool, split: int | None):
    """The convolution on CUDA torch tensors (the operator's CUDA implementation) or NumPy arrays
    (the interpreter)."""
    key = repeats.key_of(x, w, bias, stride, padding, dilation, relu, split)
    repeat = repeats.find(key)
    if repeat is not None:
        return repeat(x, w)
    g = checked(x, w, stride, padding, dilation, bias, "relu" if relu else None)
    torch = is_torch_type(type(x))
    if g.n == 0 or g.k == 0:
        return _empty_result(x, g, torch)
    fold = fold_of(g)
    if fold is not None:          # few channels, strided: as a stride-1 convolution over more (conv2d_fold.py)
        def folded(x, w):         # x and w folded afresh on every call (their data may have changed)
            return run(folded_input(x, g, fold, torch), folded_weights(w, g, fold, torch), bias, (1, 1), (0, 0),
                       (1, 1), relu, split)
        return (repeats.remember(key, folded) if key is not None else folded)(x, w)   # a repeat skips the checks
    if by_gemm(g, bias, relu, split):
        if torch:      # plain CUDA tensors without a bias: `key` is set
            return repeats.remember(key, repeats.PointwiseRepeat(g))(x, w)
        return _pointwise(x, w, g)
    dtype = DTYPES[_dtype_name(x)]
    sms = _multiprocessors(x) if torch else INTERPRETER_SMS
    tile = tile_of(g, sms)
    parts = split or split_of(g, tile, sms)
    bound = constants(g, tile, bias is not None and parts == 1)
    operands = [_activation(x, g, torch), _weights(w, g, torch)]
    kernel = conv_kernel(dtype, bias is not None, relu, parts > 1, bound, cluster=CLUSTER)
    total = conv_kernel(dtype, bias is not None, relu, True, (), "conv2d_sum") if parts > 1 else None
    if key is not None and g.padded_k == g.k and (operands[0].data_ptr(), operands[1].data_ptr()) == (
            x.data_ptr(), w.data_ptr()):          # read in place: later calls repeat the launches
        return repeats.remember(key, repeats.Repeat(g, kernel, total, parts))(x, w)
    out = _empty(x, (g.n * g.p * g.q, g.padded_k), torch)
    if parts == 1:
        biases = [_bias(bias, g, torch)] if bias is not None else []
        return _result(_launch(kernel, [*operands, *biases, out], out, torch), g, torch)
    workspace = _workspace(x, (parts, g.n * g.p * g.q, g.padded_k), torch)
    rows = [_bias_rows(_bias(bias, g, torch), torch)] if bias is not None else []
    workspace = _launch(kernel, [*operands, parts, workspace, out], workspace, torch)
    return _result(_launch(total, [parts, workspace, *rows, out], out, torch), g, torch)


def by_gemm(g: Geometry, bias, relu: bool, split: int | None) -> bool:
    """A 1x1 convolution of stride 1 without padding is a GEMM of the NHWC rows by the weights'
    [K, C]: `tmalang.gemm` runs it on plain tiled loads, with its own tile and split rule, where
    neither C nor K needs padding, there is no epilogue to fuse or split to pin, and K is past 64
    (H200, bench/results/conv2d-tiles-2026-11-29-h200.json: ResNet-50's 1x1 layers of K ≥ 128 at
    0.92-1.03x cuDNN through the GEMM against 0.54-0.97x through im2col; at K = 64 the im2col
    kernel's 128 x 64 tile, 0.93x, beats the GEMM's)."""
    return (g.r, g.s, g.stride, g.padding) == (1, 1, (1, 1), (0, 0)) and bias is None and not relu \
        and split is None and g.c % ROW_ALIGN == 0 and g.k % ROW_ALIGN == 0 and g.k > 64


def _pointwise(x, w, g: Geometry):
    """The 1x1 convolution on NumPy arrays (`by_gemm`) as C[N·H·W, K] = X[N·H·W, C] · W[K, C]ᵀ; on
    CUDA tensors conv2d_repeat.PointwiseRepeat runs it (from the first call on)."""
    rows = np.transpose(x, (0, 2, 3, 1)).reshape(g.n * g.h * g.w, g.c)
    out = gemm(rows, w.reshape(g.k, g.c).T, _empty(x, (g.n * g.p * g.q, g.k), False))
    return _result(out, g, False)


def _launch(kernel, args: list, written, torch: bool):
    """The kernel on the GPU (torch: `written` is filled in place) or the interpreter (NumPy: the
    tensor it wrote comes back); the written tensor either way."""
    if torch:
        kernel(*args)
        return written
    return kernel.interpret(*args)[0]


def split_of(g: Geometry, tile: tuple[int, int], sms: int) -> int:
    """Parts to split K into: where the BM x BN tiles fill at most half of the multiprocessors, as
    many (two or four) as still fit one wave, each keeping 16 K steps at least. Where `tile_of`
    gives 64 x 128 tiles that fill more than half (3x3 layers of 512 channels at 7² and stride 2 at
    14²: 100 tiles) none: 0.80-0.87x cuDNN, against 0.81-0.83x for 128 x 128 in two parts and
    0.74-0.76x in four (H200, unclustered, conv2d-clusters-2026-11-29-h200.json)."""
    bm, bn = tile
    tiles = -(-g.n * g.p * g.q // bm) * -(-g.padded_k // bn)
    steps = g.r * g.s * g.padded_c // g.channel_block
    if 2 * tiles > sms:
        return 1
    return max(p for p in (1, 2, 4) if p == 1 or (tiles * p <= sms and steps // p >= 16))


def tile_of(g: Geometry, sms: int = INTERPRETER_SMS) -> tuple[int, int]:
    """The tile, BM output pixels by BN output channels, for the unclustered kernel (H200, bench/
    results/conv2d-clusters-2026-11-29-h200.json, against cuDNN in the same run):
    - K ≤ 64, or K an odd number of 64-channel halves (192: 128 x 128 tiles would leave a quarter
      of the columns idle): 128 x 64 (0.84-1.01x; K = 192 at 35²: 0.91x against 0.79x);
    - 128 x 128 tiles that fill half the GPU or more: those (1.03-1.30x; the 14² and stride-2 28²
      layers of 256 channels, 98 tiles: 1.04-1.07x, against 0.79-0.81x for 64 x 128);
    - fewer: 64 x 128, twice as many CTAs, and `split_of` splits K where those are still few."""
    if g.k <= 64 or g.padded_k % 128 == 64:
        return (128, 64)
    tiles = -(-g.n * g.p * g.q // 128) * -(-g.padded_k // 128)
    return (128, 128) if tiles >= sms / 2 else (64, 128)


def stages_of(bm: int, bn: int, block: int, whole_tile: bool = False, most: int | None = None) -> int:
    """The ring's depth: six stages for 128-pixel tiles (0.98x cuDNN against 0.94x with four,
    same run as `tile_of`; more gained at most 0.01x, bench/conv2d_tiles.py --stages), eight for
    64, or `most`; fewer where they do not fit beside the staging tiles (two 64-column blocks, or
    `whole_tile`: the bias epilogue's one BM x BN tile)."""
    stage = (bm + bn) * block * 2
    staging = bm * bn * 2 if whole_tile else 2 * bm * 128
    return max(2, min(most or (8 if bm == 64 else 6), (SMEM_BYTES - staging - 2048) // stage))


def constants(g: Geometry, tile: tuple[int, int] | None = None, bias_epilogue: bool = False) -> tuple:
    """The kernel's constants for this geometry: the filter, stride, padding and dilation, the
    pixel box's upper corner (the last filter corner of a row, relative to its last pixel), the
    channel block and its swizzle, the tile (`tile_of`, or `tile`), its consumer warps and the
    ring's depth (`stages_of`; `bias_epilogue`: the unsplit kernel with a bias, which stages its
    tile whole)."""
    (sh, sw), (ph, pw), (dh, dw) = g.stride, g.padding, g.dilation
    block = g.channel_block
    bm, bn = tile or tile_of(g)
    return (("R", g.r), ("S", g.s), ("SH", sh), ("SW", sw), ("PH", ph), ("PW", pw),
            ("UH", ph - dh * (g.r - 1)), ("UW", pw - dw * (g.s - 1)), ("DH", dh), ("DW", dw),
            ("CB", block), ("SWIZZLE", {64: "128B", 32: "64B", 16: "32B"}[block]), ("BM", bm),
            ("LAST", 11 if bm == 128 else 7), ("BN", bn),
            ("STAGES", stages_of(bm, bn, block, bias_epilogue)))


@functools.cache
def conv_kernel(dtype: str, bias: bool, relu: bool, split: bool, bound: tuple, name: str = "conv2d",
                cluster: bool = False):
    """Kernel `name` of the template rendered with or without bias, ReLU and a split of K, bound
    to the dtype and `bound`, compiled once per process (the cubin is cached on disk across
    processes). Split, conv2d writes f32 parts and conv2d_sum adds them (with bias and ReLU)."""
    text = _template().render(bias=bias, relu=relu, split=split, cluster=cluster)
    types = {"T": dtype, "OUT": dtype} if name == "conv2d" else {"OUT": dtype}
    return compile_source(text, kernel=name, name=str(SOURCE), constants={**dict(bound), **types})


@functools.cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                     undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.from_string(SOURCE.read_text())


# ---- checks -----------------------------------------------------------------------------------

def pair(value, what: str) -> tuple[int, int]:
    if type(value) is int:          # the common case, first: a repeat call's host cost
        return (value, value)
    pair = (value, value) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise LaunchError(LAUNCH_OPTION, f"conv2d: {what} must be an int or a pair of ints, got {value!r}")
    return pair


def checked(x, w, stride, padding, dilation, bias, activation) -> Geometry:
    """The call's Geometry; LaunchError (E212) naming what is wrong."""
    for name, t in (("x", x), ("w", w)):
        if not (is_torch_type(type(t)) or isinstance(t, np.ndarray)):
            raise LaunchError(LAUNCH_OPTION, f"conv2d: {name} must be a torch tensor or a NumPy array, "
                              f"got {type(t).__name__}")
        if len(t.shape) != 4:
            raise LaunchError(LAUNCH_OPTION, f"conv2d: {name} must be 4-D ([N, C, H, W] and [K, C, R, S]), "
                              f"got shape {tuple(t.shape)}")
    if is_torch_type(type(x)) != is_torch_type(type(w)) or (is_torch_type(type(x)) and x.device != w.device):
        raise LaunchError(LAUNCH_OPTION, "conv2d: x and w must both be torch tensors on one device, "
                          "or both NumPy arrays")
    if _dtype_name(x) not in DTYPES or _dtype_name(w) != _dtype_name(x):
        raise LaunchError(LAUNCH_OPTION, f"conv2d: x and w must share one dtype of {', '.join(DTYPES)}; "
                          f"got {_dtype_name(x)} and {_dtype_name(w)}")
    (n, c, h, wd), (k, c_w, r, s) = tuple(x.shape), tuple(w.shape)
    if c_w != c:
        raise LaunchError(LAUNCH_OPTION, f"conv2d: x has {c} channels and w takes {c_w} (groups other than 1 "
                          "are not supported)")
    relu_of(activation)
    g = Geometry(n, c, h, wd, k, r, s, pair(stride, "stride"), pair(padding, "padding"), pair(dilation, "dilation"))
    if min(g.stride + g.dilation) < 1 or min(g.padding) < 0:
        raise LaunchError(LAUNCH_OPTION, f"conv2d: stride and dilation must be at least 1 and padding at least 0; "
                          f"got stride {g.stride}, dilation {g.dilation}, padding {g.padding}")
    if min(r, s, c) < 1 or g.p < 1 or g.q < 1:
        raise LaunchError(LAUNCH_OPTION, f"conv2d: a {r}x{s} filter (dilation {g.dilation}) over {h}x{wd} with "
                          f"padding {g.padding} has no output pixel")
    if bias is not None:
        if not (is_torch_type(type(bias)) == is_torch_type(type(x)) and tuple(bias.shape) == (k,)):
            raise LaunchError(LAUNCH_OPTION, f"conv2d: bias must be a [{k}] vector of the same kind as x, "
                              f"got {type(bias).__name__} {tuple(getattr(bias, 'shape', ()))}")
    return g


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


# ---- layouts ----------------------------------------------------------------------------------

def _empty(x, shape: tuple, torch: bool):
    if torch:
        return sys.modules["torch"].empty(shape, dtype=x.dtype, device=x.device)
    return np.zeros(shape, dtype=x.dtype)


def _activation(x, g: Geometry, torch: bool):
    """x as NHWC [N, H, W, C'] (C' = C padded to the channel block): a channels_last tensor as it
    lies where C needs no padding and its rows are 16-byte aligned, else a copy."""
    nhwc = x.permute(0, 2, 3, 1) if torch else np.transpose(x, (0, 2, 3, 1))
    if g.padded_c == g.c:
        if torch:      # a copy (clone: contiguous() keeps a contiguous but misaligned view) where needed
            return nhwc if nhwc.is_contiguous() and nhwc.data_ptr() % 16 == 0 else \
                nhwc.clone(memory_format=sys.modules["torch"].contiguous_format)
        return np.ascontiguousarray(nhwc)
    padded = _zeros(x, (g.n, g.h, g.w, g.padded_c), torch)
    padded[..., :g.c] = nhwc
    return padded


def _weights(w, g: Geometry, torch: bool):
    """w as KRSC [K', R·S·C'], channels (and filters, to the output's K') padded with zeros. A
    channels_last weight that needs no padding is that already, as it lies (a view, no copy); any
    other is prepared afresh on every call: a kept copy could not see every change to the weights
    (`.data` swaps and writes through `.data` leave torch's version counter as it was)."""
    krsc = w.permute(0, 2, 3, 1) if torch else np.transpose(w, (0, 2, 3, 1))
    if torch and (g.padded_c, g.padded_k) == (g.c, g.k) and krsc.is_contiguous() and krsc.data_ptr() % 16 == 0:
        return krsc.reshape(g.k, g.r * g.s * g.c)
    padded = _zeros(w, (g.padded_k, g.r, g.s, g.padded_c), torch)    # zero filters: zero padding columns
    padded[:g.k, ..., :g.c] = krsc
    return padded.reshape(g.padded_k, g.r * g.s * g.padded_c)


def _bias(bias, g: Geometry, torch: bool):
    """The bias as f32 [K'] (zeros past K)."""
    if torch:
        padded = sys.modules["torch"].zeros(g.padded_k, dtype=sys.modules["torch"].float32, device=bias.device)
        padded[:g.k] = bias.detach()
        return padded
    padded = np.zeros(g.padded_k, np.float32)
    padded[:g.k] = bias
    return padded


def _workspace(x, shape: tuple, torch: bool):
    """f32 parts, one slab each: every part writes all of its slab, so no zeroing."""
    if torch:
        return sys.modules["torch"].empty(shape, dtype=sys.modules["torch"].float32, device=x.device)
    return np.zeros(shape, np.float32)


def _bias_rows(bias, torch: bool):
    """The padded bias as BIAS_ROWS equal rows: the sum kernel adds it as a tile of its block's shape."""
    if torch:
        return bias.expand(BIAS_ROWS, bias.shape[0]).contiguous()
    return np.ascontiguousarray(np.broadcast_to(bias, (BIAS_ROWS, bias.shape[0])))


def _multiprocessors(x) -> int:
    return _device_multiprocessors(x.get_device())


@functools.cache
def _device_multiprocessors(index: int) -> int:
    return sys.modules["torch"].cuda.get_device_properties(index).multi_processor_count


def _zeros(like, shape: tuple, torch: bool):
    if torch:
        return sys.modules["torch"].zeros(shape, dtype=like.dtype, device=like.device)
    return np.zeros(shape, dtype=like.dtype)


def _result(out, g: Geometry, torch: bool):
    """[N, K, P, Q] over the NHWC output rows: channels_last memory (a copy where K was padded)."""
    nhwk = out.reshape(g.n, g.p, g.q, g.padded_k)[..., :g.k]
    if torch:
        nkpq = nhwk.permute(0, 3, 1, 2)
        return nkpq if g.padded_k == g.k else nkpq.contiguous(memory_format=sys.modules["torch"].channels_last)
    return np.ascontiguousarray(np.transpose(nhwk, (0, 3, 1, 2)))


def _empty_result(x, g: Geometry, torch: bool):
    shape = (g.n, g.k, g.p, g.q)
    if torch:
        return sys.modules["torch"].zeros(shape, dtype=x.dtype, device=x.device).contiguous(
            memory_format=sys.modules["torch"].channels_last)
    return np.zeros(shape, dtype=x.dtype)


__all__ = ["Geometry", "run", "checked", "split_of", "pair", "relu_of", "split_count"]

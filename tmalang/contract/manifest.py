"""The launch manifest: everything the runtime needs to know about a compiled kernel.

The compiler derives it from the final IR; the runtime reads it to validate arrays, encode
tensor maps, bind symbolic dimensions and size the grid. It is plain data (JSON-able) so that
C++ hosts can use the same description (see the generated launch header).

PTX parameter order is exactly `Manifest.ptx_params`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class TensorArg:
    """A user-visible tensor parameter, in kernel signature order."""

    name: str
    dtype: str                      # tmalang dtype name: f32, f16, bf16, ...
    shape: tuple[str | int, ...]    # outermost first; str = symbolic dim bound at launch
    written: bool                   # the kernel stores to it (NumPy inputs are copied back)
    read: bool


@dataclass(frozen=True)
class ScalarArg:
    """A user-visible scalar parameter, in kernel signature order."""

    name: str
    dtype: str


@dataclass(frozen=True)
class TensorMapParam:
    """A CUtensorMap passed as a __grid_constant__ kernel parameter (128 B, align 64)."""

    box: str                        # box name in the source
    tensor: str                     # TensorArg.name it describes
    dtype: str
    box_shape: tuple[int, ...]      # outermost first, like the tensor shape
    element_strides: tuple[int, ...]  # outermost first
    swizzle: str                    # "none" | "32B" | "64B" | "128B"
    oob_fill: str                   # "zero" | "nan"
    l2_promotion: str = "none"      # "none" | "64B" | "128B" | "256B"
    interleave: str = "none"        # "none" | "16B" | "32B" (NC/8HWC8-like tensors)
    # an im2col map (cuTensorMapEncodeIm2col) when `lower` is not empty: box_shape is (pixels per
    # column, channels per pixel), element_strides the tensor's (1, spatial strides..., 1), and
    # lower/upper the pixel box's corners per spatial dim, all outermost first
    lower: tuple[int, ...] = ()
    upper: tuple[int, ...] = ()
    # a wide im2col map (cuTensorMapEncodeIm2colWide, sm_100a): "w" or "w128"; only the last
    # (W) corner and stride count, the others are 0 and 1
    wide: str = ""


@dataclass(frozen=True)
class DimParam:
    """A symbolic dimension passed as a .u32 parameter."""

    symbol: str


@dataclass(frozen=True)
class ScalarParam:
    """A scalar argument passed by value."""

    name: str
    dtype: str


@dataclass(frozen=True)
class BulkParam:
    """The global address of a bulk box's tensor, a .u64 parameter (only kernels with bulk boxes).

    A bulk copy moves `chunk` contiguous elements of the innermost dim and cannot clip, so the
    binding refuses a tensor whose innermost dim is not a multiple of `chunk`."""

    box: str
    tensor: str
    dtype: str
    chunk: int


@dataclass(frozen=True)
class BulkStrideParam:
    """The byte stride of dim `axis` (not the innermost) of a bulk box's tensor, a .u64 parameter."""

    box: str
    tensor: str
    axis: int


@dataclass(frozen=True)
class IndexParam:
    """The global address of an index tensor (gathered rows), a .u64 parameter (only kernels with
    gathered copies). Its length is the tensor's dim: a DimParam or a literal. `rows_of`: the
    tensors whose rows it names (what a caller's indices must lie in, e.g. for random inputs)."""

    tensor: str
    rows_of: tuple[str, ...] = ()


@dataclass(frozen=True)
class CounterParam:
    """The global address of the tile counter of a dynamic tile loop, a .u64 parameter (only kernels
    with one): a zeroed u32 that the caller keeps per (context, stream) and passes to every launch;
    each launch leaves it at 0 again (passes/claim_tiles.py), so it is zeroed once, at allocation."""

    name: str = "tile_counter"


@dataclass(frozen=True)
class GridSpec:
    """How many CTAs to launch.

    tiles = split x prod(ceil(dim / box) for dim, box in tile_dims), dims taken from the bound
    symbols (or literal ints), split from the scalar argument it names (or a literal int). kind "tiles": one CTA per tile. kind "persistent": min(tiles,
    multiprocessors x resident CTAs per multiprocessor), each CTA strides over the tiles. With
    `stream` (extent, chunk) the work items are tiles x ceil(extent / chunk) (tile, step) units,
    and a persistent grid is min(units, resident CTAs), each CTA taking one range of them.
    """

    kind: str                       # "tiles" | "persistent"
    tile_dims: tuple[tuple[str | int, int], ...]
    split: str | int = 1            # parts per tile (`split S`): a literal, or a scalar argument's name
    # stream-K (`stream`): the K steps of a tile are steps(extent, chunk), extent a dim symbol, a
    # scalar argument's name or a literal; the grid is sized from tiles x steps, not the tiles
    stream: tuple = ()


def _fields(param) -> dict:
    """A parameter's fields; a tiled tensor map leaves out the empty im2col corners, so its JSON
    reads as it did before im2col maps existed."""
    data = asdict(param)
    if isinstance(param, TensorMapParam) and not param.lower:
        del data["lower"], data["upper"]
    if isinstance(param, TensorMapParam) and not param.wide:
        del data["wide"]
    return data


@dataclass(frozen=True)
class WaitSite:
    """One mbarrier wait loop of the kernel, by the index its watchdog writes into a report
    (backend/watchdog_codegen.py): what the runtime needs to name it as the interpreter would."""

    role: str
    barrier: str                    # the mbarrier's symbol; its stages sit 8 bytes apart
    offset: int                     # the barrier's shared-memory offset from the aligned base
    stages: int
    file: str
    line: int
    col: int
    end_col: int
    text: str                       # the source line, for the caret


@dataclass(frozen=True)
class EventSite:
    """One op the hardware timeline stamps (backend/timeline_codegen.py): a wait (begin and end),
    or an issue or arrival (an instant)."""

    kind: str                       # "wait" | "sync" | "arrive" | "tma load" | "tma store" | "mma commit"
    role: str
    name: str                       # what the trace calls it: the barrier or box
    where: str                      # file:line:col


@dataclass(frozen=True)
class Assumption:
    """An `assume` of the kernel (§2b), which every launch must satisfy before it runs: `lhs
    compare rhs`. Each side is a tree: an int, a name (a dim or an integer scalar argument), or
    (op, a, b) for + - * / % & min max and ("neg", a), computed in 64-bit signed integers, `/`
    and `%` truncating toward zero (contract/assumptions.py evaluates it). `written` is the
    comparison as the source has it; file, line, col, end_col and text (the source line) place the
    caret of the launch error."""

    written: str
    lhs: int | str | tuple
    compare: str                    # == != < <= > >=
    rhs: int | str | tuple
    file: str
    line: int
    col: int
    end_col: int
    text: str


def _tree(value):
    """A side read back from JSON: lists become tuples again."""
    return tuple(_tree(v) for v in value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Manifest:
    kernel: str                     # entry name in the PTX
    arch: str                       # e.g. "sm_90a"
    args: tuple[TensorArg | ScalarArg, ...]
    ptx_params: tuple[TensorMapParam | DimParam | ScalarParam | BulkParam | BulkStrideParam | IndexParam | CounterParam, ...]
    block_threads: int
    smem_bytes: int                 # dynamic shared memory, including alignment slack
    grid: GridSpec
    cluster: tuple[int, int, int] = (1, 1, 1)
    extra: dict = field(default_factory=dict)
    waits: tuple[WaitSite, ...] = ()   # the watchdog's wait sites; empty when compiled without it
    events: tuple[EventSite, ...] = ()   # the timeline's event sites; empty when compiled without it
    assumptions: tuple[Assumption, ...] = ()   # the kernel's `assume` lines, checked at every launch
    # the cubin waits for the kernel before it (backend/prior_grid.py), so the runtime may launch it
    # to overlap that kernel's end; False for a manifest written before it did
    overlaps_prior: bool = False

    def to_json(self) -> dict:
        data = asdict(self)
        if not self.grid.stream:   # the JSON of a kernel without stream-K reads as it did before it existed
            del data["grid"]["stream"]
        data["ptx_params"] = [
            {"kind": type(p).__name__, **_fields(p)} for p in self.ptx_params
        ]
        data["args"] = [{"kind": type(a).__name__, **asdict(a)} for a in self.args]
        if not self.waits:   # likewise for a kernel compiled without the watchdog
            del data["waits"]
        if not self.events:  # or without the timeline
            del data["events"]
        if not self.assumptions:   # or without assumptions
            del data["assumptions"]
        if not self.overlaps_prior:
            del data["overlaps_prior"]
        return data

    @staticmethod
    def from_json(data: dict) -> "Manifest":
        kinds = {c.__name__: c for c in (TensorArg, ScalarArg, TensorMapParam, DimParam, ScalarParam, BulkParam,
                                          BulkStrideParam, IndexParam, CounterParam)}

        def build(entry: dict):
            entry = dict(entry)
            cls = kinds[entry.pop("kind")]
            return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()})

        grid = data["grid"]
        return Manifest(
            kernel=data["kernel"],
            arch=data["arch"],
            args=tuple(build(a) for a in data["args"]),
            ptx_params=tuple(build(p) for p in data["ptx_params"]),
            block_threads=data["block_threads"],
            smem_bytes=data["smem_bytes"],
            grid=GridSpec(grid["kind"], tuple(tuple(d) for d in grid["tile_dims"]), grid.get("split", 1),
                          tuple(grid.get("stream", ()))),
            cluster=tuple(data.get("cluster", (1, 1, 1))),
            extra=data.get("extra", {}),
            waits=tuple(WaitSite(**w) for w in data.get("waits", ())),
            events=tuple(EventSite(**e) for e in data.get("events", ())),
            assumptions=tuple(Assumption(**{**a, "lhs": _tree(a["lhs"]), "rhs": _tree(a["rhs"])})
                              for a in data.get("assumptions", ())),
            overlaps_prior=data.get("overlaps_prior", False),
        )

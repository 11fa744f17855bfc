"""The C++ launch header for a kernel (`tmalangc --emit header`), rendered with jinja2.

It binds a C++ host to the same manifest the Python runtime reads: argument struct, launch-time
validation, tensor-map encoding in the kernel's parameter order, grid sizing. The shared code
lives in runtime/include/tmalang_runtime.h (tmalang.get_include()).

Names. Every legal tmalang name must give a header that compiles, so user names reach the C++
only in two forms:
  - the fields of `KERNEL_args` (public: a host fills them) keep the parameter's name, with `_`
    appended when it could not be a C++ member (`field_name`);
  - every local of `KERNEL_launch` derived from a user name carries a kind prefix (`d_` bound
    dim, `m_` tensor map, `p_` dim parameter, `s_` scalar parameter, `b_` bulk box address or stride, `x_` index tensor address) that none of the header's
    own locals (`e`, `grid`, `params`, ...) starts with, so no user name can shadow them.
The public names `KERNEL_args`, `KERNEL_launch`, `KERNEL_load_file` (with an embedded cubin
`KERNEL_cubin` and `KERNEL_load`, with the watchdog `KERNEL_waits` and `KERNEL_watchdog`) stay as
they are (the kernel's name is its PTX entry name, and sema keeps it a valid identifier); no
suffix ends another, so two kernels' names cannot collide.

A kernel with a dynamic tile loop takes a hidden tile counter (CounterParam): its launch function
takes an optional `tile_counter`, and without one uses tmalang::tile_counter, one zeroed u32 per
(context, stream), as the Python runtime does.

A kernel compiled with the watchdog (its manifest lists `waits`) gets `KERNEL_waits` and
`KERNEL_watchdog`: the wait sites a report names, and the layout of the module global and the
report, taken from contract/watchdog.py so that it is written down once. Its loaders arm the
module and its launch first reports a hang an earlier launch left (tmalang_runtime.h, "the
watchdog"); the header of a kernel without the watchdog has none of this.
"""

from __future__ import annotations

import json
import re

from ..contract import watchdog as watchdog_layout
from . import assumptions
from ..contract.manifest import (
    BulkParam, BulkStrideParam, CounterParam, DimParam, IndexParam, Manifest, ScalarParam, TensorArg, TensorMapParam,
)
from ..ir import ops
from ..targets import tma, tma_modes
from ..targets.arch import target_named
from ..targets.dtypes import DTYPES


CPP_KEYWORDS = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
    class compl concept const consteval constexpr constinit const_cast continue co_await co_return
    co_yield decltype default delete do double dynamic_cast else enum explicit export extern false float
    for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or
    or_eq private protected public register reinterpret_cast requires return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef typeid
    typename union unsigned using virtual void volatile wchar_t while xor xor_eq
    final override import module
""".split())
# Names the struct itself spells (a member named like them would change their meaning inside it),
# and lower-case object-like macros of the C headers that tmalang_runtime.h includes.
HEADER_NAMES = frozenset(("tmalang", "int32_t", "uint32_t", "int64_t", "uint64_t", "stdin", "stdout", "stderr",
                          "errno"))
_MACRO_LIKE = re.compile(r"[A-Z0-9_]{2,}|cu[A-Z]\w*|_[A-Z_]\w*|\w*__\w*")


def field_name(name: str) -> str:
    """The `KERNEL_args` field of parameter `name`: the name itself, or the name with `_` appended
    when its stem (trailing underscores removed) is a C++ keyword, a name the header uses, or could
    be a macro (two or more characters and no lower-case letter, like NULL or EOF; `cuX...`, which
    cuda.h maps to versioned entry points; names reserved to the implementation). Testing the stem
    keeps the mapping one-to-one: `class` -> `class_`, `class_` -> `class__`."""
    stem = name.rstrip("_") or name
    unsafe = stem in CPP_KEYWORDS or stem in HEADER_NAMES or _MACRO_LIKE.fullmatch(stem) is not None
    return name + "_" if unsafe else name


def comment_text(text: str) -> str:
    """`text` as one line of a `//` comment: a JSON string, so a newline or a trailing backslash in
    a file name cannot end the comment or continue it onto the next line."""
    return json.dumps(text)


def cpp_string(text: str) -> str:
    """`text` as a C++ string literal of its UTF-8 bytes: printable ASCII as itself (quote,
    backslash and `?` escaped: `??=` would be a trigraph to a compiler that still reads them),
    any other byte as a three-digit octal escape, which no following digit can extend."""
    def byte(b: int) -> str:
        if b in b'"\\?':
            return "\\" + chr(b)
        return chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}"
    return '"' + "".join(byte(b) for b in text.encode()) + '"'


def watchdog_description(manifest: Manifest) -> dict | None:
    """What the header of a watched kernel needs of contract/watchdog.py; None without the watchdog."""
    if not manifest.waits:
        return None
    w = watchdog_layout
    return {"global": w.GLOBAL, "global_bytes": w.GLOBAL_BYTES, "default_timeout_ns": w.DEFAULT_TIMEOUT_NS,
            "fields": w.FIELDS, "entries": w.ENTRIES, "entry_words": w.ENTRY_WORDS, "entry": w.Entry._fields}


CUBIN_BYTES_PER_LINE = 24


def cubin_lines(cubin: bytes) -> list[str]:
    """The cubin as lines of a C++ initializer (`0x7f, 0x45, ...,`): an array of bytes rather than a
    string literal, whose length some compilers limit."""
    step = CUBIN_BYTES_PER_LINE
    return [", ".join(f"0x{b:02x}" for b in cubin[i:i + step]) + "," for i in range(0, len(cubin), step)]


def render(manifest: Manifest, source: str, kernel: ops.KernelOp | None = None, *,
           cubin: bytes | None = None) -> str:
    """The launch header of `manifest`'s kernel. `source` names the .tma file in the header's first
    line. `kernel` (the final IR) is accepted for callers that have it; the manifest says all the
    header needs. With `cubin`, the header embeds it (`--embed-cubin`) and adds KERNEL_load, which
    loads it without a file."""
    del kernel
    if cubin is not None and not cubin:
        raise ValueError("an embedded cubin cannot be empty")
    import jinja2   # here, not at the top: only `--emit header` needs it, and it costs a cold compile ~30 ms

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tmalang.backend", "templates"), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["field"] = field_name
    env.filters["cpp_string"] = cpp_string
    env.filters["comment"] = comment_text
    template = env.get_template("launch.h.j2")
    tensors = [a for a in manifest.args if isinstance(a, TensorArg)]
    dims: dict[str, list] = {}
    literal_dims = []
    for t in tensors:
        for axis, d in enumerate(t.shape):
            if isinstance(d, str):
                dims.setdefault(d, []).append((t.name, axis))
            else:
                literal_dims.append((d, (t.name, axis)))
    refs = []
    for p in manifest.ptx_params:
        if isinstance(p, BulkStrideParam):
            refs.append(f"&b_{p.box}_s{p.axis}")
            continue
        if isinstance(p, IndexParam):
            refs.append(f"&x_{p.tensor}")
            continue
        if isinstance(p, CounterParam):
            refs.append("&counter")
            continue
        refs.append({TensorMapParam: "&m_{}", DimParam: "&p_{}", ScalarParam: "&s_{}", BulkParam: "&b_{}"}[type(p)].format(
            getattr(p, "box", None) or getattr(p, "symbol", None) or p.name))
    return template.render(
        m=manifest, source=comment_text(source), cubin=cubin, cubin_lines=cubin_lines(cubin) if cubin else [],
        watchdog=watchdog_description(manifest), assumptions=assumptions.cpp_checks(manifest, field_name, cpp_string),
        capability=target_named(manifest.arch).compute_capability,
        counter=any(isinstance(p, CounterParam) for p in manifest.ptx_params), tensors=tensors, dims=dims, literal_dims=literal_dims,
        maps=[p for p in manifest.ptx_params if isinstance(p, TensorMapParam)],
        dim_params=[p for p in manifest.ptx_params if isinstance(p, DimParam)],
        scalar_params=[p for p in manifest.ptx_params if isinstance(p, ScalarParam)],
        bulk_params=[p for p in manifest.ptx_params if isinstance(p, BulkParam)],
        bulk_strides=[p for p in manifest.ptx_params if isinstance(p, BulkStrideParam)],
        index_params=[p for p in manifest.ptx_params if isinstance(p, IndexParam)],
        param_refs=refs, ctype={n: d.ctype for n, d in DTYPES.items() if d.ctype},
        itemsize={n: d.itemsize for n, d in DTYPES.items()},
        tma_dtype={n: tma.DATA_TYPE_PREFIX + d.tma for n, d in DTYPES.items()},
        swizzle={s.name: s.tensor_map for s in tma.SWIZZLES.values()},
        wide_mode=tma_modes.WIDE_MODE_ENUMS,
        interleave={i.name: i.tensor_map for i in tma.INTERLEAVES.values()},
        oob=tma.OOB_FILLS, l2=tma.L2_PROMOTIONS,
    )


"""The C++ launch header for a kernel (`tmalangc --emit header`), rendered with jinja2.

It binds a C++ host to the same manifest the Python runtime reads: argument struct, launch-time
validation, tensor-map encoding in the kernel's parameter order, grid sizing. The shared code
lives in runtime/tmalang_runtime.h.
"""

from __future__ import annotations

import jinja2

from ..sema.dtypes import DTYPES
from .manifest import DimParam, Manifest, ScalarParam, TensorArg, TensorMapParam

CTYPES = {"f32": "float", "f64": "double", "i32": "int32_t", "u32": "uint32_t", "i64": "int64_t", "u64": "uint64_t"}
TMA_DTYPES = {
    "f32": "FLOAT32", "f16": "FLOAT16", "bf16": "BFLOAT16", "f64": "FLOAT64", "i32": "INT32", "u32": "UINT32",
    "i64": "INT64", "u64": "UINT64", "i16": "UINT16", "u16": "UINT16", "i8": "UINT8", "u8": "UINT8",
    "f8e4m3": "UINT8", "f8e5m2": "UINT8",
}
SWIZZLE = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}
L2 = {"none": "NONE", "64B": "L2_PROMOTION_64B", "128B": "L2_PROMOTION_128B", "256B": "L2_PROMOTION_256B"}


def render(manifest: Manifest, source: str) -> str:
    template = jinja2.Environment(
        loader=jinja2.PackageLoader("tmalang.backend", "templates"), undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    ).get_template("launch.h.j2")
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
        refs.append({TensorMapParam: "&map_{}", DimParam: "&dim_{}", ScalarParam: "&scalar_{}"}[type(p)].format(
            getattr(p, "box", None) or getattr(p, "symbol", None) or p.name))
    return template.render(
        m=manifest, source=source, tensors=tensors, dims=dims, literal_dims=literal_dims,
        maps=[p for p in manifest.ptx_params if isinstance(p, TensorMapParam)],
        dim_params=[p for p in manifest.ptx_params if isinstance(p, DimParam)],
        scalar_params=[p for p in manifest.ptx_params if isinstance(p, ScalarParam)],
        param_refs=refs, ctype=CTYPES, itemsize={n: d.itemsize for n, d in DTYPES.items()},
        tma_dtype={k: f"CU_TENSOR_MAP_DATA_TYPE_{v}" for k, v in TMA_DTYPES.items()},
        swizzle={k: f"CU_TENSOR_MAP_SWIZZLE_{v}" for k, v in SWIZZLE.items()},
        oob={"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"},
        l2={k: f"CU_TENSOR_MAP_{v}" if v != "NONE" else "CU_TENSOR_MAP_L2_PROMOTION_NONE" for k, v in L2.items()},
    )


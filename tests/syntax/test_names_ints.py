"""Names and integers that reach PTX, LLVM and the C++ header (issue 11, items 7-9).

Every case must end in "a located diagnostic, or PTX that ptxas accepts": never a traceback,
never a literal that wraps silently, never a name ptxas, LLVM or g++ rejects.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import tmalang

from conftest import ROOT
from tmalang.backend import launch_header, ptxas
from tmalang.compiler import Options, compile_source
from tmalang.diagnostics import TmalangError
from tmalang.sema import PTX_RESERVED

BLOCKSUM = (ROOT / "examples" / "blocksum.tma").read_text()
SAXPY = (ROOT / "examples" / "saxpy.tma").read_text()
EXPLICIT = (ROOT / "examples" / "copy_explicit.tma").read_text()
GEMM = (ROOT / "examples" / "gemm_sm90.tma").read_text()
GEMM_SM100 = (ROOT / "examples" / "gemm_sm100.tma").read_text()
ATTENTION_SM100 = (ROOT / "examples" / "attention_sm100.tma").read_text()

HUGE = "9" * 5000   # over Python's 4,300-digit int() limit
BOUNDARY = ["2147483647", "2147483648", "4294967295", "4294967296", "18446744073709551616", HUGE]


def outcome(text: str, arch: str = "sm_90a") -> TmalangError | None:
    """Compile to a cubin (PTX when no ptxas is installed); return the diagnostic, if any."""
    until = "cubin" if ptxas.find_ptxas() else "ptx"
    try:
        compile_source(text, "case.tma", Options(arch=arch), until=until)
    except TmalangError as caught:
        assert caught.span is not None, f"unlocated diagnostic: {caught}"
        assert caught.code != "E300", f"ptxas rejected the PTX: {caught}"
        return caught
    return None


# ---- item 7: integer literals -------------------------------------------------------------------

POSITIONS = {
    "tile_math": lambda v: SAXPY.replace("a * s.xs", f"{v} * s.xs"),
    "tile_math_i32_mixed": lambda v: SAXPY.replace("a * s.xs", f"(a + {v}) * s.xs"),
    "coordinate": lambda v: SAXPY.replace("load X[m, n]", f"load X[m + {v}, n]"),
    "dim": lambda v: SAXPY.replace("[M,", f"[{v},"),
    "steps_chunk": lambda v: BLOCKSUM.replace("steps(K, 64)", f"steps(K, {v})"),
    "steps_extent": lambda v: BLOCKSUM.replace("steps(K, 64)", f"steps({v}, 64)"),
    "grouped": lambda v: BLOCKSUM.replace("in tiles(out, O)", f"in tiles(out, O) grouped {v}"),
    "wait_group": lambda v: EXPLICIT.replace("wait_group read 0", f"wait_group read {v}"),
    "stages": lambda v: BLOCKSUM.replace("ring[4]", f"ring[{v}]"),
    "box_extent": lambda v: BLOCKSUM.replace("x[64, 64]", f"x[64, {v}]"),
    "warp": lambda v: BLOCKSUM.replace("warp 0", f"warp {v}"),
    "mbarrier_count": lambda v: EXPLICIT.replace("loaded(1)", f"loaded({v})"),
    "expect_tx": lambda v: EXPLICIT.replace("expect_tx loaded, 8192", f"expect_tx loaded, {v}"),
    "parity": lambda v: EXPLICIT.replace("wait loaded, i & 1", f"wait loaded, {v}"),
}


@pytest.mark.parametrize("value", BOUNDARY, ids=["2^31-1", "2^31", "2^32-1", "2^32", "2^64", "huge"])
@pytest.mark.parametrize("position", sorted(POSITIONS))
def test_boundary_integer_is_diagnosed_or_assembles(position, value):
    caught = outcome(POSITIONS[position](value))
    if int(value[:30]) > 2**31 - 1:
        assert caught is not None, "a literal above 2^31 - 1 compiled: it would wrap in the 32-bit code"
        assert caught.code in ("E015", "E028"), caught


def test_int32_max_literal_in_tile_math_compiles_exactly():
    c = compile_source(SAXPY.replace("a * s.xs", "2147483647 * s.xs"), "case.tma", until="ll")
    assert "2147483647" in c.llvm_ir


@pytest.mark.parametrize("literal", ["3e9", "3000000000.0", "3.4028234e38", "1e-50"])
def test_float_literals_in_f32_range_compile(literal):
    assert outcome(SAXPY.replace("a * s.xs", f"{literal} * s.xs")) is None


@pytest.mark.parametrize("literal", ["1e39", "3.4028236e38", "1" + "0" * 40 + ".0", "1e99999"])
def test_float_literal_beyond_f32_is_E029(literal):
    caught = outcome(SAXPY.replace("a * s.xs", f"{literal} * s.xs"))
    assert caught is not None and caught.code == "E029"


def test_dim_literal_limits():
    assert outcome(SAXPY.replace("[M,", "[2147483647,")) is None
    caught = outcome(SAXPY.replace("[M,", "[2147483648,"))
    assert caught.code == "E015" and "2147483648" in caught.message


# ---- item 8: names ----------------------------------------------------------------------------

PTX_NAMES = ["_", "__", "_1", "WARP_SZ", "tmalang_smem", "add", "mov", "ret", "exit", "bar", "entry", "func",
             "global", "shared", "param", "reg", "u32", "b64", "pred", "version", "target", "tid", "ctaid",
             "clock", "laneid", "inf", "nan", "main", "smem_base", "entry_1", "llvm", "nvvm"]


@pytest.mark.parametrize("name", PTX_NAMES)
def test_kernel_name_is_diagnosed_or_assembles(name):
    caught = outcome(SAXPY.replace("kernel saxpy", f"kernel {name}"))
    if name in ("_", "WARP_SZ"):
        assert caught is not None and caught.code == "E018"
    else:
        assert caught is None, caught


@pytest.mark.parametrize("name", ["blocksum", "m", "n", "s", "X", "ring", "producer", "x", "M", "acc"])
@pytest.mark.parametrize("length", [255, 256, 1100])
def test_long_names_are_diagnosed_or_assemble(name, length):
    """Every kind of name at the limit assembles; one character more is E019 at that name."""
    long = name + "q" * (length - len(name))
    text = re.sub(rf"\b{name}\b", long, BLOCKSUM.split("\n", 3)[3])
    caught = outcome(text)
    if length <= 255:
        assert caught is None, caught
    else:
        assert caught is not None and caught.code == "E019" and caught.span.col + length == caught.span.end_col


def test_two_long_names_sharing_a_prefix_stay_distinct():
    """LLVM truncated names past ~1,020 characters, so these two collided (an LLVM parse error)."""
    first, second = "v" * 250 + "a", "v" * 250 + "b"
    text = BLOCKSUM.replace("(m, n)", f"({first}, {second})").replace("[m, k]", f"[{first}, k]")
    text = text.replace("O[m, n]", f"O[{first}, {second}]")
    assert outcome(text) is None


# ---- item 8: registers ----------------------------------------------------------------------------


def _no_budgets(text: str) -> str:
    return re.sub(r", regs \d+", "", text)


def test_wgmma_on_high_warps_without_budgets_is_E045():
    """1024 threads leave 64 registers a thread; the 128 x 256 accumulator's wgmma needs 154."""
    caught = outcome(_no_budgets(GEMM).replace("warps 4..11", "warps 24..31"))
    assert caught.code == "E045" and "accumulator 'acc'" in caught.message and "64" in caught.message
    assert caught.span.source.line(caught.span.line).strip().startswith("accumulator acc")


def test_wgmma_budget_below_its_fragment_is_E045():
    caught = outcome(GEMM.replace("regs 232", "regs 64"))
    assert caught.code == "E045" and "budget of 64" in caught.message


def test_wgmma_without_budgets_on_low_warps_assembles():
    """384 threads leave 168 registers: enough for the 154 the wgmma needs."""
    assert outcome(_no_budgets(GEMM)) is None


@pytest.mark.parametrize("source", [GEMM_SM100, ATTENTION_SM100], ids=["gemm_sm100", "attention_sm100"])
def test_tcgen05_loads_narrow_on_large_blocks(source):
    """With 1024 threads a tcgen05.ld.x64 needs 82 of the 64 registers a thread has (C7602);
    the backend issues narrower loads instead."""
    text = source.replace("warps 4..7", "warps 28..31").replace("warps 8..11", "warps 24..27")
    assert outcome(text, "sm_100a") is None


# ---- item 9: the C++ launch header ---------------------------------------------------------------

HEADER_NAMES = sorted(launch_header.CPP_KEYWORDS | launch_header.HEADER_NAMES | {
    # what the header itself declares or spells
    "e", "args", "stream", "function", "params", "tiles", "grid", "capacity", "box", "element_strides",
    "Error", "Tensor", "fail", "validate", "encode_tiled", "launch", "ceil_div", "CUfunction", "CUstream",
    "CUtensorMap", "CUresult", "size_t", "std", "rank", "shape", "data", "strides",
    "d_M", "m_X", "p_M", "s_a", "map_X", "dim_M", "scalar_a", "dims_args", "dims_launch",
    # object-like macros of the headers it includes
    "NULL", "EOF", "BUFSIZ", "SEEK_SET", "INT32_MAX", "SIZE_MAX", "CUDA_VERSION", "CU_LAUNCH_PARAM_END",
    "CUDAAPI", "cuMemAlloc", "cuMemAlloc_v2", "cuCtxCreate", "WNOHANG", "RAND_MAX", "EXIT_SUCCESS",
    # odd but legal names
    "_", "__", "_x", "_X", "a__b", "class_", "NULL_", "int_", "q", "Q",
})

HEADER_KERNEL = """
kernel {kernel}(x: f32[M, N], out: f32[M, N]{params}) {{
    grid persistent
    box X = x[64, 64]
    box O = out[64, 64]{boxes}
    pipeline ring[2] {{ t: X }}
    role producer: warp 0 {{
        for tile (m, n) in tiles(out, O) {{ produce ring as s {{ load X[m, n] -> s.t }} }}
    }}
    role consumer: warps 4..7 {{
        for tile (m, n) in tiles(out, O) {{ consume ring as s {{ store O[m, n] <- s.t }} }}
    }}
}}
"""


def _header_kernels() -> list[str]:
    """Every name in each place it reaches the header: a tensor (a field), a dim, a box, a scalar."""
    def kernel(name, params="", boxes=""):
        return HEADER_KERNEL.format(kernel=name, params=params, boxes=boxes)
    return [
        kernel("as_tensors", "".join(f", {n}: f32[M, N]" for n in HEADER_NAMES)),
        kernel("as_dims", "".join(f", t{i}: f32[{n}, N]" for i, n in enumerate(HEADER_NAMES))),
        kernel("as_boxes", boxes="".join(f"\n    box {n} = x[64, 64]" for n in HEADER_NAMES)),
        kernel("as_scalars", "".join(f", {n}: f32" for n in HEADER_NAMES)),
    ]


def _cuda_header() -> Path | None:
    candidate = Path("/usr/local/cuda/include/cuda.h")
    return candidate if candidate.exists() else None


def test_every_name_gives_a_compiling_header(tmp_path):
    cuda_h = _cuda_header()
    if shutil.which("g++") is None or cuda_h is None:
        pytest.skip("needs g++ and the CUDA driver header to compile the C++ launch header")
    headers = []
    for text in _header_kernels():
        manifest = compile_source(text, "names.tma", until="ir").manifest
        headers.append(launch_header.render(manifest, "names.tma"))
    for name in ["int", "class", "NULL", "tmalang", "e", "args", "uint32_t", "__", "std", "as_tensors_args"]:
        # as the kernel's name, the stem of KERNEL_args and KERNEL_launch
        headers.append(launch_header.render(dataclasses.replace(manifest, kernel=name), f"{name}.tma"))
    for i, text in enumerate(headers):
        (tmp_path / f"k{i}.h").write_text(text)
    unit = tmp_path / "use.cpp"
    unit.write_text("".join(f'#include "k{i}.h"\n' for i in range(len(headers))))
    run = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                          f"-I{tmalang.get_include()}", f"-I{tmp_path}", f"-I{cuda_h.parent}", str(unit)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[:4000]


def test_field_names_are_one_to_one_and_keep_plain_names():
    assert launch_header.field_name("x") == "x" and launch_header.field_name("Q") == "Q"
    assert launch_header.field_name("class") == "class_" and launch_header.field_name("class_") == "class__"
    assert launch_header.field_name("NULL") == "NULL_" and launch_header.field_name("cuMemAlloc") == "cuMemAlloc_"
    names = HEADER_NAMES + [n + "_" for n in HEADER_NAMES] + [n + "__" for n in HEADER_NAMES]
    assert len({launch_header.field_name(n) for n in set(names)}) == len(set(names))


def test_source_name_cannot_inject_a_line_into_the_header():
    c = compile_source(SAXPY, "saxpy.tma", until="ir")
    text = launch_header.render(c.manifest, "evil\n#error injected\\")
    assert "#error" not in "".join(line for line in text.splitlines() if not line.startswith("//"))
    assert text.splitlines()[0] == '// Generated by tmalangc from "evil\\n#error injected\\\\" — do not edit.'


# ---- item 7: a steps loop's trip count in 32-bit arithmetic --------------------------------------


def _eval_i32(e, env):
    """An index expression as the GPU computes it: every operation wraps to signed 32 bits."""
    from tmalang.ir import exprs as ex
    if isinstance(e, ex.Const):
        return e.value
    if isinstance(e, ex.Param):
        return env[e.name]
    lhs, rhs = _eval_i32(e.lhs, env), _eval_i32(e.rhs, env)
    value = {"+": lambda: lhs + rhs, "/": lambda: int(lhs / rhs), ">": lambda: int(lhs > rhs),
             "%": lambda: lhs - int(lhs / rhs) * rhs}[e.op]()
    return (value + 2**31) % 2**32 - 2**31


@pytest.mark.parametrize("extent", [0, 1, 63, 64, 65, 2**31 - 64, 2**31 - 63, 2**31 - 1])
@pytest.mark.parametrize("chunk", [1, 64, 256])
def test_steps_trip_count_does_not_wrap(extent, chunk):
    """(K + chunk - 1) / chunk wrapped for K within a chunk of 2^31: the loop ran no step."""
    from tmalang.ir import ops
    text = BLOCKSUM.replace("steps(K, 64)", f"steps(K, {chunk})")
    loop = next(o for o in ops.walk(compile_source(text, "case.tma", until="ir").ir.body)
                if isinstance(o, ops.ForRange))
    assert _eval_i32(loop.count, {"K": extent}) == -(-extent // chunk)

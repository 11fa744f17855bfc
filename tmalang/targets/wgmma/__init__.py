"""Hopper warpgroup MMA (wgmma): the encoding layer, plain integers and strings with no IR or
LLVM in it, everything the backend (and the interpreter) needs to emit or model
`wgmma.mma_async`, each name importable from the package itself (`from tmalang.targets import
wgmma; wgmma.KMajorTile`): the 64-bit shared-memory matrix descriptor and the swizzle modes
(descriptors.py); where every element of a K-major operand tile, or an MN-major B operand
(imm-trans-b = 1, 128B swizzle), sits in shared memory (the layout a TMA box with the same swizzle
writes), the descriptor's LBO/SBO for it and the byte offsets of one instruction's K slice or one
64-row block (tiles.py); the multiplicand types, the PTX mnemonic with its validity checks, the
LLVM inline-asm template and constraints of one `wgmma.mma_async`, and the ordering instructions
(instructions.py); which (row, col) of the 64xN result each thread's accumulator register holds
(fragments.py). The compiler uses only the integer parts; the array helpers (pack/unpack, the
accumulator layouts the interpreter and the tests use) import NumPy when called, so compiling a
kernel never loads it. The sm_100 tcgen05 encodings are another table: targets/tcgen05/."""

# Sources. Section numbers are those of the PTX ISA for CUDA 13 ("Parallel Thread Execution ISA",
# chapter 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"):
#
# * 9.7.15.5.1.2.2 "Matrix Descriptor Format"     -> the descriptor bit fields;
# * 9.7.15.5.1.2   "Shared Memory Matrix Layout"  -> Table 38 (swizzle atoms), K-major vs MN-major;
# * 9.7.15.5.1.2.1 "Major-ness supported by Strides" (LBO, SBO, canonical layouts);
# * 9.7.15.5.1.1.1 "Matrix Fragments for wgmma.mma_async.m64nNk16" (Figure 149, accumulator D);
# * 9.7.15.5.2     "wgmma.mma_async" (syntax, operand order, valid shapes and types);
# * 9.7.15.4       "Async Proxy" (wgmma reads shared memory through the async proxy);
# * 9.7.15.7.1 / .2 / .3  wgmma.fence / wgmma.commit_group / wgmma.wait_group.
#
# Every layout fact here is also checked on an H100 by tests/targets/test_wgmma_encoding.py (the GPU test
# builds operand tiles with `KMajorTile.pack`, runs real wgmma instructions made from
# `inline_asm`, and maps the registers back with `accumulator_layout`).

from __future__ import annotations

from .descriptors import (
    ADDRESS_SHIFT,
    BASE_OFFSET_SHIFT,
    ENCODE_MASK,
    FIELD_MASK,
    LBO_SHIFT,
    SBO_SHIFT,
    SWIZZLE_BYTES,
    SWIZZLE_MODE,
    SWIZZLE_SHIFT,
    DescriptorFields,
    advance,
    decode_descriptor,
    descriptor_base,
    encode,
    smem_descriptor,
    swizzle_name,
    with_address,
)
from .fragments import (
    WARPGROUP_THREADS,
    accumulator_coord,
    accumulator_layout,
    accumulator_owner,
    gather_accumulators,
    scatter_accumulators,
)
from .instructions import (
    COMMIT_GROUP,
    FENCE,
    INSTRUCTION_K_BYTES,
    InlineAsm,
    WgmmaShape,
    check,
    dtype_bytes,
    inline_asm,
    instruction,
    instruction_k,
    ptx_type,
    wait_group,
)
from .tiles import KMajorTile, MNMajorTile

__all__ = [
    "ADDRESS_SHIFT", "BASE_OFFSET_SHIFT", "COMMIT_GROUP", "ENCODE_MASK", "FENCE", "FIELD_MASK",
    "INSTRUCTION_K_BYTES", "LBO_SHIFT", "SBO_SHIFT", "SWIZZLE_BYTES", "SWIZZLE_MODE", "SWIZZLE_SHIFT",
    "WARPGROUP_THREADS", "DescriptorFields", "InlineAsm", "KMajorTile", "MNMajorTile", "WgmmaShape",
    "accumulator_coord", "accumulator_layout", "accumulator_owner", "advance", "check",
    "decode_descriptor", "descriptor_base", "dtype_bytes", "encode", "gather_accumulators", "inline_asm",
    "instruction", "instruction_k", "ptx_type", "scatter_accumulators", "smem_descriptor", "swizzle_name",
    "wait_group", "with_address",
]

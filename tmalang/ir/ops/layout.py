"""The shared-memory layout a kernel's declarations hold once placed: each buffer's stages, each
mbarrier's 8-byte words, the word a tmem_alloc writes the Tensor Memory address into, and each
tile queue's words, as byte ranges from the aligned base. plan_smem makes it (and claim_tiles
extends it); the verifier holds hand-written IR to it.
"""

from __future__ import annotations

from .base import Op
from .declarations import BufferDecl, MbarrierDecl
from .kernel import KernelOp, decls
from .scheduling import TileQueueDecl
from .tcgen05 import TmemAlloc

TMEM_ADDRESS_BYTES = 8   # the smem word tcgen05.alloc writes the 32-bit base into, kept 8-byte aligned


def smem_ranges(kernel: KernelOp) -> list[tuple[int, int, Op]]:
    """(first byte, one past the last, the declaration) of everything placed so far (offset >= 0)."""
    ranges = [(b.offset, b.offset + b.bytes * b.stages, b) for b in decls(kernel, BufferDecl).values()]
    ranges += [(m.offset, m.offset + 8 * m.stages, m) for m in decls(kernel, MbarrierDecl).values()]
    ranges += [(a.offset, a.offset + TMEM_ADDRESS_BYTES, a) for a in kernel.body if isinstance(a, TmemAlloc)]
    ranges += [(q.offset, q.offset + q.stage_bytes * q.stages, q) for q in decls(kernel, TileQueueDecl).values()]
    return [r for r in ranges if r[0] >= 0]

"""The sm_90a tensor cores: register accumulators (`accumulator`, `acc_zero`), `wgmma` with its
fence, commit and wait, the accumulator epilogue (`acc_store`), and which accumulators an op
touches in registers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..exprs import AccRef, Bin, BufferRef, Call, Cast, Expr, Neg
from ..exprs import walk as walk_expr
from .base import Op, op, walk


@op("accumulator")
@dataclass
class AccDecl(Op):
    """A register tile of the enclosing role; warpgroup g holds rows 64g .. 64g + 63, or, with
    `parts` > 1 (`by columns`), all 64 rows and columns g·C/parts .. (g+1)·C/parts − 1."""

    symbol: str
    dtype: str
    shape: list[int]
    parts: int = 1

    def columns_of(self, group: int) -> slice:
        """The columns warpgroup `group` holds."""
        width = self.shape[1] // self.parts
        return slice(group * width, (group + 1) * width) if self.parts > 1 else slice(0, self.shape[1])


@op("acc_zero")
@dataclass
class AccZero(Op):
    acc: str


@op("wgmma")
@dataclass
class Wgmma(Op):
    """acc += a · bᵀ over the whole K extent of the tiles (K-major a: [R, K], b: [C, K]).
    `a` is an smem tile, `cvt.bf16(!p)`: accumulator p converted in registers (wgmma's
    register-A form; p's fragment layout is the A fragment layout, 16 columns per K step), or
    `!p` with p a bf16/f16 accumulator: the fragment converted when row math wrote it."""

    acc: str
    a: Expr
    b: BufferRef
    kn: bool = False   # b is [K, C], stored C-innermost (MN-major, imm-trans-b = 1): acc += a · b
    km: bool = False   # a is [K, R], stored R-innermost (MN-major, imm-trans-a = 1): acc += aᵀ · …

    def register_a(self) -> set[str]:
        """The accumulator read as a register A operand (`cvt.bf16(!p)` or `!p`), if any."""
        return {e.name for e in walk_expr(self.a) if isinstance(e, AccRef)}


@op("wgmma_fence")
@dataclass
class WgmmaFence(Op):
    """wgmma.fence. `pins`: the accumulators whose registers the backend ties to it (writes
    before the fence stay before it); empty: all of the role's (wait_wgmma_late leaves out those
    of groups still in flight)."""

    pins: list[str] = field(default_factory=list)


@op("wgmma_commit")
@dataclass
class WgmmaCommit(Op):
    pass


@op("wgmma_wait")
@dataclass
class WgmmaWait(Op):
    """wgmma.wait_group: at most `pending` groups stay in flight. `pins`: the accumulators whose
    registers the backend ties to the wait (reads after it stay after it): the ones the groups
    it retires wrote (wait_wgmma_late); empty: all of the role's."""

    pending: int
    pins: list[str] = field(default_factory=list)


@op("acc_store")
@dataclass
class AccStore(Op):
    """Epilogue: dest[r, c] = value with !acc standing for acc[r, c], for every element."""

    dest: BufferRef
    value: Expr


def accumulators_touched(o: Op) -> set[str]:
    """Accumulators an op reads or writes in registers (its own, not those of nested ops)."""
    if isinstance(o, AccZero):
        return {o.acc}
    values = [getattr(o, f.name) for f in o.operand_fields()]
    return {e.name for v in values if isinstance(v, (Bin, Neg, Cast, Call, AccRef))
            for e in walk_expr(v) if isinstance(e, AccRef)}


def short_a_operands(roles: list[Op]) -> dict[str, int]:
    """The smem buffers read as the A operand of a short accumulator (rows not a multiple of 64),
    with its rows (the most rows where several read it): plan_smem gives each stage of them whole
    64-row tiles, which only the stage stride counts; a copy into or out of one moves its box."""
    short: dict[str, int] = {}
    for role in roles:
        rows = {d.symbol: d.shape[0] for d in walk(role.body) if isinstance(d, AccDecl)}
        for o in walk(role.body):
            if isinstance(o, Wgmma) and isinstance(o.a, BufferRef) and rows.get(o.acc, 64) % 64:
                short[o.a.name] = max(short.get(o.a.name, 0), rows[o.acc])
    return short

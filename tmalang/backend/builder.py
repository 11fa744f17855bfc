"""The IR builder codegen emits through: llvmlite's, minus instructions that LLVM would delete
first thing.

Codegen is written plainly (a stage's address is `base + stage * size` with stage 0; a variable
or an accumulator register lives in a stack slot, loaded at each use and stored at each
assignment), and LLVM's first passes (InstCombine, SROA) clean that up. Building, printing and
parsing those instructions took about a third of codegen's time and a tenth of LLVM's, so this
builder leaves them out as it goes:

* integer arithmetic: an add, sub, mul, shl, lshr, or, xor of two constants is their result;
  `x + 0`, `x - 0`, `x * 1`, `x << 0`, `x >> 0`, `x | 0`, `x ^ 0` are x.
* stack slots (allocas): within a block, a load of a slot whose value the block already holds
  (stored, or loaded before) is that value, and a store that the block overwrites before any
  load is dropped: the block's last store to each slot is emitted when the builder leaves the
  block (moves elsewhere, or ends it with a terminator).

Requires: a slot is only loaded and stored through this builder. A slot that any other
instruction takes as an operand (its address escapes) is written out and never tracked again.
Guarantees: every value is what llvmlite's builder would compute (wrapping at the type's width;
shifts by the width or more are left to LLVM); after SROA the function is the one llvmlite's
builder gives, so the PTX is the same (checked byte for byte for every example and target).
"""

from __future__ import annotations

from llvmlite import ir


def _constant(v: ir.Value) -> int | None:
    """The unsigned value of an integer constant, else None."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.IntType) and isinstance(v.constant, int):
        return v.constant & ((1 << v.type.width) - 1)
    return None


def _within(shift):
    """A shift folds only by less than the width (LLVM makes a wider one poison)."""
    return lambda a, b, width: shift(a, b) if b < width else None


# operation -> (its result on two constants, or None to leave it; the constant that is an
# identity on the right; whether it is one on the left too)
_FOLDS = {
    "add": (lambda a, b, width: a + b, 0, True),
    "sub": (lambda a, b, width: a - b, 0, False),
    "mul": (lambda a, b, width: a * b, 1, True),
    "shl": (_within(lambda a, b: a << b), 0, False),
    "lshr": (_within(lambda a, b: a >> b), 0, False),
    "or_": (lambda a, b, width: a | b, 0, True),
    "xor": (lambda a, b, width: a ^ b, 0, True),
}


class KernelBuilder(ir.IRBuilder):
    """llvmlite's IRBuilder that folds integer arithmetic and keeps stack slots in the block (see
    the module's docstring)."""

    def __init__(self, block: ir.Block | None = None):
        self._slots_block: ir.Block | None = None   # the block _known describes
        self._known: dict[int, ir.Value] = {}       # slot -> its value at the end of that block
        self._pending: dict[int, tuple] = {}        # slot -> (slot, value) stored, not yet emitted
        self._escaped: set[int] = set()             # slots not tracked
        super().__init__(block)

    # ---- stack slots
    def load(self, ptr, name="", align=None, typ=None):
        if not self._tracks(ptr, align):
            self._forget(ptr)
            return super().load(ptr, name, align, typ)
        known = self._known_here()
        value = known.get(id(ptr))
        if value is not None and (typ is None or typ == value.type):
            return value
        value = known[id(ptr)] = super().load(ptr, name, align, typ)
        return value

    def store(self, value, ptr, align=None):
        if not self._tracks(ptr, align) or isinstance(value, ir.AllocaInstr):   # (a stored slot escapes)
            self._forget(ptr)
            return super().store(value, ptr, align)
        self._known_here()[id(ptr)] = value
        self._pending.pop(id(ptr), None)   # the dropped store: overwritten before any load
        self._pending[id(ptr)] = (ptr, value)
        return None

    def _tracks(self, ptr, align) -> bool:
        """Whether a load or store of `ptr` here goes through the block's slot values: a slot not
        escaped, at the end of the block (where the block's values are the current ones)."""
        return (isinstance(ptr, ir.AllocaInstr) and align is None and id(ptr) not in self._escaped
                and self._anchor == len(self.block.instructions))

    def _known_here(self) -> dict[int, ir.Value]:
        if self._slots_block is not self.block:
            self._slots_block, self._known = self.block, {}
        return self._known

    def _forget(self, ptr) -> None:
        """Write out the pending stores, and know nothing of `ptr` (an access not tracked)."""
        self._flush()
        if isinstance(ptr, ir.AllocaInstr):
            self._known.pop(id(ptr), None)

    def _flush(self) -> None:
        """Emit the block's pending stores where the builder is (the end of that block)."""
        if self._pending:
            pending, self._pending = self._pending, {}
            for ptr, value in pending.values():
                super().store(value, ptr)

    def _insert(self, instr):
        """Any use of a slot other than as the address of a tracked load or store: the slot
        escapes (its pending stores are written before the instruction)."""
        operands = instr.operands
        if isinstance(instr, ir.LoadInstr):
            operands = ()
        elif isinstance(instr, ir.StoreInstr):
            operands = operands[:1]
        for op in operands:
            if isinstance(op, ir.AllocaInstr):
                self._escaped.add(id(op))
                self._forget(op)
        super()._insert(instr)

    def _set_terminator(self, term):
        self._flush()
        return super()._set_terminator(term)

    def position_before(self, instr):
        self._flush()
        super().position_before(instr)

    def position_after(self, instr):
        self._flush()
        super().position_after(instr)

    def position_at_start(self, block):
        self._flush()
        super().position_at_start(block)

    def position_at_end(self, block):
        self._flush()
        super().position_at_end(block)


def _folding(name: str, fold, identity: int, commutes: bool):
    emit = getattr(ir.IRBuilder, name)

    def method(self, lhs, rhs, name="", flags=()):
        if lhs.type != rhs.type:   # llvmlite's error
            return emit(self, lhs, rhs, name, flags)
        a, b = _constant(lhs), _constant(rhs)
        if a is not None and b is not None:
            width = lhs.type.width
            folded = fold(a, b, width)
            if folded is not None:
                return ir.Constant(lhs.type, folded & ((1 << width) - 1))
        if b == identity:
            return lhs
        if commutes and a == identity:
            return rhs
        return emit(self, lhs, rhs, name, flags)

    method.__name__ = name
    method.__doc__ = f"llvmlite's {name}, folded on two constants or an identity ({identity})."
    return method


for _name, (_fold, _identity, _commutes) in _FOLDS.items():
    setattr(KernelBuilder, _name, _folding(_name, _fold, _identity, _commutes))

"""Random programs of two or three roles handing tiles through TMA pipelines, for the wait-cycle
check's property test (tests/sema/test_wait_cycles.py).

Each pipeline has a random producer and consumer role (sometimes one role on both sides, §11), a
random depth, and its blocks either straight in the tile loop (once or twice per tile) or in a
`steps` loop of a literal count or over K. Each role runs its blocks in a random order; a block
sometimes moves into the consume block before it (a nested block holds the outer slot). Every
consume block adds its slot, a tile of x, into an output of its own with `reduce add`, so output
o_i ends as x times the number of times its block runs per tile: the NumPy reference.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Pipe:
    name: str
    stages: int
    producer: str
    consumer: str
    loop: int | str | None          # the steps loop around its blocks: a literal count, "K", or none
    count: int = 1                  # blocks per side per tile (outside a loop)

    @property
    def own(self) -> bool:
        return self.producer == self.consumer


@dataclass
class Block:
    side: str                       # "produce" or "consume"
    pipe: Pipe
    nested: list = field(default_factory=list)


@dataclass
class Program:
    text: str
    outputs: list[tuple[str, int | str | None]]   # (output, the loop around its consume block)
    deepest: int                                   # the largest ring depth


def random_program(rng: random.Random) -> Program:
    roles = [f"r{i}" for i in range(rng.choice([2, 2, 3]))]
    pipes = [_random_pipe(f"p{i}", roles, rng) for i in range(rng.choice([2, 3]))]
    outputs: list = []
    role_texts = [_role_text(name, warp, _role_units(name, pipes, rng), outputs) for warp, name in enumerate(roles)]
    params = ", ".join(["x: f32[M, N]", "w: f32[K, 16]"] + [f"{o}: f32[M, N]" for o, _ in outputs])
    lines = [f"kernel fuzz({params}) {{", "    grid persistent", "    box X = x[64, 64]",
             *(f"    box {o.upper()} = {o}[64, 64]" for o, _ in outputs),
             *(f"    pipeline {p.name}[{p.stages}] {{ t: X }}" for p in pipes), *role_texts, "}", ""]
    return Program("\n".join(lines), outputs, max(p.stages for p in pipes))


def _random_pipe(name: str, roles: list[str], rng: random.Random) -> Pipe:
    producer, consumer = rng.sample(roles, 2)
    if rng.random() < 0.2:
        consumer = producer           # the role loads ahead of itself
    loop = rng.choice([None, None, 2, 3, "K"])
    count = rng.choice([1, 1, 2]) if loop is None and producer != consumer else 1
    return Pipe(name, rng.choice([1, 1, 2, 3]), producer, consumer, loop, count)


def _role_units(role: str, pipes: list[Pipe], rng: random.Random) -> list:
    """The role's tile-loop body: Blocks, and ("loop", count, [Blocks]) for each loop kind."""
    items = []
    for p in pipes:
        if p.own and p.producer == role:
            items.append([Block("produce", p), Block("consume", p)])   # paired, produce first (E103)
        else:
            items += [[Block(side, p)] for side, who in (("produce", p.producer), ("consume", p.consumer))
                      if who == role for _ in range(p.count)]
    rng.shuffle(items)
    body, loops = [], {}
    for blocks in items:
        loop = blocks[0].pipe.loop
        if loop is None:
            body += blocks
        elif loop in loops:
            loops[loop][2].extend(blocks)
        else:
            loops[loop] = ("loop", loop, list(blocks))
            body.append(loops[loop])
    for units in [body, *(u[2] for u in body if isinstance(u, tuple))]:
        _nest(units, rng)
    return body


def _nest(units: list, rng: random.Random) -> None:
    """Sometimes move a block into the consume block just before it (another pipeline's)."""
    i = 0
    while i + 1 < len(units):
        a, b = units[i], units[i + 1]
        if (isinstance(a, Block) and isinstance(b, Block) and a.side == "consume" and b.pipe is not a.pipe
                and not a.pipe.own and not b.pipe.own and rng.random() < 0.3):
            a.nested.append(b)
            del units[i + 1]
        i += 1


def _role_text(name: str, warp: int, units: list, outputs: list) -> str:
    lines = [f"    role {name}: warp {warp} {{", "        for tile (m, n) in tiles(x, X) {"]
    for unit in units:
        lines += _unit_text(unit, 3, outputs, None)
    return "\n".join(lines + ["        }", "    }"])


def _unit_text(unit, depth: int, outputs: list, loop) -> list[str]:
    pad = "    " * depth
    if isinstance(unit, tuple):
        extent = "steps(K, 64)" if unit[1] == "K" else f"steps({unit[1]}, 1)"
        inner = [line for u in unit[2] for line in _unit_text(u, depth + 1, outputs, unit[1])]
        return [f"{pad}for k in {extent} {{", *inner, f"{pad}}}"]
    slot = f"s{depth}"
    if unit.side == "produce":
        return [f"{pad}produce {unit.pipe.name} as {slot} {{ load X[m, n] -> {slot}.t }}"]
    out = f"o{len(outputs)}"
    outputs.append((out, loop))
    inner = [line for u in unit.nested for line in _unit_text(u, depth + 1, outputs, loop)]
    return [f"{pad}consume {unit.pipe.name} as {slot} {{", *inner,
            f"{pad}    reduce add {out.upper()}[m, n] <- {slot}.t", f"{pad}}}"]

"""Fuzz the compiler with mutants of the examples: a diagnostic or working code, never a crash.

    python bench/fuzz.py [--count 5000] [--seed 0] [--jobs 2] [--timeout 120] [--out fuzz-out] [--json FILE]

Each mutant is an example with one to three edits (`mutate`): token edits (delete, duplicate,
swap, replace a number or a name), integer edits in context (stages, box sizes, dims, chunk
sizes, warp ranges, cluster sizes, register budgets), swizzle edits, statement edits
(remove or duplicate a line) and block edits (move a whole statement or block before another, in
its role or another role: a reordering across roles). Mutant i of seed S is the same on every machine, so a finding is
replayed with `--only i --seed S`.

Every mutant runs in a worker process with a time limit (a run past it is a hang) and ends in
one outcome (`check`):

    diagnostic        the compiler refused it with a located diagnostic      (fine)
    ptxas_ok          accepted, ptxas assembled it, the interpreter did not run (fine)
    interp_clean      accepted, assembled, and clean for every schedule of   (fine)
                      its launch (verified), or, where its warps' paths depend
                      on the schedule, clean under random schedules
    interp_refused    accepted; the interpreter refused the launch (E2xx),   (fine)
                      or its data (E488, E497), or found Tensor Memory the
                      program never wrote (E422: the program's, language.md)
    explicit_protocol a protocol error in a hand-written protocol           (fine: the user's)
    traceback         a Python exception escaped, or an internal error E999  (bug)
    hang              the worker ran past the time limit, twice (the second     (bug)
                      time alone, with four times the limit)
    ptxas_rejected    ptxas refused the PTX the compiler emitted (E300)      (bug)
    protocol_error    a protocol error on an accepted high-level program     (bug)

An accepted program's launch is checked by `tmalang.verify` (method "order": one interpreted
run and its happens-before order, which covers every schedule), with one verdict (`examine`):

    verified          no schedule breaks the protocol
    not_covered       the warps' paths depend on the schedule (dynamic tile claims, cluster launch
                      control): checked on one schedule, then under random schedules as before
    violation         a protocol error (the recorded run's, or a schedule's: E425 among them)
    refused           the recorded run refused the launch (E2xx, undefined launch data)

A high-level program has no hand-written barriers (`mbarrier`, `arrive`, `expect_tx`, `wait`,
`fence`). Examples that order their own staging tiles with `sync`, `commit_group` and
`wait_group` count as high level while those lines, and the writes to and stores from the
staging tiles they order, are as the example wrote them. Failing
mutants are saved as OUT/<outcome>/<index>_<example>.tma with the error beside them.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/copy.py would shadow the standard library's `copy` module: drop this folder from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import collections
import math
import os
import multiprocessing
import multiprocessing.connection
import random
import re
import time
import traceback
import typing

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.tma"))
FAILURES = ("traceback", "hang", "ptxas_rejected", "protocol_error")
# the interpreter's protocol reports (docs/interpreter.md); its other E4xx codes are data the launch
# passed that the hardware leaves undefined (an im2col start outside its pixel box, E488; a gathered
# row index outside the tensor, E497), which no compiler can see; E425 is verify's: an event that
# takes effect in another phase under some schedule than in the recorded run
PROTOCOL_CODES = {f"E{n}" for n in range(401, 422)} | {"E425", "E533"}
VERDICTS = ("verified", "not_covered", "violation", "refused")
MAX_ELEMENTS = 1 << 21          # larger launches are not interpreted (memory and time)
# more tiles are drawn only where an assumption ties a tiled dim to others (conv2d's NPQ = N·H·W):
# the interpreter's race clocks grow with the stores in flight, and a few thousand tiles fill GBs
MAX_TILES = 8


def example_arch(name: str) -> str:
    return "sm_100a" if "sm100" in name else "sm_90a"


# ---------------------------------------------------------------- mutations

_TOKEN = re.compile(
    r"(?P<comment>//[^\n]*)"
    r"|(?P<number>[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?B?)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<punct>->|<-|\.\.|[{}()\[\],:=.+\-*/%&])"
)
INTS = [0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 48, 63, 64, 96, 100, 127, 128, 192, 255, 256, 257,
        512, 1024, 65536, 2**31 - 1, 2**31, 2**32, 10**12]
PLAUSIBLE = [1, 2, 3, 4, 8, 16, 32, 64, 128, 256]     # stages, boxes, warps, clusters, chunks
SWIZZLES = ["32B", "64B", "128B", "256B", "16B"]
EXPLICIT = re.compile(r"^\s*(mbarrier|arrive|expect_tx|wait|fence)\b|\{\s*(arrive|expect_tx|wait|fence)\b",
                      re.M)
ORDERING = re.compile(r"\b(sync|commit_group|wait_group[^}\n]*)")


def tokens(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, kind, text) of every non-comment token."""
    return [(m.start(), m.end(), m.lastgroup, m.group()) for m in _TOKEN.finditer(text) if m.lastgroup != "comment"]


def splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _token_edit(text: str, rng: random.Random) -> str:
    toks = tokens(text)
    kind = rng.choice(["delete", "duplicate", "swap", "name", "name"])
    s, e, _, t = rng.choice(toks)
    if kind == "delete":
        return splice(text, s, e, "")
    if kind == "duplicate":
        return splice(text, e, e, " " + t)
    if kind == "swap":
        (si, ei, _, ti), (sj, ej, _, tj) = sorted(rng.sample(toks, 2))
        return text[:si] + tj + text[ei:sj] + ti + text[ej:]
    names = [x for x in toks if x[2] == "name"]
    s, e, _, _ = rng.choice(names)
    return splice(text, s, e, rng.choice(sorted({x[3] for x in names})))


def _int_edit(text: str, rng: random.Random) -> str:
    """Replace an integer (stages, box and warp numbers, dims, chunks, cluster, regs)."""
    ints = [m for m in re.finditer(r"(?<![\w.])[0-9]+(?![\w.])", _blank_comments(text))]
    if not ints:
        return text
    m = rng.choice(ints)
    old = int(m.group())
    near = [old * 2, max(old // 2, 0), old + 1, max(old - 1, 0), old * 4, max(old // 4, 1)]
    new = rng.choice(INTS) if rng.random() < 0.3 else rng.choice(near + PLAUSIBLE)
    return splice(text, m.start(), m.end(), str(new))


def _swizzle_edit(text: str, rng: random.Random) -> str:
    boxes = list(re.finditer(r"^(\s*box \w+\s*=\s*\w+\[[^\]]*\])([^\n/]*)", text, re.M))
    if not boxes:
        return text
    m = rng.choice(boxes)
    option = rng.choice(["", f" swizzle {rng.choice(SWIZZLES)}", " oob nan", " strides [1, 2]", " l2 128B"])
    return splice(text, m.start(2), m.end(2), option)


def _line_edit(text: str, rng: random.Random) -> str:
    """Remove or duplicate one statement line (lines that open or close a block are kept)."""
    lines = text.split("\n")
    body = [i for i, line in enumerate(lines)
            if line.strip() and not line.strip().startswith("//") and line.count("{") == line.count("}")
            and not line.startswith("kernel")]
    if not body:
        return text
    i = rng.choice(body)
    if rng.random() < 0.5:
        del lines[i]
    else:
        lines.insert(rng.choice(body), lines[i])
    return "\n".join(lines)


def _statements(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last + 1) line ranges of the statements inside roles: one balanced line, or a line
    that opens a block (a produce/consume/loop/turn/elect block) through the line that closes it."""
    out, depth, stack = [], 0, []
    for i, line in enumerate(lines):
        code = re.sub(r"//.*", "", line)
        opens, closes = code.count("{"), code.count("}")
        if depth >= 2 and code.strip() and opens == closes and not code.strip().startswith(("role", "kernel")):
            out.append((i, i + 1))
        if opens > closes and depth >= 2:
            stack.append(i)
        depth += opens - closes
        if closes > opens and stack and depth >= 2:
            out.append((stack.pop(), i + 1))
    return out


def _block_edit(text: str, rng: random.Random) -> str:
    """Move one statement (a whole block with everything in it) before another statement, in the
    same role or another one, or swap it with the next: the reorderings whose protocol the
    compiler derives and checks across roles (a wait cycle, a store moved past a reduce)."""
    lines = text.split("\n")
    stmts = _statements(lines)
    if len(stmts) < 2:
        return text
    first, last = rng.choice(stmts)
    moved = lines[first:last]
    rest = lines[:first] + lines[last:]
    targets = [a - (last - first if a >= last else 0) for a, b in stmts if a >= last or b <= first]
    if not targets:
        return text
    at = rng.choice(targets)
    return "\n".join(rest[:at] + moved + rest[at:])


def _blank_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", lambda m: " " * len(m.group()), text)


EDITS = [_token_edit, _int_edit, _int_edit, _int_edit, _int_edit, _swizzle_edit, _line_edit, _line_edit, _block_edit,
         _block_edit]


def mutate(text: str, rng: random.Random, edits: int | None = None) -> str:
    for _ in range(edits or rng.choice([1, 1, 1, 2, 2, 3])):
        text = rng.choice(EDITS)(text, rng)
    return text


def mutant(seed: int, index: int) -> tuple[str, str]:
    """(example name, mutated text) of mutant `index` of `seed`."""
    rng = random.Random(f"{seed}:{index}")
    path = EXAMPLES[index % len(EXAMPLES)]
    return path.name, mutate(path.read_text(), rng)


# ---------------------------------------------------------------- one mutant

def is_explicit(text: str) -> bool:
    return EXPLICIT.search(_blank_comments(text)) is not None


def ordering_edited(text: str, original: str) -> bool:
    """Whether the hand-written ordering differs from the example's, in content or in order: its
    `sync`, `commit_group` and `wait_group` lines, or, where it has them, the writes to the `smem` staging tiles and the
    stores from them, which those lines order (rewriting a staging tile with no wait for its
    last store is the user's race)."""
    def lines(t):
        code = _blank_comments(t)
        if not ORDERING.search(code):
            return []
        staging = "|".join(re.findall(r"^\s*smem\s+(\w+)\s*:", code, re.M)) or "(?!)"
        tile_write = re.compile(rf"^\s*({staging})\s*=|<-\s*({staging})\b")
        # in program order: moving a `sync` past a staging write reorders the user's protocol too
        return [line.strip() for line in code.split("\n") if ORDERING.search(line) or tile_write.search(line)]
    return lines(text) != lines(original)


class Examined(typing.NamedTuple):
    """One mutant's outcome, its detail, and verify's verdict on its launch (None: not run)."""

    outcome: str
    detail: str
    verdict: str | None = None


def check(text: str, arch: str, original: str | None = None, seed: int = 0, interp: bool = True,
          assemble: bool = True) -> tuple[str, str]:
    """Compile, assemble and verify one program; (outcome, detail) as listed in the docstring."""
    return examine(text, arch, original, seed, interp, assemble)[:2]


def examine(text: str, arch: str, original: str | None = None, seed: int = 0, interp: bool = True,
            assemble: bool = True) -> Examined:
    """`check`, with verify's verdict on the launch beside the outcome."""
    from tmalang.diagnostics import TmalangError

    try:
        return Examined(*_check(text, arch, original, seed, interp, assemble))
    except TmalangError as exc:
        return Examined("traceback", f"unexpected diagnostic escaped a stage:\n{exc.render()}")
    except Exception:
        return Examined("traceback", traceback.format_exc())


def _check(text, arch, original, seed, interp, assemble):
    from tmalang.api import Kernel
    from tmalang.backend import ptxas
    from tmalang.compiler import Options, compile_source
    from tmalang.diagnostics import TmalangError

    try:
        c = compile_source(text, "fuzz.tma", Options(arch=arch))
    except TmalangError as exc:
        first = exc.render().splitlines()[0]
        if exc.code == "E999" or not first.startswith(("fuzz.tma:", "error[")):
            return "traceback", exc.render()
        return "diagnostic", exc.render()
    if assemble:
        try:
            ptxas.assemble(c.ptx, arch)
        except TmalangError as exc:
            return ("ptxas_rejected" if exc.code == "E300" else "traceback"), exc.render()
    if not interp:
        return "ptxas_ok", ""
    return _interpret(Kernel(c, text), text, original, seed)


def _interpret(kernel, text, original, seed):
    """Verify the launch; where verify covers one schedule only, random schedules as well."""
    import numpy as np

    from tmalang.cli.run import _random_inputs
    from tmalang.verify.launches import claims_tiles

    from tmalang.diagnostics import TmalangError

    rng = random.Random(seed)
    dims = _small_dims(kernel.manifest, rng)
    if dims is None:
        return "ptxas_ok", "launch too large to interpret"
    inputs = _assumed_inputs(kernel.manifest, dims, np.random.default_rng(seed), _random_inputs)
    # verify's recorded run leaves the inputs as they were, so the random schedules see the same launch
    try:
        verdict = kernel.verify(*inputs, dims=dims)
    except TmalangError as exc:   # the launch refused (E219: no inputs meet assumptions that contradict)
        return (*_judge(exc, text, original, dims), "refused")
    if verdict.error is not None:
        return (*_judge(verdict.error, text, original, dims), _verdict_of(verdict.error))
    if not verdict.verified and claims_tiles(kernel._c.ir):   # verified on one CTA, sampled on the default grid
        one = kernel.verify(*inputs, dims=dims, ctas=1)
        if one.error is not None:
            return (*_judge(one.error, text, original, dims), _verdict_of(one.error))
        if one.verified:
            outcome, detail = _random_schedules(kernel, inputs, dims, rng.randrange(1 << 30), text, original)
            return outcome, f"{detail}; on one CTA {one.summary()}", "verified" if outcome == "interp_clean" else ""
    if not verdict.verified:
        return (*_random_schedules(kernel, inputs, dims, rng.randrange(1 << 30), text, original), "not_covered")
    return "interp_clean", f"dims {dims}: {verdict.summary()}", "verified"


def _random_schedules(kernel, inputs, dims, seed, text, original) -> tuple[str, str]:
    """The invariant's check before verify: two random schedules of the launch."""
    from tmalang.diagnostics import TmalangError

    try:
        kernel.interpret(*inputs, dims=dims, seed=seed, explore=2)
    except TmalangError as exc:
        return _judge(exc, text, original, dims)
    return "interp_clean", f"dims {dims}: random schedules (seed {seed}, 2 schedules)"


def _verdict_of(error) -> str:
    return "violation" if error.code in PROTOCOL_CODES else "refused"


def _judge(error, text, original, dims) -> tuple[str, str]:
    """Whose fault a launch's error is: the launch's (E2xx, data the hardware leaves undefined),
    the user's (a hand-written protocol), or the compiler's (a high-level program)."""
    if error.code not in PROTOCOL_CODES:
        return "interp_refused", error.render()
    if is_explicit(text) or (original is not None and ordering_edited(text, original)):
        return "explicit_protocol", error.render()
    return "protocol_error", f"dims {dims}\n{error.render()}"


def _largest_tensor(manifest, dims: dict[str, int]) -> tuple[int, tuple]:
    """(elements, shape) of the kernel's largest tensor at these dims."""
    from tmalang.contract.manifest import TensorArg

    sizes = [(math.prod(dims[d] if isinstance(d, str) else d for d in a.shape), tuple(a.shape))
             for a in manifest.args if isinstance(a, TensorArg)]
    return max(sizes, key=lambda s: s[0], default=(0, ()))


def _settled_names(manifest) -> set[str]:
    """The dims an assumption moves (a name alone on one side of `==`, D of `D % k == 0`, E of
    `D % E == 0`)."""
    names = set()
    for a in manifest.assumptions:
        if a.compare == "==":
            for side in (a.lhs, a.rhs):
                if isinstance(side, str):
                    names.add(side)
                elif _multiple_of(side):
                    names.add(side[2] if isinstance(side[2], str) else side[1])
    return names


def _multiple_of(tree) -> bool:
    return isinstance(tree, tuple) and tree[0] == "%" and isinstance(tree[1], str) and isinstance(tree[2], (int, str))


def _settle_all(manifest, dims: dict[str, int]) -> None:
    """Move dims so that the kernel's assumptions (§2b) hold where a simple move does: a dim alone
    on one side of `==` takes the other side's value, a dim D in `D % k == 0` rounds up to a
    multiple of k, a dim E in `D % E == 0` becomes gcd(D, E). What still breaks one is the launch's E219 (interp_refused), which says
    nothing of the compiler."""
    from tmalang.contract import assumptions

    for _ in range(3):
        for a in manifest.assumptions:
            _settle(a, dims, assumptions)


def _assumed_inputs(manifest, dims: dict[str, int], rng, random_inputs) -> list:
    """Random inputs whose scalars satisfy the kernel's assumptions, drawn again up to 32 times."""
    from tmalang.contract import assumptions
    from tmalang.contract.manifest import TensorArg

    scalars = [x for x in manifest.args if not isinstance(x, TensorArg)]
    for _ in range(32):
        inputs = random_inputs(manifest, dims, rng)
        values = {**dims, **{x.name: v for x, v in zip(manifest.args, inputs) if x in scalars}}
        try:
            if all(assumptions.broken(a, {n: int(values[n]) for n in assumptions.names(a)}) is None
                   for a in manifest.assumptions):
                return inputs
        except (KeyError, TypeError, ValueError):
            return inputs
    return inputs


def _settle(a, dims: dict[str, int], assumptions) -> None:
    """Make one assumption hold by moving a dim, where it has the simple forms _assumed_inputs names."""
    if a.compare != "==":
        return
    for lhs, rhs in ((a.lhs, a.rhs), (a.rhs, a.lhs)):
        if isinstance(lhs, str) and lhs in dims and all(n in dims for n in _tree_names(rhs)):
            value = assumptions.evaluate(rhs, dims, [])
            if value >= 1:
                dims[lhs] = value
            return
        if isinstance(lhs, tuple) and lhs[0] == "%" and isinstance(lhs[1], str) and lhs[1] in dims \
                and isinstance(lhs[2], int) and lhs[2] > 0 and rhs == 0:
            dims[lhs[1]] = -(-dims[lhs[1]] // lhs[2]) * lhs[2]
            return
        if isinstance(lhs, tuple) and lhs[0] == "%" and isinstance(lhs[1], str) and isinstance(lhs[2], str) \
                and lhs[1] in dims and lhs[2] in dims and rhs == 0:   # D % E == 0: E becomes a divisor of D
            dims[lhs[2]] = math.gcd(dims[lhs[1]], dims[lhs[2]])
            return


def _tree_names(tree) -> list[str]:
    if isinstance(tree, str):
        return [tree]
    if isinstance(tree, tuple):
        return [n for operand in tree[1:] for n in _tree_names(operand)]
    return []


def _whole_bulk_chunks(manifest, dims: dict[str, int]) -> None:
    """Round each bulk box's symbolic innermost dim up to whole chunks (the launch refuses a
    partial chunk, E206, which says nothing about the compiler)."""
    from tmalang.contract.manifest import BulkParam, TensorArg

    shapes = {a.name: a.shape for a in manifest.args if isinstance(a, TensorArg)}
    chunks: dict[str, int] = {}   # symbol -> lcm of the chunks it must hold whole
    for p in manifest.ptx_params:
        d = shapes[p.tensor][-1] if isinstance(p, BulkParam) else None
        if isinstance(d, str):
            chunks[d] = math.lcm(chunks.get(d, 1), p.chunk)
    for d, unit in chunks.items():
        dims[d] = -(-dims[d] // unit) * unit


def _fit_images(manifest, dims: dict[str, int]) -> None:
    """A tensor of rank 3 or more (an image for im2col: N, spatial dims, C) multiplies several
    random dims and can pass MAX_ELEMENTS where a matrix does not: halve its largest symbolic dim
    until it fits. A bulk box's innermost symbol keeps its whole chunks."""
    from tmalang.contract.manifest import BulkParam, TensorArg

    shapes = {a.name: a.shape for a in manifest.args if isinstance(a, TensorArg)}
    kept = {shapes[p.tensor][-1] for p in manifest.ptx_params if isinstance(p, BulkParam)}
    for shape in (s for s in shapes.values() if len(s) >= 3):
        free = [d for d in shape if isinstance(d, str) and d not in kept]
        while free and math.prod(dims[d] if isinstance(d, str) else d for d in shape) > MAX_ELEMENTS:
            largest = max(free, key=dims.get)
            if dims[largest] == 1:
                break
            dims[largest] = max(1, dims[largest] // 2)


def _small_dims(manifest, rng: random.Random) -> dict[str, int] | None:
    """Small random dims: at most about three tiles along each tiled dim; None if too large."""
    from tmalang.contract.manifest import TensorArg

    boxes = {d: box for d, box in manifest.grid.tile_dims if isinstance(d, str)}
    dims = {}
    for arg in manifest.args:
        if isinstance(arg, TensorArg):
            for d in arg.shape:
                if isinstance(d, str) and d not in dims:
                    box = boxes.get(d, 64)
                    dims[d] = rng.choice([1, box - 1, box, box + 3, 2 * box + 5, rng.randint(1, 200)])
                    dims[d] = max(1, dims[d])
    _whole_bulk_chunks(manifest, dims)
    settled = _settled_names(manifest)
    for _ in range(24):     # an assumption can tie a dim to a product of others: shrink them until it fits
        _settle_all(manifest, dims)
        _fit_images(manifest, dims)
        _settle_all(manifest, dims)
        largest = _largest_tensor(manifest, dims)
        many_tiles = bool(settled) and _tiles(manifest, dims) > MAX_TILES
        if largest[0] <= MAX_ELEMENTS and not many_tiles:
            break
        shape = dims if many_tiles else largest[1]    # a dim an assumption ties the tiles to: any free one
        free = [d for d in shape if isinstance(d, str) and d not in settled and dims[d] > 1]
        if not free:
            return None
        shrink = max(free, key=dims.get)
        dims[shrink] = max(1, dims[shrink] // 2)
    _settle_all(manifest, dims)
    if _largest_tensor(manifest, dims)[0] > MAX_ELEMENTS:
        return None
    # a persistent grid walks every tile too: a literal dim edited to 1024 made 3328 tiles, and the
    # race clocks of one run passed the worker's 4 GiB (seed 28, mutant 723)
    if _tiles(manifest, dims) > 64:
        return None
    return dims


def _tiles(manifest, dims: dict[str, int]) -> int:
    tiles = 1
    for d, box in manifest.grid.tile_dims:
        tiles *= -(-(dims[d] if isinstance(d, str) else d) // box)
    return tiles


# ---------------------------------------------------------------- the pool

def _worker(conn, limit_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    originals = {p.name: p.read_text() for p in EXAMPLES}
    while True:
        task = conn.recv()
        if task is None:
            return
        index, name, text, seed, interp, assemble = task
        examined = examine(text, example_arch(name), originals[name], seed + index, interp, assemble)
        conn.send((index, examined))


class _Slot:
    def __init__(self, ctx, limit_bytes: int):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, limit_bytes), daemon=True)
        self.proc.start()
        self.task, self.since = None, 0.0

    def send(self, task) -> None:
        self.task, self.since = task, time.monotonic()
        self.conn.send(task)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()


def run(tasks: list[tuple], jobs: int, timeout: float, limit_bytes: int, progress) -> dict[int, Examined]:
    """Run `tasks` on `jobs` worker processes; a task past `timeout` seconds is a hang."""
    ctx = multiprocessing.get_context("fork")
    pending = collections.deque(tasks)
    slots = [_Slot(ctx, limit_bytes) for _ in range(jobs)]
    results = {}
    while pending or any(s.task for s in slots):
        for i, slot in enumerate(slots):
            if slot.task is None and pending:
                slot.send(pending.popleft())
        ready = multiprocessing.connection.wait([s.conn for s in slots if s.task], timeout=1.0)
        for i, slot in enumerate(slots):
            if slot.task is None:
                continue
            if slot.conn in ready:
                try:
                    index, examined = slot.conn.recv()
                except EOFError:  # the worker died (out of memory, a signal)
                    index, examined = slot.task[0], Examined("traceback", "worker process died")
                    slot.kill()
                    slots[i] = slot = _Slot(ctx, limit_bytes)
                if "MemoryError" in examined.detail:   # its heap, left fragmented, would starve the next mutant
                    slot.kill()
                    slots[i] = slot = _Slot(ctx, limit_bytes)
                results[index] = examined
                slot.task = None
                progress(len(results))
            elif time.monotonic() - slot.since > timeout:
                results[slot.task[0]] = Examined("hang", f"no result after {timeout:.0f} s")
                slot.kill()
                slots[i] = _Slot(ctx, limit_bytes)
                progress(len(results))
    for slot in slots:
        slot.conn.send(None)
        slot.proc.join(timeout=5)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=5000, help="mutants to run (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="mutant i of seed S is reproducible (default 0)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant before it is a hang (default 120)")
    p.add_argument("--memory", type=int, default=4096, help="MiB of address space per worker")
    p.add_argument("--out", type=Path, default=Path("fuzz-out"), help="folder for the failing mutants")
    p.add_argument("--only", type=int, action="append", default=[], help="run only mutant INDEX (repeatable)")
    p.add_argument("--no-interp", action="store_true", help="skip the interpreter")
    p.add_argument("--no-ptxas", action="store_true", help="skip ptxas")
    p.add_argument("--json", type=Path, help="also write the outcome counts, per example, to this JSON file")
    args = p.parse_args(argv)
    if args.count < 1 or args.jobs < 1 or args.timeout <= 0:
        p.error("--count, --jobs and --timeout must be positive")
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        # one BLAS thread per worker: a thread pool per worker reserves address space that the
        # worker's memory limit then denies to LLVM and NumPy (seen on a 16-core machine)
        os.environ.setdefault(name, "1")
    indices = args.only or range(args.count)
    tasks = [(i, *mutant(args.seed, i), args.seed, not args.no_interp, not args.no_ptxas) for i in indices]
    started = time.monotonic()

    def progress(done: int) -> None:
        if done % 250 == 0 or done == len(tasks):
            print(f"  {done}/{len(tasks)} mutants, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)

    results = run(tasks, args.jobs, args.timeout, args.memory << 20, progress)
    hangs = [t for t in tasks if results[t[0]].outcome == "hang"]
    if hangs:  # a slow mutant on a loaded machine is not a hang: again, alone, with more time
        print(f"  re-running {len(hangs)} hang(s) alone with {4 * args.timeout:.0f} s", file=sys.stderr)
        results.update(run(hangs, 1, 4 * args.timeout, args.memory << 20, lambda done: None))
    if args.json:
        write_summary(args.json, tasks, results, args, time.monotonic() - started)
    return report(tasks, results, args)


def write_summary(path: Path, tasks, results, args, seconds: float) -> None:
    """The run as JSON: seed, count, outcomes overall and per example, verify's verdicts overall
    and per example (`verify`, `verify_per_example`), the machine and the date."""
    import datetime
    import json
    import platform

    names = {t[0]: t[1] for t in tasks}
    per_example: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    verdicts_per_example: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for i, examined in results.items():
        per_example[names[i]][examined.outcome] += 1
        if examined.verdict is not None:
            verdicts_per_example[names[i]][examined.verdict] += 1
    verdicts = collections.Counter(e.verdict for e in results.values() if e.verdict is not None)
    summary = {
        "benchmark": "bench/fuzz.py: mutants of every example, compiled, assembled with ptxas and verified "
                     "(random schedules where verify covers one schedule only)",
        "date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "command": f"python bench/fuzz.py --count {args.count} --seed {args.seed} --jobs {args.jobs}",
        "seed": args.seed, "mutants": len(results), "seconds": round(seconds),
        "failures": sum(e.outcome in FAILURES for e in results.values()),
        "outcomes": dict(collections.Counter(e.outcome for e in results.values()).most_common()),
        "per_example": {name: dict(c) for name, c in sorted(per_example.items())},
        "verify": {v: verdicts[v] for v in VERDICTS},
        "verify_per_example": {name: dict(c) for name, c in sorted(verdicts_per_example.items())},
    }
    path.write_text(json.dumps(summary, indent=2) + "\n")


def report(tasks, results, args) -> int:
    counts = collections.Counter(e.outcome for e in results.values())
    verdicts = collections.Counter(e.verdict for e in results.values() if e.verdict is not None)
    by_index = {t[0]: t for t in tasks}
    print(f"fuzz: {len(results)} mutants of {len(EXAMPLES)} examples, seed {args.seed}")
    for outcome, n in counts.most_common():
        print(f"  {outcome:<18} {n:6d}{'   <-- failure' if outcome in FAILURES else ''}")
    if verdicts:
        print("verify: " + ", ".join(f"{verdicts[v]} {v}" for v in VERDICTS))
    failing = sorted(i for i, e in results.items() if e.outcome in FAILURES)
    for i in failing:
        outcome, detail, _ = results[i]
        name, text = by_index[i][1], by_index[i][2]
        folder = args.out / outcome
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"{i:05d}_{Path(name).stem}"
        (folder / f"{stem}.tma").write_text(text)
        (folder / f"{stem}.txt").write_text(f"example {name}, seed {args.seed}, index {i}\n{detail}\n")
        last = detail.strip().splitlines()[-1] if detail.strip() else ""
        print(f"  FAIL {outcome} #{i} ({name}): {last[:160]}")
    if failing:
        print(f"failing mutants saved under {args.out}/")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())

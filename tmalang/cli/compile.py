"""The compiling half of `tmalangc FILE ...`: what runs when the whole-compile cache has no answer
(cli.py reads the cache first, without loading any of this)."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..backend import launch_header
from ..compiler import Options, compile_ir, compile_source
from ..explain import explain
from .files import STDIO
from ..ir.printer import print_ir
from ..passes import PASS_NAMES, PassLog


@dataclass
class Produced:
    """What a compile wrote or would write: the output (None when --explain alone printed) and the
    manifest JSON (when --manifest asked for it)."""

    output: bytes | None
    manifest: bytes | None = None


def check_pass_names(parser, names: list[str]) -> None:
    """Usage error (exit 2) for an unknown --print-ir-after pass."""
    for name in names:
        if name != "all" and name not in PASS_NAMES:
            parser.error(f"--print-ir-after: unknown pass '{name}' (choose from {', '.join(PASS_NAMES)}, all)")


def compile_to_output(args, source: str) -> Produced:
    log = PassLog(print_after=set(args.print_ir_after))
    options = Options(arch=args.arch, kernel=args.kernel, log=log, constants=args.constants, binder="-D",
                      watchdog=args.watchdog)
    name = "<stdin>" if args.file == STDIO else args.file
    enter = compile_ir if args.file.endswith(".ir") else compile_source
    c = enter(source, name, options, until=_last_stage(args))
    for pass_name, text in log.snapshots:
        print(f"// ----- IR after {pass_name} -----\n{text}", file=sys.stderr, end="")
    if args.verify and c.manifest is not None:
        from ..verify import verify_base_launches   # the verifier loads NumPy: only when asked
        verify_base_launches(c.ir, c.manifest)
    if args.time_passes:
        _report_times(log)
    if args.stats:
        print(f"{c.ir.symbol}: {c.stats.summary()} dynamic_smem={c.manifest.smem_bytes}B", file=sys.stderr)
    manifest = None
    if args.manifest and c.manifest is not None:
        manifest = (json.dumps(c.manifest.to_json(), indent=2) + "\n").encode()
    if args.explain:
        print(explain(c.ir, c.target, c.manifest.grid), end="")
        if not args.output:
            return Produced(None, manifest)
    return Produced(_output(args, c), manifest)


def _last_stage(args) -> str:
    """The stage the command line needs: --emit's, the cubin for --stats and an embedded cubin,
    the final IR for a header and for --explain (the schedule exists only after the passes)."""
    if args.stats or args.embed_cubin:
        return "cubin"
    if args.emit == "header" or (args.explain and args.emit == "ast"):
        return "ir"
    return args.emit


def _report_times(log: PassLog) -> None:
    print("stage                 ms", file=sys.stderr)
    for name, seconds in log.timings:
        print(f"{name:<20} {seconds * 1e3:6.2f}", file=sys.stderr)
    print(f"{'total to ' + log.timings[-1][0]:<20} {sum(s for _, s in log.timings) * 1e3:6.2f}", file=sys.stderr)


def _output(args, c) -> bytes:
    if args.emit == "cubin":
        return c.cubin
    text = {"ast": lambda: dump_ast(c.ast), "ir": lambda: print_ir(c.ir), "ll": lambda: c.llvm_ir,
            "ptx": lambda: c.ptx, "header": lambda: launch_header.render(c.manifest, args.file, c.ir, cubin=c.cubin if args.embed_cubin else None)}[args.emit]()
    return text.encode()


def dump_ast(node, indent: int = 0) -> str:
    """An indented dump of the AST: node type, scalar fields inline, children below."""
    pad = "  " * indent
    if isinstance(node, list):
        return "".join(dump_ast(n, indent) for n in node)
    if not dataclasses.is_dataclass(node):
        return f"{pad}{node!r}\n"
    scalars, children = [], []
    for f in dataclasses.fields(node):
        if not f.repr or f.name == "span":
            continue
        value = getattr(node, f.name)
        nested = dataclasses.is_dataclass(value) or (isinstance(value, list) and value and dataclasses.is_dataclass(value[0]))
        (children if nested else scalars).append((f.name, value))
    head = f"{pad}{type(node).__name__} " + " ".join(f"{k}={v!r}" for k, v in scalars)
    out = head.rstrip() + f"  @{node.span.line}:{node.span.col}\n"
    for name, value in children:
        out += f"{pad}  .{name}\n" + dump_ast(value, indent + 2)
    return out

"""tmalangc — the command-line compiler, with nvcc/clang conventions.

    tmalangc kernel.tma -o kernel.ptx --arch sm_90a
    tmalangc kernel.tma --emit ir --print-ir-after=all --time-passes --explain --stats
    tmalangc gemm.tma -D BN=128 -D STAGES=3       (compile-time constants, docs/language.md §2a)
    tmalangc opt kernel.ir --passes=expand_pipelines,order_wgmma    (tmalang/opt.py)
    cat kernel.tma | tmalangc - -o -       (`-`: standard input; `-o -`: standard output)

Exit status: 0 success, 1 user error (a diagnostic on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from . import defines
from .api import VERSION
from .backend import launch_header, ptxas
from .compiler import ARCHS, Options, compile_source
from .diagnostics import TmalangError
from .explain import explain
from .files import STDIO, check_outputs, read_source, write_file
from .ir.printer import print_ir
from .opt import opt_main
from .passes import PASS_NAMES, PassLog
from .run_cli import run_main
from .target.arch import DEFAULT

EMITS = ("ast", "ir", "ll", "ptx", "cubin", "header")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tmalangc", description="Compile tmalang (.tma) kernels to PTX and cubin.",
        epilog="subcommands: 'tmalangc run FILE ...' runs a kernel on the GPU or the interpreter "
               "(tmalangc run --help); 'tmalangc opt FILE.ir --passes=...' runs passes on textual IR "
               "(tmalangc opt --help). Also: python -m tmalang ...")
    p.add_argument("--version", action=_Version, help="print the versions of tmalang, llvmlite (LLVM) and ptxas")
    p.add_argument("file", help="the .tma source file (-: standard input)")
    p.add_argument("-o", "--output", help="output file (default: stdout; FILE.cubin for --emit cubin; -: stdout)")
    p.add_argument("--arch", default=DEFAULT.name, choices=ARCHS)
    p.add_argument("--emit", default="ptx", choices=EMITS, help="what to produce (default: ptx; header: a C++ launch header over tmalang_runtime.h (tmalang.get_include()))")
    p.add_argument("--kernel", help="which kernel of the file (default: the first)")
    p.add_argument("--print-ir-after", metavar="PASS|all", action="append", default=[],
                   help=f"print the IR after a pass to stderr; passes: {', '.join(PASS_NAMES)}")
    p.add_argument("--time-passes", action="store_true", help="report the time of each stage on stderr")
    p.add_argument("--stats", action="store_true", help="assemble with ptxas and report registers, smem, spills")
    p.add_argument("--explain", action="store_true", help="print the barrier table, roles and smem map")
    p.add_argument("--manifest", metavar="FILE", help="also write the launch manifest (JSON)")
    defines.add_option(p)
    return p


class _Version(argparse.Action):
    """--version, computed when asked for (finding ptxas runs it)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def version_text() -> str:
    import llvmlite
    import llvmlite.binding as llvm

    major, minor, patch = llvm.llvm_version_info
    return (f"tmalangc {VERSION}\nllvmlite {llvmlite.__version__} (LLVM {major}.{minor}.{patch})\n"
            f"ptxas {ptxas.ptxas_version()} ({ptxas.find_ptxas() or 'not found: pip install tmalang[gpu]'})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:
        return run_main(argv[1:])
    if argv[:1] == ["opt"]:
        return opt_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in args.print_ir_after:
        if name != "all" and name not in PASS_NAMES:
            parser.error(f"--print-ir-after: unknown pass '{name}' (choose from {', '.join(PASS_NAMES)}, all)")
    args.constants = defines.parse(parser, args.defines)
    if args.file == STDIO and args.emit == "cubin" and not args.output:
        parser.error("--emit cubin from standard input needs -o (a file, or - for standard output)")
    try:
        check_outputs(_outputs(args))
        source = read_source(args.file)
        return _run(args, source)
    except TmalangError as exc:
        print(exc.render(), file=sys.stderr)
        return 1


def _outputs(args) -> list[str]:
    """Every file this run will write, so that a bad path fails before the work, not after."""
    paths = [args.manifest] if args.manifest else []
    if args.output:
        paths.append(args.output)
    elif args.emit == "cubin":
        paths.append(str(Path(args.file).with_suffix(".cubin")))
    return paths


def _run(args, source: str) -> int:
    log = PassLog(print_after=set(args.print_ir_after))
    options = Options(arch=args.arch, kernel=args.kernel, log=log, constants=args.constants, binder="-D")
    until = {"ast": "ast", "ir": "ir", "header": "ir", "ll": "ll"}.get(args.emit, "ptx")
    if args.stats:
        until = "ptx"  # --stats assembles, whatever is emitted
    elif args.explain and until == "ast":
        until = "ir"   # the schedule exists only after the passes
    c = compile_source(source, "<stdin>" if args.file == STDIO else args.file, options, until=until)
    for name, text in log.snapshots:
        print(f"// ----- IR after {name} -----\n{text}", file=sys.stderr, end="")
    if args.emit == "cubin" or args.stats:
        t0 = time.perf_counter()
        c.cubin, c.stats = ptxas.assemble(c.ptx, args.arch)
        log.timings.append(("ptxas", time.perf_counter() - t0))
    if args.time_passes:
        _report_times(log)
    if args.stats:
        print(f"{c.ir.symbol}: {c.stats.summary()} dynamic_smem={c.manifest.smem_bytes}B", file=sys.stderr)
    if args.manifest and c.manifest is not None:
        write_file(args.manifest, json.dumps(c.manifest.to_json(), indent=2) + "\n")
    if args.explain:
        print(explain(c.ir, c.target, c.manifest.grid), end="")
        if not args.output:
            return 0
    _write_output(args, c)
    return 0


def _report_times(log: PassLog) -> None:
    print("stage                 ms", file=sys.stderr)
    for name, seconds in log.timings:
        print(f"{name:<20} {seconds * 1e3:6.2f}", file=sys.stderr)
    print(f"{'total to ' + ('cubin' if log.timings[-1][0] == 'ptxas' else 'last stage'):<20} "
          f"{sum(s for _, s in log.timings) * 1e3:6.2f}", file=sys.stderr)


def _write_output(args, c) -> None:
    if args.emit == "cubin":
        write_file(args.output or Path(args.file).with_suffix(".cubin"), c.cubin)
        return
    text = {"ast": lambda: dump_ast(c.ast), "ir": lambda: print_ir(c.ir), "ll": lambda: c.llvm_ir,
            "ptx": lambda: c.ptx, "header": lambda: launch_header.render(c.manifest, args.file, c.ir)}[args.emit]()
    if args.output:
        write_file(args.output, text)
    else:
        sys.stdout.write(text)


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


if __name__ == "__main__":
    sys.exit(main())

"""tmalangc — the command-line compiler, with nvcc/clang conventions.

    tmalangc kernel.tma -o kernel.ptx --arch sm_90a
    tmalangc kernel.tma --emit ir --print-ir-after=all --time-passes --explain --stats
    tmalangc gemm.tma -D BN=128 -D STAGES=3       (compile-time constants, docs/language.md §2a)
    tmalangc opt kernel.ir --passes=expand_pipelines,order_wgmma    (tmalang/cli/opt.py)
    tmalangc cache info | tmalangc cache clear     (the whole-compile cache, compile_cache.py)
    cat kernel.tma | tmalangc - -o -       (`-`: standard input; `-o -`: standard output)

Exit status: 0 success, 1 user error (a diagnostic on stderr), 2 bad usage.

This module starts every command, so it imports only what a warm compile needs: the arguments,
the source, the cache. The compiler (compile_cli.py), the interpreter (run_cli.py) and the pass
driver (opt.py) are imported when a command needs them, which is what the lazy imports below
are for (tests/tools/test_layering.py lists them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..caches import whole_compile as compile_cache
from . import defines
from ..backend import ptxas
from ..caches.disk import DiskCache
from ..contract.watchdog import enabled_by_default as watchdog_enabled_by_default
from ..contract.verification import enabled_by_default as verify_by_default
from ..diagnostics import FORMATS, TmalangError
from .files import STDIO, check_outputs, read_source, write_file
from ..targets.arch import DEFAULT, TARGETS
from ..stages import FROM_IR, PRINTED
from ..version import VERSION

EMITS = (*PRINTED, "header")   # header: the C++ launch header, made from the cubin stage


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tmalangc", description="Compile tmalang (.tma) kernels to PTX and cubin.",
        epilog="subcommands: 'tmalangc run FILE ...' runs a kernel on the GPU or the interpreter "
               "(tmalangc run --help); 'tmalangc verify FILE ...' explores every schedule of one launch "
               "(tmalangc verify --help); 'tmalangc opt FILE.ir --passes=...' runs passes on textual IR "
               "(tmalangc opt --help); 'tmalangc cache info|clear' shows or empties the compile cache. "
               "Also: python -m tmalang ...")
    p.add_argument("--version", action=_Version, help="print the versions of tmalang, llvmlite (LLVM) and ptxas")
    p.add_argument("file", help="the .tma source file (-: standard input), or final IR text (FILE.ir, as "
                                "--emit ir prints it) for --emit ll|ptx|cubin")
    p.add_argument("-o", "--output", help="output file (default: stdout; FILE.cubin for --emit cubin; -: stdout)")
    p.add_argument("--arch", default=DEFAULT.name, choices=tuple(TARGETS))
    p.add_argument("--emit", default="ptx", choices=EMITS, help="what to produce (default: ptx; header: a C++ launch header over tmalang_runtime.h (tmalang.get_include()))")
    p.add_argument("--embed-cubin", action="store_true",
                   help="with --emit header: the header carries the cubin (KERNEL_cubin; KERNEL_load needs no file); runs ptxas")
    p.add_argument("--kernel", help="which kernel of the file (default: the first)")
    p.add_argument("--print-ir-after", metavar="PASS|all", action="append", default=[],
                   help="print the IR after a pass to stderr (a pass of tmalangc opt --help, or all)")
    p.add_argument("--time-passes", action="store_true", help="report the time of each stage on stderr")
    p.add_argument("--stats", action="store_true", help="assemble with ptxas and report registers, smem, spills")
    p.add_argument("--explain", action="store_true", help="print the barrier table, roles and smem map")
    p.add_argument("--watchdog", action=argparse.BooleanOptionalAction, default=None,
                   help="a timeout in every mbarrier wait loop: a hang on the GPU stops the kernel and reports "
                        "the barrier (E218) (default: off; TMALANG_WATCHDOG=1 makes it on)")
    p.add_argument("--verify", action=argparse.BooleanOptionalAction, default=None,
                   help="also prove the protocol for every schedule of a few small launches (tmalangc verify; "
                        "default: off unless TMALANG_VERIFY=1)")
    p.add_argument("--manifest", metavar="FILE", help="also write the launch manifest (JSON)")
    p.add_argument("--diagnostics-format", choices=FORMATS, default=None,
                   help="errors as rendered text (default) or one JSON object per line (also: TMALANG_DIAGNOSTICS=json)")
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
        from .run import run_main
        return run_main(argv[1:])
    if argv[:1] == ["verify"]:
        from .verify import verify_main
        return verify_main(argv[1:])
    if argv[:1] == ["opt"]:
        from .opt import opt_main
        return opt_main(argv[1:])
    if argv[:1] == ["cache"]:
        return cache_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    args.constants = defines.parse(parser, args.defines)
    if args.file.endswith(".ir"):
        _check_ir_entry(parser, args)
    if args.watchdog is None:
        args.watchdog = watchdog_enabled_by_default()
    if args.verify is None:
        args.verify = verify_by_default() and not args.file.endswith(".ir")
    if args.embed_cubin and args.emit != "header":
        parser.error("--embed-cubin goes with --emit header")
    if args.file == STDIO and args.emit == "cubin" and not args.output:
        parser.error("--emit cubin from standard input needs -o (a file, or - for standard output)")
    try:
        check_outputs(_outputs(args))
        source = read_source(args.file)
        return _compile(parser, args, source)
    except TmalangError as exc:
        print(exc.report(args.diagnostics_format), file=sys.stderr)
        return 1


def _check_ir_entry(parser, args) -> None:
    """From final IR text only the stages after `ir` run: the launch grid, which a header, a
    manifest, --explain and --verify need, comes from the tile loop, and the final IR has written
    that out as arithmetic."""
    if args.emit not in FROM_IR:
        parser.error(f"--emit {args.emit} from IR text: a .ir file enters at the final IR and makes "
                     f"{', '.join(FROM_IR)} (compile the .tma source for the rest)")
    for flag, wanted in (("--manifest", args.manifest), ("--explain", args.explain), ("--verify", args.verify),
                         ("-D", args.constants), ("--print-ir-after", args.print_ir_after)):
        if wanted:
            parser.error(f"{flag} needs the .tma source: a .ir file is the final IR, past the launch grid, "
                         "the constants and the passes")


def _outputs(args) -> list[str]:
    """Every file this run will write, so that a bad path fails before the work, not after."""
    paths = [args.manifest] if args.manifest else []
    if args.output:
        paths.append(args.output)
    elif args.emit == "cubin":
        paths.append(str(Path(args.file).with_suffix(".cubin")))
    return paths


def _compile(parser, args, source: str) -> int:
    """The cache's answer when it has one; else compile (and remember what came out)."""
    key = _cache_key(args, source)
    hit = compile_cache.lookup(key) if key else None
    if hit is not None:
        _write(args, hit[compile_cache.OUTPUT], hit.get(compile_cache.MANIFEST))
        return 0
    from .compile import check_pass_names, compile_to_output
    check_pass_names(parser, args.print_ir_after)
    produced = compile_to_output(args, source)
    _write(args, produced.output, produced.manifest)
    if key and produced.output is not None:
        compile_cache.store(key, produced.output, produced.manifest)
    return 0


def _cache_key(args, source: str) -> str | None:
    """The cache entry of this command line; None when it reports on the compile itself."""
    if args.print_ir_after or args.time_passes or args.stats or args.explain or args.verify:
        return None
    name = "<stdin>" if args.file == STDIO else args.file
    options = {"arch": args.arch, "kernel": args.kernel, "constants": args.constants, "emit": args.emit,
               "manifest": bool(args.manifest), "embed_cubin": args.embed_cubin, "watchdog": args.watchdog}
    if args.emit != "cubin" and not args.embed_cubin:
        return compile_cache.compile_key(source, name, options, None)
    ptxas.timeout()   # a bad TMALANG_PTXAS_TIMEOUT is E302 whether or not ptxas would run
    return compile_cache.compile_key(source, name, options, ptxas.find_ptxas())


def _write(args, output: bytes | None, manifest: bytes | None) -> None:
    if args.manifest and manifest is not None:
        write_file(args.manifest, manifest)
    if output is None:
        return
    if args.emit == "cubin":
        write_file(args.output or Path(args.file).with_suffix(".cubin"), output)
    elif args.output:
        write_file(args.output, output)
    else:
        sys.stdout.write(output.decode())


def cache_main(argv: list[str]) -> int:
    """`tmalangc cache info` (where, how full, the variables) and `tmalangc cache clear`."""
    p = argparse.ArgumentParser(prog="tmalangc cache", description="Show or empty tmalang's compile cache.")
    p.add_argument("action", choices=("info", "clear"))
    args = p.parse_args(argv)
    cache = DiskCache()
    if args.action == "clear":
        removed = cache.clear()
        print(f"removed {removed} entries from {cache.root}")
        return 0
    print(cache.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())

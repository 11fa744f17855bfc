"""`tmalangc opt`: IR text in, IR text out, like mlir-opt.

    tmalangc opt kernel.ir --passes=expand_pipelines,order_wgmma [--arch sm_90a] [-o out.ir]
                 [--print-ir-after=PASS|all]
    tmalangc opt --list-passes

The input is one kernel as `--emit ir` or `--print-ir-after` prints it. It stands where the first
named pass stands in the pipeline: every pass before that one is taken to have run, so the
verifier holds the input to their rules (E432). The named passes then run in the order given,
the IR verified after each, as in a compilation. With no passes the input is only verified.
`--arch` names the target the passes read (default sm_90a); a pass gated on a feature the
target lacks (order_wgmma without wgmma, plan_tmem without tcgen05, ...) is refused (E434), and
so is IR holding an instruction family the target lacks (Tensor Memory and tcgen05 ops without
tcgen05, wgmma ops without wgmma, gathered copies without gather4), at the first such op.
"""

from __future__ import annotations

import argparse
import sys

from ..diagnostics import Source, Span, TmalangError, error
from .files import check_outputs, read_source, write_file
from ..ir.printer import print_ir
from ..ir.entry import check_target, read_kernel
from ..ir.verifier import verify_input
from ..passes import PASS_NAMES, PASSES, PassLog, run_named, stages_before, summary
from ..targets.arch import DEFAULT, TARGETS, Target, target_named


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tmalangc opt", description="Run passes on IR text.")
    p.add_argument("file", nargs="?", help="the .ir file (IR text of one kernel)")
    p.add_argument("--passes", default="", help="comma-separated pass names, run in that order (--list-passes)")
    p.add_argument("--arch", default=DEFAULT.name, choices=list(TARGETS), help="the target the passes read")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--print-ir-after", metavar="PASS|all", action="append", default=[],
                   help="also print the IR after a pass (or after every pass) to stderr")
    p.add_argument("--list-passes", action="store_true", help="list the passes in pipeline order and exit")
    return p


def opt_main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_passes:
        sys.stdout.write("".join(f"{name:<24} {summary(name).partition(': ')[2]}\n" for name in PASS_NAMES))
        return 0
    if args.file is None:
        parser.error("the following arguments are required: file")
    for name in args.print_ir_after:
        if name != "all" and name not in PASS_NAMES:
            parser.error(f"--print-ir-after: unknown pass '{name}' (choose from {', '.join(PASS_NAMES)}, all)")
    try:
        target = target_named(args.arch)
        names = pass_names(args.passes, target)
        check_outputs([args.output] if args.output else [])
        log = PassLog(print_after=set(args.print_ir_after))
        text = optimize(read_source(args.file), args.file, names, target, log)
        for name, snapshot in log.snapshots:
            print(f"// ----- IR after {name} -----\n{snapshot}", file=sys.stderr, end="")
        if args.output:
            write_file(args.output, text)
        else:
            sys.stdout.write(text)
    except TmalangError as exc:
        print(exc.report(), file=sys.stderr)
        return 1
    return 0


def pass_names(spec: str, target: Target) -> list[str]:
    """The passes of `--passes=a,b`, pointing into the option: E430 for a name not in PIPELINE,
    E434 for a pass the target cannot need."""
    if not spec.strip():
        return []
    names, col = [], len("--passes=") + 1
    for name in spec.split(","):
        span = Span(Source(f"--passes={spec}", "<command line>"), 1, col, 1, col + max(1, len(name)))
        if name.strip() not in PASS_NAMES:
            raise error("E430", f"unknown pass '{name.strip()}'", span, "passes: " + ", ".join(PASS_NAMES))
        needs = PASSES[name.strip()].needs
        if not PASSES[name.strip()].applies_to(target):
            raise error("E434", f"pass '{name.strip()}' needs a target with {needs.removeprefix('has_')}, "
                        f"and {target.name} has none", span, "choose another --arch")
        names.append(name.strip())
        col += len(name) + 1
    return names


def optimize(text: str, path: str, names: list[str], target: Target = DEFAULT, log: PassLog | None = None) -> str:
    """Parse one kernel's IR (E090, E431), check it against the target (E434), verify it (E432),
    run the passes for `target` (E433), print the result."""
    kernel = read_kernel(text, path)
    check_target(kernel, target)
    done = stages_before(names[0], target) if names else ["lower"]
    verify_input(kernel, done, names[0] if names else None)
    log = log or PassLog()
    try:
        run_named(kernel, target, names, log, done=done)
    except TmalangError:
        raise
    except Exception as exc:   # hand-written IR may lack what a pass needs beyond the verifier's rules
        ran = len(log.timings)
        failed, previous = names[ran], names[ran - 1] if ran else done[-1]
        raise error("E433", f"pass '{failed}' cannot run on this IR: {type(exc).__name__}: {exc}", kernel.span,
                    f"the IR holds what the verifier requires after '{previous}', but not everything "
                    f"'{failed}' reads") from None
    return print_ir(kernel)



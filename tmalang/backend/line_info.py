"""Source lines for the PTX: LLVM debug metadata in its directives-only form.

The module gets a compile unit whose emission kind is `DebugDirectivesOnly`, the kernel a
DISubprogram, and each instruction a `!dbg` location taken from the span of the IR op it was
emitted for. NVPTX then prints `.file` and `.loc` directives and nothing else: no DWARF
sections and no `.target ..., debug` (which the other kinds add, FullDebug and LineTablesOnly
alike), so ptxas optimises as before and only records the line table (`.debug_line`,
`.nv_debug_line_sass`) that Nsight Compute's source view and compute-sanitizer read.

Debug locations do not take part in LLVM's or ptxas's code generation: the SASS is the same
byte for byte with and without them (checked for every example).
"""

from __future__ import annotations

import os
import re

from llvmlite import ir

from ..diagnostics import Span

DEBUG_INFO_VERSION = 3   # the metadata format LLVM reads; a module without the flag has its debug info dropped
MAX_COLUMN = 65535       # DILocation's column is 16 bits: LLVM refuses the whole module over a larger one


def source_file(name: str) -> tuple[str, str]:
    """(directory, file name) for a source named `name`: a relative path is taken from the
    current directory, so that the tools find the file wherever they run; a name that is no path
    (`<string>`, `<stdin>`) stays as it is. PTX's `.file` is a quoted string that LLVM writes
    without escapes, so a quote, a backslash or a control character becomes `_` (ptxas refused
    the whole module over a `"` in a file name)."""
    directory = "" if name.startswith("<") or os.path.isabs(name) else os.getcwd()
    return _printable(directory), _printable(name)


def _printable(text: str) -> str:
    return "".join("_" if c in '"\\' or ord(c) < 32 else c for c in text)


class LineTable:
    """Debug locations for one kernel function. `at(span)` gives the location of a span (or
    None for an op without one, which then keeps its enclosing op's location)."""

    def __init__(self, module: ir.Module, fn: ir.Function, span: Span | None):
        self.module = module
        directory, filename = source_file(span.source.name if span else "<string>")
        self.file = module.add_debug_info("DIFile", {"filename": filename, "directory": directory})
        unit = module.add_debug_info("DICompileUnit", {
            "language": ir.DIToken("DW_LANG_C"), "file": self.file, "producer": "tmalang",
            "isOptimized": True, "emissionKind": ir.DIToken("DebugDirectivesOnly"),
        }, is_distinct=True)
        module.add_named_metadata("llvm.dbg.cu", unit)
        module.add_named_metadata("llvm.module.flags", module.add_metadata(
            [ir.IntType(32)(2), "Debug Info Version", ir.IntType(32)(DEBUG_INFO_VERSION)]))
        line = span.line if span else 0
        self.scope = module.add_debug_info("DISubprogram", {
            "name": fn.name, "file": self.file, "line": line, "scopeLine": line, "unit": unit,
            "type": module.add_debug_info("DISubroutineType", {"types": module.add_metadata([])}),
            "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
        }, is_distinct=True)
        fn.set_metadata("dbg", self.scope)
        self._locations: dict[tuple[int, int], ir.DIValue] = {}
        self.entry = self.at(span)

    def at(self, span: Span | None):
        if span is None:
            return None
        key = (span.line, _column(span.col))
        location = self._locations.get(key)
        if location is None:
            location = self.module.add_debug_info("DILocation", {"line": key[0], "column": key[1],
                                                                 "scope": self.scope})
            self._locations[key] = location
        return location


def _column(col: int) -> int:
    """The column LLVM can hold: past MAX_COLUMN (a very long line), 0, which the line table reads
    as "somewhere on this line": the line stays right, and a clamped column would point at the
    wrong character."""
    return col if col <= MAX_COLUMN else 0


# What line info adds to the PTX: the directives, and the labels NVPTX puts around the function
# and after its prologue for the line table.
_DEBUG_LINE = re.compile(r"^\s*(\.loc\b|\.file\b|\.section\s+\.debug_|\$L__(func_begin|func_end|tmp)\d+:)")


def strip_line_info(ptx: str) -> str:
    """The PTX without its line info: what two compilations of one kernel from different files
    (or different lines) have in common, to compare them."""
    return "\n".join(line for line in ptx.splitlines() if not _DEBUG_LINE.match(line)) + "\n"

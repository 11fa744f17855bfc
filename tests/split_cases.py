"""Grouped diagnostic cases: many small wrong programs per file, each with its expected error inline.

A group file (tests/diagnostics/*.tma, tests/verify/*.tma) is cut at split-marker lines::

    // -----

Each piece is one case: a self-contained program with directives and one expected error::

    // -----
    // case: grid_declared_twice      its name; the pytest id is tiles.tma:grid_declared_twice
    // arch: sm_90a                   the target it compiles for (required: never guessed)
    // until: ll                      optional: the last stage, ast, ir, ll (default) or ptx
    // constants: BM=96,BK=32         optional: bindings of compile-time constants (compile(constants=...))
    kernel saxpy(a: f32, x: f32[M, N], y: f32[M, N], out: f32[M, N]) {
        grid persistent
        grid tiles
    //  ^^^^^^^^^^ error[E057]: the grid is already declared
    // expect-note: first declared at tests/diagnostics/tiles.tma:[[@LINE-3]]:5
        ...

The expected error takes one of three forms:

- a caret line, `//` then spaces then carets then `error[EXXX]: message`: the error points at
  the line directly above, from the first caret's column, with exactly that many carets when
  rendered (as the compiler prints them);
- `// expect-error@+N:COL error[EXXX]: message` (or `@-N`): the error is at the line N below
  (above) this one, column COL, caret width unchecked; for errors at column 1 or 2, or at the
  last line of a case (E002 points at the end of the input, so no line may follow it);
- `// expect-error error[EXXX]: message`: an error with no source location.

The message must match in full. Each `// expect-note: TEXT` is one note, in order; the error's
notes must be exactly these (no expect-note line: no notes). In a note, `[[@LINE+N]]` and
`[[@LINE-N]]` stand for the number of the line N below or above the note's own line.

A case compiles as if it began at its own line of the group file (the lines before it read as
blank), so every reported location is a true location in the group file. Blank lines at a case's
end are dropped: the case's last line is its last line of text. A piece before the first marker
with no code and no `case:` is the file's preamble.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tmalang.diagnostics import TmalangError

SPLIT = "// -----"
STAGES = ("ast", "ir", "ll", "ptx")

_DIRECTIVE = re.compile(r"^// (case|arch|until|constants): *(\S+) *$")
_CARET = re.compile(r"^//( *)(\^+) error\[(E\d+)\]: (.*)$")
_AT = re.compile(r"^// expect-error@([+-]\d+):(\d+) error\[(E\d+)\]: (.*)$")
_UNLOCATED = re.compile(r"^// expect-error error\[(E\d+)\]: (.*)$")
_NOTE = re.compile(r"^// expect-note: (.*)$")
_LINE_REF = re.compile(r"\[\[@LINE([+-]\d+)?\]\]")


class CaseFormatError(Exception):
    """A group file that breaks the format above (a test-authoring mistake, not a compiler bug)."""


@dataclass
class Expected:
    """The one error a case must raise. line is None for an error without a source location."""

    code: str
    message: str
    line: int | None = None
    col: int | None = None
    carets: int | None = None           # None: width unchecked
    notes: list[str] = field(default_factory=list)


@dataclass
class Case:
    path: Path                          # the group file
    name: str
    first_line: int                     # the group file's line number of the case's first line
    lines: list[str]
    arch: str
    until: str
    expected: Expected
    relative: str                       # the file name diagnostics carry, e.g. tests/diagnostics/roles.tma
    constants: dict = field(default_factory=dict)   # `// constants: BM=96,SW=64B`: NAME -> int or text

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.name}"

    def source(self) -> str:
        """The case's text, preceded by blank lines so that its lines keep their group-file numbers."""
        return "\n" * (self.first_line - 1) + "\n".join(self.lines) + "\n"

    def write(self, directory: Path) -> Path:
        """The case as a file of its own (same name as the group file) in `directory`, for CLI tests."""
        out = directory / self.path.name
        out.write_text(self.source())
        return out

    def expected_render(self, got: TmalangError | None = None) -> str:
        """The rendered diagnostic the expectation describes; an unchecked caret width is taken from `got`."""
        e = self.expected
        head = f"error[{e.code}]: {e.message}"
        notes = [f"note: {n}" for n in e.notes]
        if e.line is None:
            return "\n".join([head, *notes])
        carets = e.carets if e.carets is not None else _caret_width(got) or 1
        inside = 0 <= e.line - self.first_line < len(self.lines)
        text = self.lines[e.line - self.first_line] if inside else ""
        return "\n".join([f"{self.relative}:{e.line}:{e.col}: {head}", f"    {text}",
                          "    " + " " * (e.col - 1) + "^" * carets, *notes])

    def mismatch(self, got: TmalangError | None) -> str | None:
        """None if `got` is the expected error, else a report of expected against got."""
        want = self.expected_render(got)
        if got is None:
            return f"{self.id}: compiled without error\nexpected:\n{want}"
        rendered = got.render()
        if rendered == want:
            return None
        return f"{self.id}: the diagnostic differs\nexpected:\n{want}\ngot:\n{rendered}"


def _caret_width(got: TmalangError | None) -> int | None:
    if got is None or got.span is None:
        return None
    return got.render().splitlines()[2].count("^")


def load(path: Path, root: Path) -> list[Case]:
    """Every case of one group file, in file order."""
    relative = str(path.relative_to(root))
    cases, names = [], set()
    for index, (first_line, lines) in enumerate(_pieces(path.read_text())):
        if index == 0 and _is_preamble(lines):
            continue
        case = _case(path, relative, first_line, lines)
        if case.name in names:
            raise CaseFormatError(f"{relative}:{first_line}: case name '{case.name}' used twice")
        names.add(case.name)
        cases.append(case)
    return cases


def load_dir(directory: Path, root: Path) -> list[Case]:
    return [case for path in sorted(directory.glob("*.tma")) for case in load(path, root)]


def _pieces(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each piece between split markers, trailing blank lines dropped."""
    pieces, start, current = [], 1, []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() == SPLIT:
            pieces.append((start, current))
            start, current = number + 1, []
        else:
            current.append(line)
    pieces.append((start, current))
    for _, lines in pieces:
        while lines and not lines[-1].strip():
            lines.pop()
    return pieces


def _is_preamble(lines: list[str]) -> bool:
    return all(not s.strip() or (s.lstrip().startswith("//") and not _DIRECTIVE.match(s)) for s in lines)


def _case(path: Path, relative: str, first_line: int, lines: list[str]) -> Case:
    where = f"{relative}:{first_line}"
    directives: dict[str, str] = {}
    found: list[Expected] = []
    notes: list[str] = []
    for offset, line in enumerate(lines):
        number = first_line + offset
        if m := _DIRECTIVE.match(line):
            if m[1] in directives:
                raise CaseFormatError(f"{relative}:{number}: second '{m[1]}:' directive in one case")
            directives[m[1]] = m[2]
        elif m := _NOTE.match(line):
            notes.append(_LINE_REF.sub(lambda r: str(number + int(r[1] or 0)), m[1]))
        elif expected := _expectation(line, number, offset, lines, relative):
            found.append(expected)
        elif line.startswith("// expect-") or re.match(r"^// *\^", line):
            raise CaseFormatError(f"{relative}:{number}: malformed expectation: {line!r}")
    if "case" not in directives:
        raise CaseFormatError(f"{where}: a case without a '// case: NAME' line")
    if "arch" not in directives:
        raise CaseFormatError(f"{where}: case '{directives['case']}' has no '// arch: sm_XXa' line")
    until = directives.get("until", "ll")
    if until not in STAGES:
        raise CaseFormatError(f"{where}: unknown stage '{until}' (one of {', '.join(STAGES)})")
    if len(found) != 1:
        raise CaseFormatError(f"{where}: case '{directives['case']}' has {len(found)} expected errors, not 1")
    found[0].notes = notes
    return Case(path, directives["case"], first_line, lines, directives["arch"], until, found[0], relative,
                _constants(directives.get("constants", ""), where))


def _constants(text: str, where: str) -> dict:
    bound = {}
    for item in filter(None, text.split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise CaseFormatError(f"{where}: '// constants:' takes NAME=VALUE,..., got {item!r}")
        bound[name] = int(value) if re.fullmatch(r"-?[0-9]+", value) else value
    return bound


def _expectation(line: str, number: int, offset: int, lines: list[str], relative: str) -> Expected | None:
    if m := _CARET.match(line):
        if offset == 0:
            raise CaseFormatError(f"{relative}:{number}: a caret line with no line above it in its case")
        return Expected(m[3], m[4], number - 1, 3 + len(m[1]), len(m[2]))
    if m := _AT.match(line):
        return Expected(m[3], m[4], number + int(m[1]), int(m[2]))
    if m := _UNLOCATED.match(line):
        return Expected(m[1], m[2])
    return None

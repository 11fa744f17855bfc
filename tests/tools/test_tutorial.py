"""docs/tutorial.md is run, block by block, so it cannot say what the code does not do.

The tutorial's fenced blocks, by info string:

- ```sh: run with bash (-e -u -o pipefail) in a scratch folder per section, where `examples/`
  and `bench/` are the repository's folders, `python` is the interpreter running the tests and
  the venv's `tmalangc` comes first on PATH.
- ```python: exec'd in order in one namespace per section, with the scratch folder as the
  working directory; their asserts are the tutorial's claims.
- ```text: what the shell block just before it prints. Each of its lines must appear in that
  output, in order (trailing spaces aside); a line `...` stands for lines left out.
- ```tma PATH: a kernel shown in the text; it must be a contiguous excerpt of the file PATH.
- a `gpu` word after the language (```python gpu, ```sh gpu): needs a Hopper GPU, and its
  first line is the comment `# needs a Hopper GPU`, which the reader sees. The CPU test
  of a section runs its other blocks and skips these (so no CPU block may depend on a gpu
  block); the GPU test of a section (marked gpu) runs all its blocks, in order.

Any other fenced block fails the test, so nothing in the tutorial goes unchecked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(.*)$")
LANGUAGES = {"sh", "python", "text", "tma"}


@dataclass
class Block:
    section: str
    language: str
    words: list[str]           # the info string's words after the language
    code: str
    line: int                  # the first code line's number in the markdown file

    @property
    def gpu(self) -> bool:
        return "gpu" in self.words

    def where(self, source: str) -> str:
        return f"{source}:{self.line} (```{' '.join([self.language, *self.words])}, section '{self.section}')"


def parse(text: str) -> list[Block]:
    """Every fenced block, with the `## ` section it stands in."""
    blocks, section, info, start, body = [], "", None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if info is None:
            if line.startswith("## "):
                section = line[3:].strip()
            elif fence:
                info, start, body = fence.group(1).split(), number + 1, []
        elif fence and not fence.group(1).strip():
            language = info[0] if info else ""
            blocks.append(Block(section, language, info[1:], "\n".join(body) + "\n", start))
            info = None
        else:
            body.append(line)
    assert info is None, f"a fenced block opened at line {start - 1} is never closed"
    return blocks


def sections(blocks: list[Block]) -> dict[str, list[Block]]:
    grouped: dict[str, list[Block]] = {}
    for block in blocks:
        grouped.setdefault(block.section, []).append(block)
    return grouped


def scratch(folder: Path) -> Path:
    """A working folder where the repository's examples and benchmarks are reachable."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("examples", "bench"):
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name, target_is_directory=True)
    return folder


def shell_env(folder: Path) -> dict[str, str]:
    """PATH: `python` is this interpreter, then the venv's `tmalangc`; where no console script was
    installed beside this interpreter (a checkout on PYTHONPATH), `tmalangc` is `python -m tmalang`."""
    shims, fallback = folder / ".shims", folder / ".fallback"
    for directory, names, command in ((shims, ("python", "python3"), f'"{sys.executable}"'),
                                      (fallback, ("tmalangc",), f'"{sys.executable}" -m tmalang')):
        directory.mkdir(exist_ok=True)
        for name in names:
            script = directory / name
            script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
            script.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(shims), str(Path(sys.executable).parent), str(fallback), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def matches(expected: str, actual: str) -> bool:
    """Every line of `expected` but `...` appears in `actual`, in order."""
    lines = [line.rstrip() for line in actual.splitlines()]
    position = 0
    for want in (line.rstrip() for line in expected.splitlines()):
        if want == "...":
            continue
        try:
            position = lines.index(want, position) + 1
        except ValueError:
            return False
    return True


def run_section(blocks: list[Block], folder: Path, *, gpu: bool, source: str = "docs/tutorial.md") -> None:
    """Run one section's blocks in order; AssertionError (with the block's line) on a failure."""
    folder = scratch(folder)
    namespace = {"__name__": "__tutorial__"}
    last_output: str | None = None     # the previous shell block's stdout (None: none ran yet)
    last_skipped = False               # the previous shell block is a gpu block that did not run
    for block in blocks:
        where = block.where(source)
        if block.language not in LANGUAGES:
            raise AssertionError(f"{where}: a fenced block the test cannot run or check")
        skipped = block.gpu and not gpu
        if block.language == "tma":
            path = ROOT / block.words[0] if block.words else None
            assert path is not None and path.is_file(), f"{where}: ```tma names no file of the repository"
            assert block.code in path.read_text(), f"{where}: the kernel shown is not an excerpt of {block.words[0]}"
        elif block.language == "text":
            assert last_output is not None or last_skipped, f"{where}: a ```text block must follow a ```sh block"
            if not last_skipped:
                assert matches(block.code, last_output), (
                    f"{where}: the command's output differs from the block.\n--- shown:\n{block.code}"
                    f"--- printed:\n{last_output}")
        elif block.language == "sh":
            last_skipped, last_output = skipped, None
            if skipped:
                continue
            result = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=folder, env=shell_env(folder),
                                    capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, (f"{where}: exit status {result.returncode}\n--- stdout:\n"
                                            f"{result.stdout}--- stderr:\n{result.stderr}")
            last_output = result.stdout
        elif block.language == "python":
            if skipped:
                continue
            code = compile("\n" * (block.line - 1) + block.code, source, "exec")
            here = os.getcwd()
            os.chdir(folder)
            try:
                exec(code, namespace)
            except Exception as exc:
                raise AssertionError(f"{where}: {type(exc).__name__}: {exc}") from exc
            finally:
                os.chdir(here)


BLOCKS = parse(TUTORIAL.read_text())
SECTIONS = sections(BLOCKS)
GPU_SECTIONS = [name for name, blocks in SECTIONS.items() if any(b.gpu for b in blocks)]


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]


@pytest.mark.parametrize("name", list(SECTIONS), ids=[slug(n) for n in SECTIONS])
def test_section_runs_on_the_cpu(name, tmp_path):
    run_section(SECTIONS[name], tmp_path, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_SECTIONS, ids=[slug(n) for n in GPU_SECTIONS])
def test_section_runs_on_the_gpu(name, tmp_path):
    run_section(SECTIONS[name], tmp_path, gpu=True)


def test_the_steps_come_in_the_newcomers_order():
    titles = list(SECTIONS)
    steps = ["copy", "saxpy", "interpreter", "pytorch", "what the compiler derived", "gemm", "benchmark"]
    assert len(titles) == len(steps), titles
    for number, (title, word) in enumerate(zip(titles, steps), 1):
        assert title.startswith(f"{number}. ") and word in title.lower(), title


def test_a_gpu_block_says_so_to_the_reader():
    """The info string does not show when the markdown is rendered; the first line does."""
    for block in BLOCKS:
        assert block.gpu == block.code.startswith("# needs a Hopper GPU\n"), block.where("docs/tutorial.md")


def test_every_kind_of_block_is_there():
    kinds = {(b.language, b.gpu) for b in BLOCKS}
    assert {("sh", False), ("python", False), ("text", False), ("tma", False), ("python", True), ("sh", True)} <= kinds
    assert {b.section for b in BLOCKS if b.gpu} >= {s for s in SECTIONS if "pytorch" in s.lower()}


@pytest.mark.parametrize("doc", ["tutorial.md", "comparison.md"])
def test_the_links_and_pictures_exist(doc):
    path = ROOT / "docs" / doc
    targets = re.findall(r"\]\(([^)#]+)\)", path.read_text())
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local
    if doc == "tutorial.md":
        assert {"pictures/trace_saxpy.svg", "pictures/barriers_tma_copy.svg"} <= set(local)
    for target in local:
        assert (path.parent / target).exists(), target


# ---- the runner itself must be able to fail ----------------------------------------------

BROKEN = {
    "a failing assert": "## s\n\n```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is 1'\n```\n",
    "a failing command": "## s\n\n```sh\necho hello\nfalse\n```\n",
    "a failing pipeline": "## s\n\n```sh\nfalse | cat\n```\n",
    "output that differs": "## s\n\n```sh\necho 41\n```\n\n```text\n42\n```\n",
    "output out of order": "## s\n\n```sh\nprintf 'a\\nb\\n'\n```\n\n```text\nb\na\n```\n",
    "a kernel that is not in its file": "## s\n\n```tma examples/saxpy.tma\nkernel nothing() {}\n```\n",
    "an unknown block": "## s\n\n```bash\necho hi\n```\n",
    "an exception": "## s\n\n```python\nimport tmalang\ntmalang.compile('kernel broken(')\n```\n",
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_block_fails_the_runner(case, tmp_path):
    blocks = parse(BROKEN[case])
    with pytest.raises(AssertionError, match=r"broken\.md:\d+"):
        run_section(blocks, tmp_path, gpu=False, source="broken.md")


def test_a_correct_section_passes_the_runner(tmp_path):
    text = ("## s\n\n```sh\nprintf 'a\\nb\\nc\\n' > f.txt\ncat f.txt\n```\n\n```text\na\n...\nc\n```\n\n"
            "```python\nimport pathlib\nassert pathlib.Path('f.txt').read_text() == 'a\\nb\\nc\\n'\nn = 3\n```\n\n"
            "```python\nassert n == 3\n```\n\n```python gpu\nraise RuntimeError('runs only on a GPU')\n```\n")
    run_section(parse(text), tmp_path, gpu=False, source="ok.md")
    with pytest.raises(AssertionError, match="runs only on a GPU"):
        run_section(parse(text), tmp_path, gpu=True, source="ok.md")

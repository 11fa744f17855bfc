"""The watchdog from C++: the launch header of a kernel compiled with it arms the module when it
loads it, and a hang comes back as a tmalang::Error that names every reported wait as the Python
runtime does (runtime/watchdog.py), after which the record is cleared and the module re-armed.

Without a GPU, tests/host/watchdog_host.cpp runs against the stand-in driver (tests/host/
mock_cuda.cpp), which logs the module global as the header armed it and, at a launch, plays a
watchdog that fired: it writes the entries a test chose into the record. The C++ notes are
compared with the notes of the Python runtime's `_report` for the same record: random records of
up to a full record's entries, in which the same wait blocks a warp in many CTAs (one note, its
CTAs listed in runs and cut after LISTED_RUNS), of clustered kernels and odd file names among
them. On the H100 the same program hangs a kernel of tests/verify/barriers.tma for real, and then
launches a healthy kernel in the same process.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tmalang
from conftest import EXAMPLES, ROOT, example_arch
from split_cases import load_dir
from test_cpp_host import HOST, _gxx, _need_compiler, _need_linker, mock_driver  # noqa: F401 (a fixture)
from tmalang.backend import launch_header, ptxas
from tmalang.compiler import Options, compile_source
from tmalang.contract import watchdog as layout
from tmalang.contract.watchdog import Entry
from tmalang.runtime import watchdog as python_watchdog

VERIFY = {c.name: c for c in load_dir(ROOT / "tests" / "verify", ROOT)}
HANG = VERIFY["deadlock_consumer_inverted_parity"]   # kernel handoff: the loader waits on the wrong parity
COPY = ROOT / "examples" / "tma_copy.tma"
LAUNCH_TIMEOUT = 702                                 # cuda.h's CUDA_ERROR_LAUNCH_TIMEOUT: a report's code
NOTE = re.compile(r"role '(\w+)', warp \d+ waits at (\S+) on mbarrier (\S+)\[(\d+)\] parity (\d)")
M, N = 200, 300


@functools.cache
def _watched():
    """HANG compiled with the watchdog, through ptxas."""
    c = compile_source(HANG.source(), HANG.relative, Options(arch=HANG.arch, watchdog=True), until="ptx")
    c.cubin, _ = ptxas.assemble(c.ptx, HANG.arch)
    return c


def _build(tmp_path: Path, link: list[str], embed: bool = False) -> Path:
    """watchdog_host over hang.h (HANG with the watchdog) and copy.h (tma_copy without it), with
    their cubins next to it."""
    _need_compiler()
    hang = _watched()
    copy = tmalang.compile_file(COPY, watchdog=False)
    header = launch_header.render(hang.manifest, HANG.relative, cubin=hang.cubin if embed else None)
    (tmp_path / "hang.h").write_text(header)
    (tmp_path / "copy.h").write_text(launch_header.render(copy.manifest, str(COPY)))
    (tmp_path / "hang.cubin").write_bytes(hang.cubin)
    (tmp_path / "copy.cubin").write_bytes(copy.cubin)
    program = tmp_path / "watchdog_host"
    defines = [f"-DHANG={hang.manifest.kernel}", f"-DCOPY={copy.manifest.kernel}"] + ["-DHANG_EMBEDDED"] * embed
    _gxx(tmp_path, HOST / "watchdog_host.cpp", *defines, "-O1", "-o", str(program), *link)
    return program


def _run(program: Path, directory: Path, env: dict[str, str], timeout: int = 60) -> subprocess.CompletedProcess:
    """The program in `directory` (its out.bin goes there), with only `env` for an environment."""
    built = program.parent
    return subprocess.run([str(program), str(M), str(N), str(built / "hang.cubin"), str(built / "copy.cubin"),
                           str(directory / "out.bin")], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _reports(stdout: str) -> list[dict]:
    """The program's reports: code, message (the first line) and notes (the lines after it)."""
    found = []
    for chunk in re.split(r"^report \d+: ", stdout, flags=re.M)[1:]:
        head, message, *notes = chunk.rstrip("\n").split("\n")
        assert all(n.startswith("note: ") for n in notes), notes
        found.append({"code": int(head.removeprefix("code ")), "message": message,
                      "notes": [n.removeprefix("note: ") for n in notes]})
    return found


def _headline(timeout_ns: int) -> str:
    return (f"watchdog: kernel 'handoff' hung on the GPU: a warp waited more than {timeout_ns / 1e9:g} s for an "
            "mbarrier phase that did not complete")


# ---- against the stand-in driver ------------------------------------------------------------------


def _entry(**fields) -> Entry:
    return Entry(**({name: 0 for name in Entry._fields} | {"written": 1, "tag": 1} | fields))


def _python_report(manifest, entries: list[Entry]) -> tuple[str, list[str]]:
    """The message and wait notes of runtime/watchdog.py's `_report` for a record holding `entries`
    (those that fit it) of the kernel armed with tag 1, in ordinary host memory."""
    memory = ctypes.create_string_buffer(layout.RECORD_BYTES)
    raw = b"".join(struct.pack(f"<{layout.ENTRY_WORDS}I", *e) for e in entries[:layout.ENTRIES])
    ctypes.memmove(memory, raw, len(raw))
    record = python_watchdog._Record(0, ctypes.addressof(memory), 0, {1: python_watchdog._Armed(manifest, 0)})
    record.rearm = lambda: None     # no module to write to
    report = python_watchdog._report(record, stuck=False)
    return report.message, report.notes[:-2]     # the two last: what comes next, worded for Python


def _ctas(rng) -> list[tuple[int, int, int]]:
    """The CTAs one wait of one warp blocks: a lone CTA (any numbers), a whole 1-D grid, runs with
    gaps (about as many as a note lists, or more), some CTAs of a 3-D grid, the largest numbers."""
    small = lambda: int(rng.choice([0, 0, 1, 2, 131, 2**32 - 1]))   # noqa: E731
    kind = int(rng.integers(5))
    if kind == 0:
        return [(small(), small(), small())]
    if kind == 1:
        return [(x, 0, 0) for x in range(int(rng.integers(2, 133)))]
    if kind == 2:
        xs, x = [], int(rng.integers(3))
        for _ in range(int(rng.integers(1, 13))):
            length = int(rng.integers(1, 5))
            xs += range(x, x + length)
            x += length + int(rng.integers(1, 4))
        return [(x, 0, 0) for x in xs]
    if kind == 3:
        count = int(rng.integers(1, 7))
        return [(int(rng.integers(4)), int(rng.integers(3)), int(rng.integers(2))) for _ in range(count)]
    return [(2**32 - 3, 0, 0), (2**32 - 1, 0, 0), (2**32 - 2, 0, 0), (0, 0, 0)]


def _random_record(rng, manifest, size: int) -> list[Entry]:
    """`size` entries as the warps of a hung grid report them: waits (any site, stage and parities)
    of one warp in many CTAs, some warps twice (another lane), a few entries of no armed kernel or
    no site, each with a timeout of its own; shuffled, so that groups interleave."""
    entries: list[Entry] = []
    while len(entries) < size:
        index = int(rng.integers(len(manifest.waits)))
        site = manifest.waits[index]
        wait = dict(site=index, warp=int(rng.integers(12)), offset=site.offset + 8 * int(rng.integers(site.stages)),
                    parity=int(rng.integers(2)), phase_parity=int(rng.integers(2)))
        for x, y, z in _ctas(rng):
            timeout = int(rng.choice([250_000_000, 10**9, layout.DEFAULT_TIMEOUT_NS]))
            for lane in range(1 + (rng.random() < 0.1)):
                entries.append(_entry(**wait, cta_x=x, cta_y=y, cta_z=z, cluster_rank=int(rng.integers(4)),
                                      lane=lane, timeout_lo=timeout & 0xFFFFFFFF, timeout_hi=timeout >> 32))
        if rng.random() < 0.2:
            unknown = dict(tag=99) if rng.random() < 0.5 else dict(site=len(manifest.waits))
            entries.append(_entry(**(wait | unknown)))
    order = rng.permutation(len(entries))
    return [entries[i] for i in order[:size]]


def _mock_env(directory: Path, entries: list[Entry], timeout: str | None) -> dict[str, str]:
    env = {"MOCK_LOG": str(directory / "driver.jsonl"), "MOCK_CC_MAJOR": "9",
           "MOCK_WATCHDOG_GLOBAL": layout.GLOBAL, "MOCK_WATCHDOG_GLOBAL_BYTES": str(layout.GLOBAL_BYTES),
           "MOCK_WATCHDOG_FIELDS": ",".join(str(layout.FIELDS[f]) for f in ("record", "claimed", "stop")),
           "MOCK_WATCHDOG_KERNEL": "handoff",
           "MOCK_WATCHDOG_REPORT": ";".join(",".join(map(str, e)) for e in entries)}
    if timeout is not None:
        env["TMALANG_WATCHDOG_TIMEOUT"] = timeout
    return env


def _log(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "driver.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def mock_program(tmp_path_factory, mock_driver) -> Path:
    """watchdog_host, the hanging kernel's cubin in a file, linked to the stand-in driver."""
    return _build(tmp_path_factory.mktemp("watchdog_host"), [str(mock_driver), f"-Wl,-rpath,{mock_driver.parent}"])


@pytest.mark.parametrize("embed, timeout, timeout_ns", [(False, "0.25", 250_000_000),
                                                         (True, None, layout.DEFAULT_TIMEOUT_NS)],
                         ids=["file-timeout_from_env", "embedded-default_timeout"])
def test_a_report_names_the_waits_and_the_module_is_rearmed(tmp_path, mock_driver, mock_program, embed, timeout,
                                                           timeout_ns):
    program = _build(tmp_path, [str(mock_driver), f"-Wl,-rpath,{mock_driver.parent}"], True) if embed else mock_program
    manifest = _watched().manifest
    free, full = manifest.waits
    entries = [
        _entry(site=0, warp=0, offset=free.offset, parity=0, timeout_lo=timeout_ns & 0xFFFFFFFF,
               timeout_hi=timeout_ns >> 32),
        _entry(site=1, warp=1, lane=0, offset=full.offset, parity=0, phase_parity=1, word_lo=0xABC),
        _entry(site=1, warp=1, lane=3, offset=full.offset, parity=0, phase_parity=1),   # the same warp again
        _entry(site=1, warp=2, cta_x=5, cta_y=1, offset=full.offset, parity=1),
        _entry(site=7, warp=3, offset=full.offset),                                      # no such wait
        _entry(site=0, warp=3, tag=99, offset=free.offset),                               # no such kernel
        *(_entry(site=1, warp=1, cta_x=x, offset=full.offset, parity=0, phase_parity=1) for x in (7, 1, 2, 3, 2))]
    run = _run(program, tmp_path, _mock_env(tmp_path, entries, timeout))
    assert run.returncode == 0, run.stderr

    where = lambda site: f"{site.file}:{site.line}:{site.col}"   # noqa: E731
    waits = [f"CTA 0: role 'loader', warp 0 waits at {where(free)} on mbarrier free[0] parity 0 "
             "(the phase in progress has parity 0)",
             f"5 CTAs (0-3, 7): role 'writer', warp 1 waits at {where(full)} on mbarrier full[0] parity 0 "
             "(the phase in progress has parity 1)",                                 # one note for the same wait
             f"CTA (5, 1, 0): role 'writer', warp 2 waits at {where(full)} on mbarrier full[0] parity 1 "
             "(the phase in progress has parity 0)"]
    assert _python_report(manifest, entries) == (_headline(timeout_ns), waits)
    reports = _reports(run.stdout)
    assert len(reports) == 3                     # two through synchronize, one through the next launch
    for report in reports:
        assert report["code"] == LAUNCH_TIMEOUT
        assert report["message"] == _headline(timeout_ns)
        assert report["notes"][:3] == waits and len(report["notes"]) == 5
        assert "this process can launch again" in report["notes"][3]

    log = _log(tmp_path)
    (alloc,) = [e["host_alloc"] for e in log if "host_alloc" in e]            # one record for the context
    assert alloc == {"bytes": layout.RECORD_BYTES, "devicemap": True, "portable": True}
    (mapped,) = [e["mapped"] for e in log if "mapped" in e]
    armed = layout.state(mapped, timeout_ns, 1).hex()                          # the kernel's address, not the host's
    writes = [e["global_write"] for e in log if "global_write" in e]
    assert writes == [{"module": 1, "bytes": armed}] * 4                      # at the load, again after each report
    at_launch = [e["watchdog"] for e in log if "watchdog" in e]
    assert at_launch == [{"global": armed, "record_zero": True}] * 3          # each hang found it armed and cleared
    # three hangs and the copy: the fourth launch of the hanging kernel reported the third and did not launch
    assert len([e for e in log if "launch" in e]) == 4
    assert [e["entry"] for e in log if "entry" in e] == ["handoff", "tma_copy"]


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "2e9", "1s"])
def test_a_bad_timeout_fails_the_load(tmp_path, mock_program, value):
    run = _run(mock_program, tmp_path, _mock_env(tmp_path, [], value))
    assert run.returncode == 1
    assert run.stderr.strip() == (f"loading the hanging kernel: TMALANG_WATCHDOG_TIMEOUT='{value}' is not a number "
                                  "of seconds > 0")
    log = _log(tmp_path)
    assert {"unload": 1} in log and not any("global_write" in e for e in log)   # the module is not left loaded


def _notes_program(tmp_path: Path, manifest) -> Path:
    (tmp_path / "kernel.h").write_text(launch_header.render(manifest, "kernel.tma"))
    program = tmp_path / "watchdog_notes"
    _gxx(tmp_path, HOST / "watchdog_notes.cpp", f"-DKERNEL={manifest.kernel}",
         f"-DLISTED_RUNS={python_watchdog.LISTED_RUNS}", "-O1", "-o", str(program))
    return program


ODD_NAME = 'we"ird\\dir/na\u00efve\t??=1.tma'   # a quote, a backslash, UTF-8, a tab, a trigraph


@pytest.mark.parametrize("source", ["handoff", "odd_name", "dsmem_ring_sm90", "gemm_cluster2x2_sm90"])
def test_each_wait_is_worded_as_the_python_runtime_words_it(tmp_path, source):
    """C++'s notes for random records (any stage, CTA, cluster rank, parity; the same wait in many
    CTAs), against the Python runtime's `_report` for the same record."""
    _need_compiler()
    if source in ("handoff", "odd_name"):
        name = ODD_NAME if source == "odd_name" else HANG.relative   # the IR's manifest: ptxas rejects such a name
        manifest = compile_source(HANG.source(), name, Options(arch=HANG.arch, watchdog=True), until="ir").manifest
    else:
        path = ROOT / "examples" / f"{source}.tma"
        manifest = compile_source(path.read_text(), str(path), Options(arch=example_arch(path), watchdog=True),
                                  until="ir").manifest
        assert manifest.cluster != (1, 1, 1)
    rng = np.random.default_rng(7)
    records = [_random_record(rng, manifest, int(rng.integers(1, 200))) for _ in range(40)]
    records.append([_entry(tag=99), _entry(site=len(manifest.waits))])   # nothing known: no notes
    program = _notes_program(tmp_path, manifest)
    text = "".join("".join(f"{e.tag} {e.site} {e.cta_x} {e.cta_y} {e.cta_z} {e.cluster_rank} {e.warp} {e.offset} "
                           f"{e.parity} {e.phase_parity}\n" for e in r) + "\n" for r in records)
    run = subprocess.run([str(program)], input=text.encode(), capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    found: list[list[str]] = [[]]
    for line in run.stdout.decode().splitlines():
        if line:
            found[-1].append(line)
        else:                                         # a blank line ends a record's notes
            found.append([])
    expected = [_python_report(manifest, r)[1] for r in records]
    assert found[:-1] == expected and found[-1] == []
    notes = [n for r in expected for n in r]
    # the records exercised the cut list, runs, a 3-D list and the lone CTA's wording
    assert any(", ...)" in n for n in notes) and any(re.match(r"\d+ CTAs \(\d+-\d+", n) for n in notes)
    assert any(re.match(r"\d+ CTAs \(\(", n) for n in notes) and any(n.startswith("CTA ") for n in notes)


@pytest.mark.parametrize("size", [300, layout.ENTRIES, layout.ENTRIES + 40], ids=["some", "full", "overflowing"])
def test_a_random_report_is_worded_as_the_python_runtime_words_it(tmp_path, mock_program, size):
    """A random record of up to every entry (a kernel's warps past the last find it full and write
    nothing) reported through the stand-in driver: the message and wait notes of each of the three
    reports are those of the Python runtime's `_report` for the same record."""
    manifest = _watched().manifest
    entries = _random_record(np.random.default_rng(size), manifest, size)
    run = _run(mock_program, tmp_path, _mock_env(tmp_path, entries, None))
    assert run.returncode == 0, run.stderr
    message, waits = _python_report(manifest, entries)
    reports = _reports(run.stdout)
    assert len(reports) == 3
    for report in reports:
        assert (report["message"], report["notes"][:-2]) == (message, waits)
        assert "this process can launch again" in report["notes"][-2]


@pytest.mark.slow   # a C++ compile of every example
def test_every_example_s_watched_header_compiles_and_an_unwatched_one_has_no_watchdog(tmp_path):
    """-Wall -Wextra -Werror over the header of every example compiled with the watchdog; the header
    of a kernel without it names nothing of the watchdog (its text is what it was before)."""
    _need_compiler()
    units = []
    for path in EXAMPLES:
        arch = example_arch(path)
        c = compile_source(path.read_text(), str(path), Options(arch=arch, watchdog=True), until="ir")
        assert c.manifest.waits
        (tmp_path / f"{path.stem}.h").write_text(launch_header.render(c.manifest, str(path)))
        unit = tmp_path / f"{path.stem}.cpp"
        kernel = c.manifest.kernel
        unit.write_text(f'#include "{path.stem}.h"\n#include "{path.stem}.h"\n'
                        f"static_assert({kernel}_watchdog.site_count == {len(c.manifest.waits)}, \"every wait\");\n"
                        f"static_assert({kernel}_watchdog.layout.entry_words == {layout.ENTRY_WORDS}, \"layout\");\n")
        units.append(str(unit))
        plain = compile_source(path.read_text(), str(path), Options(arch=arch, watchdog=False), until="ir")
        assert "watchdog" not in launch_header.render(plain.manifest, str(path)).lower()
    _gxx(tmp_path, Path(units[0]), *units[1:], "-fsyntax-only")


# ---- on the GPU ------------------------------------------------------------------------------------


def _interpreter_waits() -> set[tuple]:
    kernel = tmalang.compile(HANG.source(), name=HANG.relative, arch=HANG.arch, watchdog=True)
    with pytest.raises(tmalang.TmalangError) as caught:
        kernel.interpret(np.ones((M, N), np.float32), np.zeros((M, N), np.float32))
    assert caught.value.code == "E401"
    return {m.groups() for n in caught.value.notes if (m := NOTE.search(n))}


@pytest.mark.gpu
def test_a_hang_on_the_gpu_is_reported_and_the_process_launches_again(tmp_path):
    """The header's program hangs the kernel three times (1 s timeout): each report names waits the
    interpreter names for the same kernel; then tma_copy, launched in the same process, copies
    exactly."""
    program = _build(tmp_path, [_need_linker()])
    env = {key: value for key, value in os.environ.items() if not key.startswith("MOCK_")}
    run = _run(program, tmp_path, env | {"TMALANG_WATCHDOG_TIMEOUT": "1"}, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    reports = _reports(run.stdout)
    assert len(reports) == 3, run.stdout
    interp = _interpreter_waits()
    for report in reports:
        assert report["code"] == LAUNCH_TIMEOUT and report["message"] == _headline(1_000_000_000), report
        gpu = {m.groups() for n in report["notes"] if (m := NOTE.search(n))}
        assert gpu and gpu <= interp, (gpu, interp)
        assert "this process can launch again" in report["notes"][-2]
    pitch = -(-N // 4) * 4
    values = (np.arange(M * pitch) % 1000 * 0.25 - 7.0).astype(np.float32).reshape(M, pitch)
    out = np.fromfile(tmp_path / "out.bin", np.float32).reshape(M, pitch)
    np.testing.assert_array_equal(out[:, :N], values[:, :N])

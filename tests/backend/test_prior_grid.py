"""Programmatic dependent launch (backend/prior_grid.py): every example's PTX waits for the previous
kernel before its first instruction that can touch global memory, and never triggers its
dependents early; the manifest says so, and a manifest written before that reads as not
overlapping."""

from __future__ import annotations

import re

import pytest

from conftest import EXAMPLES, ROOT, example_arch
from tmalang.compiler import Options, compile_source
from tmalang.contract.manifest import Manifest

IDS = [p.stem for p in EXAMPLES]
# every PTX instruction that reads or writes global memory, or issues something that does, also
# inside a braced inline-asm block (`{ ... @q ld.global.nc ... }`): anything in the .global state
# space (ld/st of every kind, volatile and relaxed ones too), bulk copies, atomics, reductions
GLOBAL = re.compile(r"\.global\b|cp\.async\.bulk|cp\.reduce\.async\.bulk|\batom\.|\bred\.|clusterlaunchcontrol|"
                    r"tcgen05\.alloc")


def _compile(path, **options):
    source = path.read_text()
    return compile_source(source, str(path.relative_to(ROOT)), Options(arch=example_arch(path), **options))


def _instructions(ptx: str) -> list[str]:
    body = ptx[ptx.index(".entry"):]
    return [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("//")]


@pytest.mark.parametrize("watchdog", [False, True], ids=["plain", "watchdog"])
@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_the_kernel_waits_for_the_one_before_it_before_touching_global_memory(path, watchdog):
    ptx = _compile(path, watchdog=watchdog).ptx
    lines = _instructions(ptx)
    waits = [i for i, line in enumerate(lines) if line.startswith("griddepcontrol.wait")]
    assert len(waits) == 1 and "griddepcontrol.launch_dependents" not in ptx
    first_global = next((i for i, line in enumerate(lines) if GLOBAL.search(line)), len(lines))
    assert waits[0] < first_global


def test_the_wait_comes_after_the_set_up_it_overlaps():
    lines = _instructions(_compile(ROOT / "examples" / "gemm_sm90.tma").ptx)
    wait = next(i for i, line in enumerate(lines) if line.startswith("griddepcontrol.wait"))
    inits = [i for i, line in enumerate(lines) if line.startswith("mbarrier.init")]
    assert inits and max(inits) < wait
    assert any(line.startswith("barrier.cluster.wait") for line in lines[:wait])   # the start-up sync too


def test_a_traced_build_waits_before_its_first_stamp():
    lines = _instructions(_compile(ROOT / "examples" / "gemm_sm90.tma", timeline=True).ptx)
    wait = next(i for i, line in enumerate(lines) if line.startswith("griddepcontrol.wait"))
    assert not any(line.startswith("mbarrier.init") for line in lines[:wait])


def test_tensor_memory_is_allocated_after_the_wait():
    """A kernel before ours that triggered its dependents early may still allocate TMEM: ours
    takes none before that kernel has finished."""
    lines = _instructions(_compile(ROOT / "examples" / "gemm_sm100.tma").ptx)
    wait = next(i for i, line in enumerate(lines) if line.startswith("griddepcontrol.wait"))
    allocs = [i for i, line in enumerate(lines) if line.startswith("tcgen05.alloc")]
    assert allocs and min(allocs) > wait


def test_the_manifest_says_the_kernel_overlaps_and_an_older_one_reads_as_not():
    manifest = _compile(ROOT / "examples" / "saxpy.tma").manifest
    assert manifest.overlaps_prior
    data = manifest.to_json()
    assert data["overlaps_prior"] is True and Manifest.from_json(data) == manifest
    del data["overlaps_prior"]                       # as a cache entry written before it existed
    assert Manifest.from_json(data).overlaps_prior is False

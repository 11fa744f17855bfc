"""tmalang.autotune: the fastest binding of a kernel's constants per key, remembered on disk.

On the CPU the timing is a stand-in (a timer fed by the config) and launches are recorded, not
run; on the H100 gemm_sm90's bindings are timed with CUDA events, the result checked against
float64, and a second tuner over the same cache reuses the winner without timing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tmalang
from conftest import ROOT
from tmalang.tuning import Autotuner, default_key

GEMM = ROOT / "examples" / "gemm_sm90.tma"
CONFIGS = [{"BN": 256}, {"BN": 128, "CSWIZZLE": "64B", "STAGES": 6}, {"BN": 128, "CSWIZZLE": "64B", "STAGES": 3, "GROUP": 16}]


class Array:
    """Stands for a device array: a shape and a dtype are all the key reads."""

    def __init__(self, *shape, dtype="bf16"):
        self.shape, self.dtype = shape, dtype


def tuner(tmp_path, times: dict[int, float], timed: list, launched: list, configs=CONFIGS):
    """An Autotuner whose timer returns `times[BN, STAGES]` and whose launches are recorded."""
    def timer(launch):
        launch()
        config = launched[-1]
        timed.append(config)
        return times[(config["BN"], config.get("STAGES", 4))]

    t = Autotuner(GEMM, configs, cache_dir=tmp_path, timer=timer)
    t.compiled = lambda index, t=t: (lambda *a, **k: launched.append(t.configs[index]))
    return t


def test_picks_the_fastest_config_per_key_and_launches_it(tmp_path):
    timed, launched = [], []
    t = tuner(tmp_path, {(256, 4): 3.0, (128, 6): 1.0, (128, 3): 2.0}, timed, launched)
    a, b, c = Array(1000, 1000), Array(500, 1000), Array(1000, 500)
    t(a, b, c)
    assert [cfg["BN"] for cfg in timed] == [256, 128, 128]              # every config timed once
    assert launched[-1] == CONFIGS[1]                                   # then the winner launched
    t(a, b, c)
    assert len(timed) == 3 and launched[-1] == CONFIGS[1]               # a known key: no timing
    t(Array(64, 8192), Array(8192, 8192), Array(64, 8192))
    assert len(timed) == 6                                              # a new key is timed
    assert list(t.choices().values()) == [CONFIGS[1]] * 2


def test_a_second_tuner_reuses_the_winner_from_disk_and_clear_forgets_it(tmp_path):
    times = {(256, 4): 1.0, (128, 6): 2.0, (128, 3): 3.0}
    first_timed, launched = [], []
    tuner(tmp_path, times, first_timed, launched)(Array(77, 64), Array(99, 64), Array(77, 99))
    second_timed = []
    second = tuner(tmp_path, times, second_timed, launched)          # as a new process would
    second(Array(77, 64), Array(99, 64), Array(77, 99))
    assert second_timed == [] and launched[-1] == {"BN": 256}
    second.clear()
    assert second.choices() == {} and not second.file.exists()
    tuner(tmp_path, times, second_timed, launched)(Array(77, 64), Array(99, 64), Array(77, 99))
    assert len(second_timed) == 3


def test_the_cache_belongs_to_source_and_configs(tmp_path):
    a = Autotuner(GEMM, CONFIGS, cache_dir=tmp_path)
    assert Autotuner(GEMM, CONFIGS[:2], cache_dir=tmp_path).file != a.file
    assert Autotuner(GEMM.read_text() + "\n", CONFIGS, cache_dir=tmp_path).file != a.file
    a.file.parent.mkdir(parents=True, exist_ok=True)
    a.file.write_text(json.dumps({"k": 7}))                          # an index past the configs: ignored
    assert Autotuner(GEMM, CONFIGS, cache_dir=tmp_path).choices() == {}
    a.file.write_text("{not json")
    assert Autotuner(GEMM, CONFIGS, cache_dir=tmp_path).choices() == {}


def test_a_config_that_does_not_compile_is_left_out_with_its_reason(tmp_path):
    timed, launched = [], []
    bad = [{"BN": 256}, {"BN": 96, "NOSUCH": 1}]
    t = Autotuner(GEMM, bad, cache_dir=tmp_path, timer=lambda launch: timed.append(1) or 1.0)
    t.compiled = lambda index, real=t.compiled: (real(index), lambda *a, **k: launched.append(index))[1]
    t(Array(10, 64), Array(10, 64), Array(10, 10))
    assert launched[-1] == 0 and "E541" in t.failures[1]
    with pytest.raises(tmalang.TmalangError):
        Autotuner(GEMM, bad[1:], cache_dir=tmp_path, timer=lambda launch: 1.0)(Array(1, 1))


def test_configs_must_be_a_nonempty_list_of_dicts():
    for configs in ([], [1], None):
        with pytest.raises(ValueError):
            Autotuner(GEMM, configs)


def test_the_default_key_is_shapes_dtypes_and_scalars():
    assert default_key((Array(2, 3), 5, Array(4, dtype="f32"))) == (((2, 3), "bf16"), 5, ((4,), "f32"))


@pytest.mark.gpu
def test_h100_tunes_gemm_at_an_odd_shape_and_a_second_tuner_reuses_it(tmp_path):
    torch = pytest.importorskip("torch")
    m, n, k = 1000, 777, 520
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    c = torch.full((m, 784), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    gemm = tmalang.autotune(GEMM, CONFIGS, cache_dir=tmp_path)
    gemm(a, b, c)
    torch.cuda.synchronize()
    expected = a.double() @ b.double().T
    assert ((c.double() - expected).norm() / expected.norm()).item() < 1e-2
    (chosen,) = gemm.choices().values()
    assert chosen in CONFIGS and not gemm.failures
    timed = []
    again = tmalang.autotune(GEMM, CONFIGS, cache_dir=tmp_path, timer=lambda launch: timed.append(1) or 1.0)
    c.fill_(float("nan"))
    again(a, b, c)
    torch.cuda.synchronize()
    assert timed == [] and np.isfinite(c.float().cpu().numpy()).all()

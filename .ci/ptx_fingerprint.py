"""Every example's (and the library's) PTX for every target it fits, plain, with the watchdog and with the timeline, as
sha256 per (file, kernel, target, mode): the refactor check (a refactor must leave it byte-identical).

    python .ci/ptx_fingerprint.py > before.json ; ... ; python .ci/ptx_fingerprint.py | diff before.json -
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import example_archs  # noqa: E402  (sema decides which targets an example fits)

from tmalang.compiler import Options, compile_source  # noqa: E402
from tmalang.syntax.parser import parse  # noqa: E402

MODES = {"plain": {}, "watchdog": {"watchdog": True}, "timeline": {"timeline": True}}


def main() -> None:
    prints = {}
    for path in sorted((ROOT / "examples").glob("*.tma")) + sorted((ROOT / "tmalang" / "library").glob("*.tma")):
        text = path.read_text()
        for kernel in parse(text, str(path)).kernels:
            for arch in example_archs(path):
                for mode, flags in MODES.items():
                    options = Options(arch=arch, kernel=kernel.name, **{"watchdog": False, **flags})
                    ptx = compile_source(text, path.name, options).ptx
                    prints[f"{path.name}:{kernel.name}:{arch}:{mode}"] = hashlib.sha256(ptx.encode()).hexdigest()
    json.dump(prints, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main()

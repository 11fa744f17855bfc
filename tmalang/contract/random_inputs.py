"""Random inputs for a launch: what `tmalangc run` and `verify`'s sweeps pass a kernel.

Tensors are random (rows padded to 16 bytes, as TMA needs; integers in -50..49), scalars random
small integers or normal floats; an index tensor holds distinct rows of the tensors it gathers
from. Dims the caller leaves out are DEFAULT_DIM and are added to `dims`.
"""

from __future__ import annotations

import numpy as np

from ..targets.dtypes import NUMPY
from .manifest import IndexParam, TensorArg

DEFAULT_DIM = 256


def random_inputs(manifest, dims: dict[str, int], rng) -> list:
    """Random tensors (rows padded to 16 bytes, as TMA needs) and scalars for every argument. An
    index tensor holds distinct rows of the tensors it gathers from, in random order (repeats
    once it is longer than they have rows): a random integer names no row (E497)."""
    values = []
    shapes = {a.name: a.shape for a in manifest.args if isinstance(a, TensorArg)}
    index_rows = {p.tensor: min(_dim(shapes[t][0], dims) for t in p.rows_of)
                  for p in manifest.ptx_params if isinstance(p, IndexParam) and p.rows_of}
    for arg in manifest.args:
        dtype = NUMPY[arg.dtype]
        if not isinstance(arg, TensorArg):
            values.append(dtype.type(rng.integers(1, 5) if dtype.kind in "iu" else rng.standard_normal()))
            continue
        shape = [_dim(d, dims) for d in arg.shape]
        if arg.name in index_rows:
            values.append(_index_values(rng, shape[0], index_rows[arg.name]))
            continue
        inner = -(-shape[-1] * dtype.itemsize // 16) * 16 // dtype.itemsize
        data = rng.integers(-50, 50, size=[*shape[:-1], inner]) if dtype.kind in "iu" else \
            rng.standard_normal([*shape[:-1], inner])
        values.append(data.astype(dtype)[..., : shape[-1]])
    return values


def _dim(d, dims: dict[str, int]) -> int:
    return d if isinstance(d, int) else dims.setdefault(d, DEFAULT_DIM)


def _index_values(rng, length: int, rows: int) -> np.ndarray:
    picked = rng.permutation(rows)[:length] if length <= rows else rng.integers(0, rows, length)
    return picked.astype(np.int32)

"""Which of gemm_sm90.tma's kernels, and which binding of its constants, runs a GEMM of a given
shape: the candidates, and the rule that picks one.

A candidate is a kernel of tmalang/library/gemm_sm90.tma, a tile BM x BN, and a split S of the K
steps (S > 1: gemm_parts into an f32 workspace, then splitk_sum). Its K slice is 128 bytes (64
bf16/f16 elements, 128 fp8), the ring as deep as shared memory allows (deep rings are what keep
HBM busy when a CTA's tile is narrow), and the output swizzle the one that matches a column
block's width, so a tile shape and a split fix the whole binding.

The rule (measured on the H100, bench/results/gemm-shapes-*.json) takes the first candidate
whose CTAs fill the GPU: one wave at least FILL full, or more than WAVES waves (where the last
one's idle SMs matter little), or, for the wide unsplit tiles, waves whose last is LAST_FILL full
(H200, bench/results/gemm-pointwise-2026-11-29-h200.json, cuBLAS cold/graph: 25088 x 512 x 128,
the GEMM of a 1x1 convolution, 392 tiles of 128 x 256 in 2.97 waves 0.98x/1.09x against 0.92x/0.98x
for 784 of 128 x 128). Candidates go largest tile first: the 128 x 256 cluster kernel
(B K-major), then 128 x 128; then, for M up to NARROW_M, the 64-row tiles (one consumer
warpgroup, so half the MMA rate, but a decode-shaped M = 1..64 with N = 8192 runs 128 CTAs of
64 x 64 tiles and streams B at the HBM's rate, where one 128 x 256 tile per 32 SMs would leave
most of the GPU idle) before splits of K; for larger M, a 128 x 64 tile that fills one wave over
32 to 128 K slices comes before any split (H200, bench/results/gemm-slim-2026-11-29-h200.json,
cuBLAS cold/graph: 1568 x 512 x 4608, a deep 3x3 convolution's GEMM, 0.93x/0.88x against
0.75x/0.69x split in four; 1280 x 640 x 5120 0.94x/0.90x against 0.76x/0.69x; 3136 x 256 x 2304
0.87x/0.86x against 0.72x/0.66x; over 16 K slices, 1000³, it did not beat 128 x 128, over 1024,
1024² x 65536, it lost to a split); then the splits (long-K problems with few tiles): the largest
tile whose split fills, in the fewest parts, each at least
MIN_PART_STEPS K slices deep (1024² x 65536 bf16 on the H100: 128 x 256 in 4 parts 0.98x
cuBLAS, 128 x 128 in 2 parts 0.90x: the wider tile reads half the L2 bytes per MMA, which
outweighs twice the workspace). Where rows of A do
not start on 32-byte L2 sectors (`sectors`, below) and 128 x 64 tiles fill half a wave to one
wave in pairs of tile columns, gemm_row runs them, each pair of CTAs sharing its A tile by
multicast, so that each sector is read once for two tiles (H200, same run, bench/results/
gemm-row-2026-11-29-h200-sectors.json, cuBLAS cold/graph: 1000³ 0.91x/0.89x against 0.85x/0.80x
for 128 x 128 tiles; 1100 x 600 x 4104 0.94x/1.00x against 0.82x/0.86x split in four; 1000 x
1024 x 3000 0.95x/0.95x against 0.72x/0.74x unpaired; on sectors, 1000 x 1000 x 1008 and 1024³,
it lost to 64 x 128 tiles, 0.85x/0.82x against 0.93x/1.04x). When nothing fills the
GPU the problem is small and bound by latency: the tile that puts the most CTAs to work in one
wave (64-row tiles too, whatever M is), unless the operands' rows do not start on 32-byte L2
sectors (`sectors`: K = 1000 bf16 rows are 2000 bytes apart), which makes every 128-byte K slice
of a row touch five sectors instead of four: 128-row tiles, which read each sector for twice the
MMAs, win then (H100, same run: 1000³ 128 x 128 0.91x cuBLAS, 64 x 128 0.84x; 1000 x 1000 x
1008, rows 2016 bytes apart, on sectors but off 128-byte lines: 64 x 128 0.96x, 128 x 128 0.91x;
1024³: 64 x 128 1.00x, 128 x 128 0.81x).
`tmalang.gemm(..., tune=True)` times the first few of `ranked` instead of trusting the rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SMEM_BYTES = 227 * 1024          # the opt-in shared memory of one CTA on sm_90a
SMEM_RESERVED = 2 * 1024         # barriers and alignment
MAX_STAGES = 12
FILL = 0.75                      # a wave this full counts as filling the GPU
WAVES = 3                        # past this many waves, the last one's idle SMs matter little
LAST_FILL = 0.9                  # or, for a wide tile, fewer waves, the last this full (see `choose`)
NARROW_M = 128                   # 64-row tiles (one consumer warpgroup) only up to this M
MIN_PART_STEPS = 16              # a split part streams at least this many K slices
TILES = ((128, 256), (128, 128), (128, 192), (128, 160), (64, 128), (64, 64), (128, 64))   # 192, 160: one wave where 128 is not
SLIM = (128, 64)                 # unsplit, it comes before a split of K (see `choose`), never before a wider tile
SLIM_STEPS = (32, 128)           # over this many K slices, in one wave
ROW = (128, 64)                  # gemm_row's tile, where rows of A are off 32-byte sectors (see `choose`)
SPLITS = (2, 4, 8)
CLUSTER_STEPS = 32               # K slices from which the cluster kernel is a candidate, whatever the waves
CLUSTER_WAVES = 1.5              # or waves of its tiles past this many
DECODE_M = 32                    # up to this M: short tiles (16 or 32 rows), see _decode
SHORT_BN = (64, 128, 256)        # their widths
RAGGED_BN = (32, 64, 128)        # the widths of one ragged tile of M rows (DECODE_M < M < 128, M not 64)
CLUSTER_MIN_STEPS = 8            # past 1.5 waves, the cluster kernel still needs this many K slices
LONG_DECODE_STEPS = 128          # from this many K slices a decode tile filling half the GPU splits in two
SHORT_STEPS = 64                 # up to this many K slices an unsplit narrow tile beats a split wide one


@dataclass(frozen=True)
class Config:
    """One way to run a GEMM: a kernel of gemm_sm90.tma, its constants, and the split of K."""

    kernel: str
    constants: tuple = field(default=())     # sorted (name, value) pairs
    split: int = 1

    def bindings(self) -> dict:
        return dict(self.constants)

    def describe(self) -> str:
        c = self.bindings()
        text = f"{self.kernel} {c['BM']}x{c['BN']}x{c['BK']} stages {c['STAGES']}"
        return text + (f", split {self.split}" if self.split > 1 else "")


def candidates(m: int, n: int, k: int, itemsize: int, out_itemsize: int, *, n_major: bool,
               clusters: bool = True, sms: int = 132, sectors: bool = True) -> list[Config]:
    """Every configuration that can run this GEMM: tiles of every shape, split or not, the
    cluster kernel where B is K-major."""
    result = []
    small = -(-m // 128) * -(-n // 128) < FILL * sms      # not even 128 x 128 tiles fill the GPU
    steps = -(-k // (128 // itemsize))
    for bm, bn in TILES:
        if bm < 128 and m > NARROW_M and not (small and sectors):      # half the MMA rate, for nothing
            continue
        if bn == 256 and n <= 128 or n_major and bn % 64:                # half of every tile idle; an
            continue                                                    # N-major B is read in 64-wide panels
        if (bm, bn) == (128, 256) and clusters and not n_major and _clustered(m, n, steps, sms):
            result.append(_config("gemm_cluster", bm, bn, itemsize, out_itemsize))
        result += _tile_configs(bm, bn, steps, itemsize, out_itemsize, n_major)
    if not sectors and itemsize == 2 and not n_major and m > NARROW_M and -(-n // ROW[1]) % 2 == 0:
        result.append(_config("gemm_row", *ROW, itemsize, out_itemsize))
    rows = short_rows(m)
    for bn in (SHORT_BN if m <= DECODE_M else RAGGED_BN) if rows else ():
        if not (n_major and bn % 64 or bn == 256 and n <= 128):
            result += _tile_configs(rows, bn, steps, itemsize, out_itemsize, n_major)
    return result


def _tile_configs(bm: int, bn: int, steps: int, itemsize: int, out_itemsize: int, n_major: bool) -> list[Config]:
    """A tile unsplit and split in each of SPLITS parts (no more parts than K steps; gemm_parts
    writes its f32 slab in 8 column blocks of whole 8 columns, so only widths of 64 multiples)."""
    kn = "_kn" if n_major else ""
    return [_config("gemm_tile" + kn, bm, bn, itemsize, out_itemsize),
            *(_config("gemm_parts" + kn, bm, bn, itemsize, 4, s) for s in SPLITS if s <= steps and bn % 64 == 0)]


def short_rows(m: int) -> int | None:
    """The rows of one short tile holding all of M, a short accumulator (language.md §15): 16 or
    32 for decode shapes (M up to DECODE_M), below 128 M rounded up to 16 where that is not whole
    64-row tiles (77 rows: 80, in two warpgroups, the second holding 16); else None."""
    if m <= DECODE_M:
        return 16 if m <= 16 else 32
    rows = -(-m // 16) * 16
    return rows if m < 128 and rows % 64 else None


def _clustered(m: int, n: int, steps: int, sms: int) -> bool:
    """Whether the cluster kernel is a candidate: its pairs pay off over long K loops or several
    waves. Over short ones its CTAs wait on each other's slots (H200, bench/results/
    gemm-rule-2026-11-29-h200.json: 1568 x 2048 x 512 cluster 0.60x cuBLAS against 0.92x
    unclustered, 6272 x 512 x 1024 0.54x against 0.88x, 25088 x 256 x 512 0.81x against 0.95x);
    past 1.5 waves it needs CLUSTER_MIN_STEPS slices still (4096² x 128, two slices: 0.91x cuBLAS
    cold, 0.99x in graph replay clustered, 0.94x/1.03x not: gemm-tiles-2026-11-29-h200.json)."""
    waves = -(-m // 128) * -(-n // 256) / sms
    return steps >= CLUSTER_STEPS or (waves > CLUSTER_WAVES and steps >= CLUSTER_MIN_STEPS)


def _config(kernel: str, bm: int, bn: int, itemsize: int, out_itemsize: int, split: int = 1) -> Config:
    bk = 128 // itemsize
    blocks = 8 if split > 1 else 4                 # the epilogue's column blocks
    block_bytes = bn // blocks * out_itemsize
    staging = 2 * bm * block_bytes
    a_rows = -(-bm // 64) * 64                     # a short tile's A slot spans whole 64-row wgmma tiles (plan_smem)
    stages = min(MAX_STAGES, (SMEM_BYTES - SMEM_RESERVED - staging) // ((a_rows + bn) * bk * itemsize))
    constants = {"BM": bm, "BN": bn, "BK": bk, "STAGES": stages, "LAST": 11 if bm > 64 else 7,
                 "CSWIZZLE": _swizzle(block_bytes)}
    return Config(kernel, tuple(sorted(constants.items())), split)


def _swizzle(row_bytes: int) -> str:
    """The widest swizzle whose span divides a staging tile's row (none past 128 bytes: the
    epilogue's block is then one unswizzled box)."""
    for span in (128, 64, 32):
        if row_bytes % span == 0 and row_bytes <= 128:
            return f"{span}B"
    return "none"


def ranked(m: int, n: int, k: int, itemsize: int, out_itemsize: int, *, n_major: bool, sms: int,
           clusters: bool = True, sectors: bool = True) -> list[Config]:
    """The candidates, the rule's pick first, then by how well their CTAs fill `sms` SMs (one
    wave as full as possible, ties to the larger tile and the smaller split)."""
    options = candidates(m, n, k, itemsize, out_itemsize, n_major=n_major, clusters=clusters, sms=sms,
                         sectors=sectors)
    pick = choose(options, m, n, k, sms)
    rest = sorted((c for c in options if c != pick), key=lambda c: (_fill_loss(c, m, n, sms), c.split))
    return [pick] + rest


def choose(options: list[Config], m: int, n: int, k: int, sms: int) -> Config:
    """The rule of the module docstring."""
    steps = -(-k // options[0].bindings()["BK"])
    wide = [c for c in options if c.split == 1 and c.bindings()["BM"] == 128 and _tile(c) != SLIM]

    def fills(c: Config) -> bool:      # one wave nearly full, or enough waves that the last matters
        count = ctas(c, m, n)           # little, or (a wide tile, unsplit) waves whose last is all but full
        return FILL * sms <= count <= sms or count > WAVES * sms or c in wide and count % sms >= LAST_FILL * sms

    narrow = [c for c in options if c.split == 1 and c.bindings()["BM"] < 128]
    slim = [c for c in options if c.split == 1 and _tile(c) == SLIM and ctas(c, m, n) <= sms
            and SLIM_STEPS[0] <= steps <= SLIM_STEPS[1]]
    split = sorted((c for c in options if c.split > 1 and steps // c.split >= MIN_PART_STEPS),
                   key=lambda c: (_tile_rank(c), c.split))
    if short_rows(m):
        decode = _decode(options, m, n, steps, sms)
        if decode is not None:
            return decode
    row = [c for c in options if c.kernel == "gemm_row" and sms / 2 <= ctas(c, m, n) <= sms]
    if row:
        return row[0]
    if m <= NARROW_M:
        order = wide + narrow + split
    else:
        order = wide + (narrow + slim + split if steps <= SHORT_STEPS else slim + split + narrow)
    for config in order:
        if fills(config):
            return config
    whole = wide + narrow
    fitting = [c for c in whole if ctas(c, m, n) <= sms] or whole
    return max(fitting, key=lambda c: ctas(c, m, n))       # small: as many SMs as will work at once


def _decode(options: list[Config], m: int, n: int, steps: int, sms: int) -> Config | None:
    """A decode-shaped GEMM (M up to DECODE_M) streams B through short tiles of 16 or 32 rows.
    A 64-row A box over a one-row A is 63 rows past the tensor's end, and TMA fills those rows
    far slower than it loads real ones: the same 64 x 64 kernel ran 1 x 8192² in 57 µs, and in
    45 µs with A padded to 64 real rows (H200, cuBLAS 44 µs). A short tile loads M's rows only.
    The width: the most CTAs that fit one wave (64, else 128, else 256 columns); where that fills
    at most half the GPU over a long K, K split into the parts that put the most CTAs in one wave,
    in as few parts as that takes (H200, bench/results/
    gemm-decode-2026-11-29-h200.json: 1 x 8192² 16 x 64 0.97x cuBLAS cold and 0.99x in graph
    replay against 0.83x/0.83x for 64 x 128 split in two; 16 x 14336 x 4096 16 x 128 1.01x/1.00x;
    2 x 5120² 16 x 64 1.00x/0.95x; 8 x 4096 x 14336 split in two 0.90x/0.91x against 0.90x/0.78x).
    Up to 128 rows one ragged tile holds M, its last warpgroup short, and the widths go down to 32
    (77 x 4096²: 80 x 32 0.93x/0.64x against 0.78x/0.49x for 64 x 64, which reads B twice, its
    second tile 51 rows past A's end; gemm-tiles-2026-11-29-h200.json)."""
    rows = short_rows(m)
    unsplit = [c for c in options if c.bindings()["BM"] == rows and c.split == 1]
    if not unsplit:
        return None
    fitting = [c for c in unsplit if ctas(c, m, n) <= sms]
    pick = max(fitting, key=lambda c: ctas(c, m, n)) if fitting else min(unsplit, key=lambda c: ctas(c, m, n))
    if 2 * ctas(pick, m, n) > sms or steps < LONG_DECODE_STEPS:
        return pick
    parts = [c for c in options if c.bindings()["BM"] == rows and c.split > 1 and ctas(c, m, n) <= sms
             and steps // c.split >= MIN_PART_STEPS and ctas(c, m, n) > ctas(pick, m, n)]
    return max(parts, key=lambda c: (ctas(c, m, n), -c.split), default=pick)


def _tile(config: Config) -> tuple[int, int]:
    c = config.bindings()
    return c["BM"], c["BN"]


def _tile_rank(config: Config) -> int:
    tile = _tile(config)
    widths = sorted({*SHORT_BN, *RAGGED_BN}, reverse=True)
    return TILES.index(tile) if tile in TILES else len(TILES) + widths.index(tile[1])


def ctas(config: Config, m: int, n: int) -> int:
    c = config.bindings()
    return -(-m // c["BM"]) * -(-n // c["BN"]) * config.split


def _fill_loss(config: Config, m: int, n: int, sms: int) -> float:
    """How far from one full wave: idle SM slots over the waves run, as a fraction."""
    count = ctas(config, m, n)
    waves = -(-count // sms)
    return (waves * sms - count) / (waves * sms) + 0.25 * (waves - 1)

"""Launch parameters per call: block sizes, warps and whether a reduction row stays in
registers, chosen from the sizes of this call (one compiled kernel per choice, cached)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from ..dump import env_switch
from .plan import Template

# the largest reduced extent kept whole in registers (beyond it: a looped kernel); with 32 warps
# a 32768-element fp32 row is 32 registers a thread per live copy
MAX_PERSISTENT = 32768
TILE_ELEMENTS = 4096
# pointwise tiles: 2048 elements on 4 warps (16 a thread) beat 4096 on 8 warps on the H200 for
# GELU forward and backward (0.70-0.74 of copy against 0.63-0.65; benchmarks/sweep_pointwise.py)
POINTWISE_TILE = 2048
# A pointwise kernel reading a vector along its columns (a bias, a norm's weight, a column
# statistic: an input broadcast along the rows) over at least ROW_BROADCAST_TILE[0] rows takes
# tiles of ROW_BROADCAST_TILE rows by columns (4096 elements, 16 a thread), so that a program
# loads its slice of each vector once for 32 rows instead of 2: the default tile at 16384
# columns is 2 rows of 1024, and a batch norm's four fp32 column vectors then cost 8 bytes an
# element from L2 beside x's 2 from DRAM. On the H200 (2026-12-04, profiler kernel times with L2
# cleared, bf16): a hand-written batch norm's rows kernel 0.75-0.83 of copy -> 0.85-0.98 at
# 16384x1024 to 8192x16384 and 65536x768, GELU with a bf16 bias 0.86-1.01 -> 0.87-1.01 (0.905 ->
# 0.976 at 65536x768); a row scale (broadcast along the columns) unchanged. 32 x 128 on 4 warps
# was faster still for the batch norm (0.89-1.02) but lost GELU's bias 2-6%; 16 x 256, 64 x 64
# and 64 x 128 on 16 warps lost to it everywhere (docs/performance-history.md, thirty-sixth session)
ROW_BROADCAST_TILE = (32, 128)
# inner-outer: the longest row kept in registers, where x, dy, w and an fp32 accumulator per
# column reduction live at once (beyond it: a row kernel then a column kernel). Compiled for
# sm_90 without a GPU (ptxas -v), the bf16 RMSNorm and LayerNorm backward use 96-125 registers a
# thread at 1024-8192 columns on the default warps, so two programs of 8 warps fit a
# multiprocessor, one of 16; 16384 columns on 32 warps spill 120-200 bytes a thread. Programs
# of the persistent kernel: INNER_OUTER_WARPS_PER_PROCESSOR warps' worth a multiprocessor (at
# least one program); on Triton's interpreter, which has no processors, a few, so tests see
# partial rows from several programs, each over several rows.
INNER_OUTER_MAX_PERSISTENT = 16384
INNER_OUTER_WARPS_PER_PROCESSOR = 16
INNER_OUTER_INTERPRETER_PROGRAMS = 3
# software-pipelining stages of the inner-outer kernel's loop over rows: the loads of the next
# rows are in flight while this row is computed. On the H200 (benchmarks/sweep_inner_outer.py,
# 8 warps, 2 programs a multiprocessor) 3 stages took the bf16 RMSNorm / LayerNorm backward from
# 0.58 / 0.50 of copy to 0.87 / 0.73 at 16384x4096 (2 stages: 0.67 / 0.58). Each stage holds a
# row block of every row-and-column input in shared memory, so fewer stages are used where the
# programs of a multiprocessor would not fit SHARED_MEMORY_BUDGET.
INNER_OUTER_STAGES = 3
# Rows beyond INNER_OUTER_MAX_PERSISTENT run as the shared-row kernel (below) where it applies,
# else as the two-kernel form (row kernel, column kernel).
# A one-kernel looped form was measured against it on the H200 (2026-11-30: programs looping
# over rows and, in each, over chunks of 2048-8192 columns, reduction passes then an output pass
# adding column terms into a per-program workspace row in L2; 8-16 warps, 1-4 programs a
# multiprocessor, 1-3 pipelining stages): at best 0.37 / 0.20 of copy for the rmsnorm / layernorm
# backward definitions at 4096x32768 against 0.40 / 0.28 for two kernels. A row's passes are
# serial (each ends in a reduction) and a few programs a multiprocessor keep too few loads in
# flight; the two-kernel form's one program a row hides that latency.
SHARED_MEMORY_BUDGET = 200 * 1024  # bytes a multiprocessor (the H100/H200 have 227 KiB)
# Rows beyond INNER_OUTER_MAX_PERSISTENT whose staged inputs fit shared memory run as one Gluon
# kernel holding the row there (codegen/shared_row.py) on Hopper GPUs. On the H200
# (benchmarks/sweep_norm_bwd_gluon.py, 2026-12-02) the bf16 RMSNorm backward at 4096x32768 read
# 0.76-0.80 of copy on 8-32 warps and 4-8 elements a thread, against 0.54 for the best one-kernel
# `tl` form and 0.44 for two kernels. Each column reduction holds CHUNKS * per-thread fp32 values
# a thread in registers, at most SHARED_ROW_ACCUMULATOR_SHARE of the registers a thread may have
# at that many warps (65536 a processor). Each pass over the row is unrolled over its chunks, so
# the chunk count sets the Gluon compile: a kernel of two passes over the row takes the first of
# SHARED_ROW_WARPS whose accumulators fit and whose passes unroll at most SHARED_ROW_MAX_CHUNKS
# chunks, else (and a kernel of three passes always) the first whose accumulators fit. On the
# H200 (twenty-fourth session, bf16, 4096 rows) the RMSNorm backward at 32768 columns (two
# passes) ran as fast on 32 warps as on 16 (jit 239.2-243.8 us against 237.9-243.6, definition
# 242.8-247.8 against 244.2-250.8) with 8 chunks instead of 16, its definition's backward
# fusion's cold first execute 699 ms against 1484; at 20480 columns 32 warps were 2% slower
# (166.8-167.6 us against 163.9-164.0). The LayerNorm backward definition's kept kernel (three
# passes: mean and rstd recomputed) took 396.0-397.7 us on 32 warps against 386.1-388.9 at 32768
# columns (its fusion's cold first execute 1669 ms against 2270), 333 against 251 at 18432
# (4.5 chunks of 4096). A LayerNorm backward's two sums (dw, db) at 32768 columns fit neither
# (128 registers at 16 warps) and take the pair form below.
SHARED_ROW_WARPS = (16, 32)
SHARED_ROW_MAX_CHUNKS = 12
SHARED_ROW_VECTOR_BYTES = 8  # a thread's contiguous bytes a chunk (4 bf16 won by a hair over 8)
SHARED_ROW_ACCUMULATOR_SHARE = 0.5
REGISTERS_PER_PROCESSOR = 65536


def shared_row_accumulators(warps: int) -> int:
    """The most fp32 column accumulators a thread of a shared-row kernel of `warps` may hold."""
    return int(REGISTERS_PER_PROCESSOR // (32 * warps) * SHARED_ROW_ACCUMULATOR_SHARE)


# copy schedules of the shared-row kernel that the launch times against its plain one (no chunk
# held twice, one chunk a barrier), as pairs (hold the first chunks twice, as many as shared
# memory allows; chunks that one first-pass wait or last-pass round of copies covers). Each wait
# or round puts a barrier of all 16 warps: 34 a row at 32768 columns with 1 chunk and 18 with 2
# (the RMSNorm backward, sm_90 SASS). On the H200 (two runs of
# 2026-12-02, four kernels each, the four schedules of (False, True) x (1, 2)) the plain one was
# within 1% of the fastest every time and the fastest 7 times of 8, while each other schedule
# cost the first call a Gluon compile of seconds: only it is kept (docs/performance-history.md)
SHARED_ROW_SCHEDULES: tuple[tuple[bool, int], ...] = ((False, 1),)
# Where one program's column accumulators would not fit (the LayerNorm backward's dw and db),
# each row is split over a pair of programs of SHARED_ROW_PAIR_WARPS exchanging their partial row sums
# (codegen/shared_row_pair.py): three rows' halves of x and dy in shared memory (224 KiB of the
# H200's 227 at 32768 bf16 columns), 16 bytes a thread a chunk (a hand-written form of it read
# 0.72 of copy at 8 bf16 a thread and 16 warps, 0.64-0.65 at 4; docs/performance-history.md, fifteenth
# session); half as many where a half row is no whole number of 16-byte chunks (20480 and 28672
# columns), still above db apart's 0.55-0.60 as a probe
SHARED_ROW_PAIR_VECTOR_BYTES = 16
SHARED_ROW_PAIR_WARPS = 16  # (on 32 warps it read 347.7-354.9 us against 276.4, twenty-second session)
SHARED_ROW_PAIR_BUFFERS = 3
# of a block's shared memory, for the reductions' scratch (the RMSNorm backward's kernel at 32768
# columns takes 64 bytes, compiled for sm_90)
SHARED_ROW_RESERVED_BYTES = 1024


@dataclass(frozen=True)
class LaunchParams:
    block0: int
    block1: int
    persistent: bool
    num_warps: int
    grid: int


# A pointwise kernel over rows whose starts are not 16-byte aligned takes one chunk of a row a
# program (codegen/kernel.py write_aligned_pointwise) where its rows have this many columns or
# more: shorter rows keep several rows a program (a chunk a row would be mostly masked).
ALIGNED_TILE_MIN_COLS = 8192


def aligned_tile(rows: int, cols: int, align: int) -> Optional[LaunchParams]:
    """One chunk of POINTWISE_TILE columns of one row a program, enough chunks a row for a row
    that starts up to `align` - 1 columns past an aligned address; None for short rows."""
    if cols < ALIGNED_TILE_MIN_COLS:
        return None
    return LaunchParams(1, POINTWISE_TILE, True, _warps(POINTWISE_TILE), rows * -(-(cols + align - 1) // POINTWISE_TILE))


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _warps(elements: int) -> int:
    """About 16 elements a thread (two 16-byte vectors of bf16), from 1 to 32 warps."""
    return max(1, min(32, elements // 512))


# A persistent inner reduction over short rows (a row block of SHORT_ROW_MIN_BLOCK to
# SHORT_ROW_MAX_BLOCK columns: rows of 513 to 2048) gives a thread SHORT_ROW_ELEMENTS_PER_THREAD
# elements, in a tile of half TILE_ELEMENTS (blocks up to SHORT_ROW_TILE_MAX_BLOCK) or
# TILE_ELEMENTS. On the H200 (2026-12-04, bf16, L2 flushed; softmax / layernorm / rmsnorm
# forward) the tile of 4096 on 8 warps read 0.58 / 0.55 / 0.65 of copy at 16384x768, 0.68 /
# 0.63 / 0.76 at 32768x768 and 0.78 / 0.73 / 0.82 at 16384x1600; 4096 on 4 warps 0.66 / 0.62 /
# 0.69, 0.79 / 0.78 / 0.83 and 0.80 / 0.80 / 0.81; 2048 on 2 warps (2 rows of 768) 0.67 / 0.66 /
# 0.69 and 0.78 / 0.80 / 0.83, and a probe of the layernorm later 0.66 / 0.79 against 0.65 /
# 0.78 on the 4096 tile; at 1600 and 2048 columns the 2048 tile (1 row, 2 warps) lost the
# layernorm (0.75 against 0.80 at 1600). Every other tile and warp count tried was within
# 0.02-0.04 or slower. Shorter rows (untimed) and rows from 4096 columns (0.94-0.95 at
# 16384x4096) keep 16 elements a thread in a tile of TILE_ELEMENTS. At 768 columns the block of
# 2 rows takes the inline variance's sums of x and x^2 (codegen/reductions.py
# VAR_SUMS_MAX_ROWS), which the figures above include; the two-pass form read 1-2% faster there
# in one probe (docs/performance-history.md, thirty-third session).
SHORT_ROW_MIN_BLOCK, SHORT_ROW_MAX_BLOCK = 1024, 2048
SHORT_ROW_ELEMENTS_PER_THREAD = 32
SHORT_ROW_TILE_MAX_BLOCK = 1024


def _persistent_row_block(rows: int, cols: int) -> LaunchParams:
    """One program a block of whole rows (the persistent inner reduction)."""
    b1 = next_pow2(cols)
    short = SHORT_ROW_MIN_BLOCK <= b1 <= SHORT_ROW_MAX_BLOCK
    tile = TILE_ELEMENTS // 2 if short and b1 <= SHORT_ROW_TILE_MAX_BLOCK else TILE_ELEMENTS
    b0 = max(1, min(next_pow2(rows), tile // b1))
    if short:
        warps = max(1, min(32, b0 * b1 // (32 * SHORT_ROW_ELEMENTS_PER_THREAD)))
    else:
        warps = _warps(b0 * b1)
    return LaunchParams(b0, b1, True, warps, -(-rows // b0))


def choose(template: Template, rows: int, cols: int, row_broadcast: bool = False) -> LaunchParams:
    """rows: product of tile dim 0 extents; cols: of tile dim 1. `row_broadcast`: a pointwise
    kernel reads an input broadcast along its rows (see ROW_BROADCAST_TILE)."""
    if template is Template.pointwise:
        # (fewer rows than the tall tile's: a narrower tile, no more reuse)
        tall = row_broadcast and rows >= ROW_BROADCAST_TILE[0]
        width, elements = (ROW_BROADCAST_TILE[1], math.prod(ROW_BROADCAST_TILE)) if tall else (1024, POINTWISE_TILE)
        b1 = min(next_pow2(cols), width)
        b0 = max(1, min(next_pow2(rows), elements // b1))
        grid = -(-rows // b0) * -(-cols // b1)
        return LaunchParams(b0, b1, True, _warps(b0 * b1), grid)
    if template is Template.inner_reduction:
        if next_pow2(cols) <= MAX_PERSISTENT:
            return _persistent_row_block(rows, cols)
        return looped_inner(rows)
    if template is Template.inner_outer:
        # grid: blocks of rows, the most programs the persistent kernel can use
        if next_pow2(cols) > INNER_OUTER_MAX_PERSISTENT:
            return LaunchParams(1, next_pow2(cols), False, 32, rows)
        b1 = next_pow2(cols)
        b0 = max(1, min(next_pow2(rows), TILE_ELEMENTS // b1))
        return LaunchParams(b0, b1, True, _warps(b0 * b1), -(-rows // b0))
    # outer reduction: programs own columns (128: 256-byte bf16 row segments), loop over rows
    # 32 at a time on 4 warps; on the H200 this beat 64 x 64 on 8 warps by 0.1 to 0.25 of copy
    # bandwidth at 4096 to 32768 columns (benchmarks/sweep_colsum.py)
    b1 = min(next_pow2(cols), 128)
    b0 = max(1, min(next_pow2(rows), TILE_ELEMENTS // b1))
    return LaunchParams(b0, b1, False, max(1, _warps(b0 * b1) // 2), -(-cols // b1))


# the looped inner reduction (rows beyond MAX_PERSISTENT): one program a row, passes over chunks
# of LOOPED_BLOCK columns. On the H200 at 4096x32768 (benchmarks/sweep_inner.py --long, with
# the eviction hints) 16 warps beat 8 on 4096-column chunks: softmax / layernorm / rmsnorm
# forward 0.73 / 0.68 / 0.81 of copy against 0.52 / 0.61 / 0.66.
# As a tuned candidate of the norm backward's row kernel at 4096x32768 (x and dy streamed; H200,
# 2026-12-01) it lost or tied while its loop kept the column masks and its last pass asked L2 to
# drop the weight: rmsnorm 265 us on 32 warps (329 on 16) against the one-pass form's 203,
# layernorm 278 against the persistent kernel's 279. Inductor's looped kernel with coordinate
# descent (4096-column chunks, 32 warps, no masks, a static shape) took 244 us there. Without the
# masks ours took 260 us, and with the row length a constant as well (the loop's trip count
# known to Triton) 250 us in 4096-column chunks and 234 us in 8192-column chunks on 32 warps
# (the generated kernel run by hand with its row length made a constexpr). So rows of
# AUTOTUNE_MIN_COLS or more time looped forms (LOOPED_TUNED_FORMS), their trip count a
# constexpr of the kernel (the row length rounded up to whole chunks, the tail masked: one
# compile per number of chunks, so rows of varying length compile a few kernels, not one a
# length; row counts stay symbolic).
# Rows beyond MAX_PERSISTENT also time 8192-column chunks on 32 warps (LONG_ROW_FORMS): on the
# H200 (2026-12-04, the defaults forced) a softmax at 4096x65536, 8192x40960 and 2048x151936
# read 0.78 / 0.79 / 0.67 of copy that way against 0.68 / 0.75 / 0.64, but the jitted cross
# entropy's forward at 8192x128256 took 1188 us that way against 1116, and a softmax over rows
# of 50257 (aligned rows, codegen/kernel.py) read 0.43 that way against 0.61.
LOOPED_BLOCK, LOOPED_WARPS = 4096, 16
# A looped row reduction's passes that accumulate (with any output they store on the way; not
# the pass that stores the outputs after the reductions) unroll their loop over a row's chunks
# by ROW_PASS_UNROLL (Triton's loop_unroll_factor), so that the loads of several chunks are in
# flight before the first chunk's update waits on its load: one program of 32 warps fills a
# multiprocessor, and a chunk of 8192 bf16 is 16 bytes a thread. On the H200 (2026-12-04, the
# generated LayerNorm forward at 4096x32768 in 8192-column chunks on 32 warps, launched by hand)
# the kernel took 166 us without (0.78 of copy) and 140.7 us with (0.92), as with the Welford
# pass's loop written out; Inductor's kernel of that config, whose loop LLVM unrolled, 137.8 us.
# Unrolling the output pass too changed nothing (docs/performance-history.md, thirty-sixth session).
ROW_PASS_UNROLL = 4
LONG_ROW_FORMS = ((8192, 32),)
# (columns a chunk, warps). 4096-column chunks on 32 warps were timed too until they had won one
# of the 40 kernels timed at 4096x32768 in suite run 25 and at 2048x32768, 8192x16384 and
# 8192x32768 after it, by 0.3% (H200, 2026-12-03; the 8192-column form won 13): each form timed
# costs its compile on a bucket's first call.
LOOPED_TUNED_FORMS = ((8192, 32),)


def looped_inner(rows: int) -> LaunchParams:
    return LaunchParams(1, LOOPED_BLOCK, False, LOOPED_WARPS, rows)


def long_row_forms(params: LaunchParams) -> list[LaunchParams]:
    """Looped forms to time beside the default one for rows beyond MAX_PERSISTENT."""
    if not autotuning():
        return []
    return [replace(params, block1=b, num_warps=w) for b, w in LONG_ROW_FORMS
            if (b, w) != (params.block1, params.num_warps)]


def autotuning() -> bool:
    """Whether launch forms are timed against each other (FUSER_AUTOTUNE=0: the defaults)."""
    return env_switch("FUSER_AUTOTUNE", True)


def looped_forms(params: LaunchParams, rows: int, cols: int) -> list[LaunchParams]:
    """Looped forms to time beside a persistent inner reduction over long rows."""
    if (not params.persistent or params.block0 != 1 or AUTOTUNE_MIN_COLS is None or cols < AUTOTUNE_MIN_COLS
            or not autotuning()):
        return []
    return [replace(looped_inner(rows), block1=b, num_warps=w) for b, w in LOOPED_TUNED_FORMS]


# programs per processor a split column reduction aims for (2 and 8 were slower on the H200)
SPLIT_PROGRAMS_PER_PROCESSOR = 4


# A reduction over a whole tensor (an fp8 amax, a loss, a gradient norm), or over a few long
# rows, has one program a row: one processor of the GPU streams the tensor. Rows of
# INNER_SPLIT_MIN_COLS or more, fewer than INNER_UNSPLIT_ROWS_PER_PROCESSOR a processor, are
# split into chunks of at least INNER_SPLIT_MIN_CHUNK columns (whole blocks of INNER_SPLIT_BLOCK
# on INNER_SPLIT_WARPS), enough programs for INNER_SPLIT_PROGRAMS_PER_PROCESSOR a processor; the
# last program of a row combines the chunks' partials (codegen/split_kernel.py). Shorter rows
# are latency-bound either way. On the H200 (2026-12-01, benchmarks/sweep_inner_split.py,
# kernel time with L2 flushed) this took a bf16 amax over 8192x8192 from 0.01 to 0.76 of copy,
# an fp32 sum of squares over 4096x16384 from 0.02 to 0.90, bf16 sums of 16 rows of 4M from
# 0.15 to 0.71 and of 128 rows of 256K from 0.57 to 0.61; 512 rows of 64K lost split (0.70
# unsplit, 0.58-0.62 in 2 chunks). Blocks of 1024-2048 columns on 4-8 warps, 4-16 programs a
# processor and 2-8 blocks a chunk were within 0.05 of this everywhere. Chunks of one block
# (four before) give a few rows of a vocabulary programs enough: softmax over 1 / 8 rows of
# 128256 bf16 8.5 / 10.1 -> 6.2 / 7.5 us, logsumexp 7.3 / 8.1 -> 4.7 / 5.9 us (torch.compile 8.2
# / 9.5 and 6.8 / 6.5; H200, 2026-12-01, benchmarks/few_long_rows.py); 64 rows are unchanged.
INNER_SPLIT_MIN_COLS = 65536
INNER_SPLIT_BLOCK, INNER_SPLIT_WARPS = 4096, 16
INNER_SPLIT_MIN_CHUNK = INNER_SPLIT_BLOCK
INNER_SPLIT_PROGRAMS_PER_PROCESSOR = 4
INNER_UNSPLIT_ROWS_PER_PROCESSOR = 2


def inner_split(rows: int, cols: int, processors: int) -> tuple[LaunchParams, int]:
    """(launch parameters, chunks a row) of a split inner reduction; 1 chunk: no split."""
    params = LaunchParams(1, INNER_SPLIT_BLOCK, False, INNER_SPLIT_WARPS, rows)
    if processors == 0 or cols < INNER_SPLIT_MIN_COLS or rows >= INNER_UNSPLIT_ROWS_PER_PROCESSOR * processors:
        return params, 1
    target = INNER_SPLIT_PROGRAMS_PER_PROCESSOR * processors
    return params, max(1, min(-(-target // rows), cols // INNER_SPLIT_MIN_CHUNK))


# An outer reduction with a program a column block for every multiprocessor or more is also
# timed unsplit, in the tiles of OUTER_TUNED_TILES (the split form's chunks of rows add programs
# and a combine it may not need). Inductor with coordinate descent took the LayerNorm backward's
# column sums at 4096x32768 in 139 us with one program of 16 warps a 128-column block over all
# rows, against 155 us for our split kernel of 4 warps (H200, 2026-12-01); its column sum there
# loops over the rows in tiles of 128 rows by 64 columns on 8 warps, which read 0.870-0.877 of
# copy in fuser's generator against 0.862-0.868 for 32 x 128 on 16 warps and 0.764 for 32 x 128
# on 8 (H200, 2026-12-03; 8 warps had won no kernel in run 25).
OUTER_TUNED_TILES = ((32, 128, 16), (128, 64, 8))  # (rows, columns, warps)


def outer_forms(params: LaunchParams, processors: int, cols: int) -> list[LaunchParams]:
    """Unsplit forms to time beside the split form of an outer reduction over `cols` columns
    (none: not tuned); each has a program a column block of its tile."""
    if processors == 0 or params.grid < processors or not autotuning():
        return []
    return [replace(params, block0=b0, block1=b1, num_warps=w, grid=-(-cols // b1))
            for b0, b1, w in OUTER_TUNED_TILES if b1 <= params.block1]


# An outer reduction that also stores an output of its rows in its pass (an activation's
# gradient beside its bias gradient; codegen/reductions.py) holds that output's computation for
# every element of its tile: 8 rows of 128 columns on 4 warps (8 elements a thread, where the
# plain column sum keeps 32) and 8 programs a processor when split. On the H200 (2026-12-01,
# the tanh GELU's gradient and its column sums, bf16, fuser_defs.gelu_dx_bias_grad) this took
# 16384x4096 and 65536x1024 from 0.40 to 0.70 of copy and 4096x4096 from 0.34 to 0.56; the
# column sum alone was slower with it (0.67 -> 0.57 at 16384x4096).
OUTER_STORING_ROWS = 8
OUTER_STORING_PROGRAMS_PER_PROCESSOR = 8


def outer_storing(params: LaunchParams) -> LaunchParams:
    """The launch of an outer reduction that stores rows in its pass (see OUTER_STORING_ROWS)."""
    return replace(params, block0=min(params.block0, OUTER_STORING_ROWS), num_warps=min(params.num_warps, 4))


def split_count(params: LaunchParams, rows: int, processors: int,
                per_processor: int = SPLIT_PROGRAMS_PER_PROCESSOR) -> int:
    """Chunks of rows for a split outer reduction: enough programs for `per_processor` a
    processor, each chunk at least one block of rows (1: no split)."""
    target = per_processor * processors
    if params.grid >= target or processors == 0:
        return 1
    wanted = -(-target // params.grid)
    return max(1, min(wanted, rows // params.block0))


def _row_loop_programs(params: LaunchParams, processors: int, per_processor: int) -> int:
    """Programs of a kernel looping over row blocks: `per_processor` a multiprocessor (on the
    interpreter, which has none, a few), never more than blocks of rows."""
    wanted = processors * per_processor if processors else INNER_OUTER_INTERPRETER_PROGRAMS
    return max(1, min(wanted, params.grid))


def _inner_outer_per_processor(params: LaunchParams) -> int:
    return max(1, INNER_OUTER_WARPS_PER_PROCESSOR // params.num_warps)


def inner_outer_programs(params: LaunchParams, processors: int) -> int:
    """Programs of the persistent inner-outer kernel (and rows of its workspace): as many as
    fit the processors at once."""
    return _row_loop_programs(params, processors, _inner_outer_per_processor(params))


def loop_stages(params: LaunchParams, tile_bytes_per_element: int, per_processor: int, most: int) -> int:
    """Pipelining stages of a loop over row blocks: at most `most`, as many as keep one row
    block of the tile inputs (`tile_bytes_per_element`: their summed element sizes) per stage
    within the shared memory of the `per_processor` programs that share a multiprocessor."""
    stage_bytes = params.block0 * params.block1 * tile_bytes_per_element * per_processor
    stages = most
    while stages > 1 and stages * stage_bytes > SHARED_MEMORY_BUDGET:
        stages -= 1
    return stages


def inner_outer_stages(params: LaunchParams, tile_bytes_per_element: int) -> int:
    """Pipelining stages of the inner-outer row loop (at most INNER_OUTER_STAGES)."""
    return loop_stages(params, tile_bytes_per_element, _inner_outer_per_processor(params), INNER_OUTER_STAGES)


# An inner reduction whose rows fit registers can also run as a persistent kernel looping over
# row blocks (codegen/inner_outer.py RowLoopWriter), its loop pipelined so that a program's next
# rows load while this row reduces: one program a row block leaves a multiprocessor idle
# between loading a row and storing it when only one program fits (32 warps at 32768 columns).
# ROW_LOOP_MIN_COLS: the shortest rows that use it (None: never), from benchmarks/sweep_inner.py.
# The sweep found one winner, softmax forward at 32768 columns (0.88 of copy against 0.73, one
# program a multiprocessor, 3 stages), while layernorm and rmsnorm lost there: which form wins
# depends on the kernel, so rows of AUTOTUNE_MIN_COLS or more time both forms once per bucket
# (codegen/autotune.py; FUSER_AUTOTUNE=0 turns it off) and shorter rows keep one program a row
# block, which won every configuration at 4096 and 8192 columns. The looped kernel lost to the
# persistent one at 32768 columns in every configuration, eviction hints included (softmax /
# layernorm / rmsnorm at best 0.73 / 0.68 / 0.81 of copy against 0.73 / 0.76 / 0.91), so it is
# no candidate there.
ROW_LOOP_MIN_COLS = None
ROW_LOOP_PROGRAMS_PER_PROCESSOR = 1
ROW_LOOP_STAGES = 3
AUTOTUNE_MIN_COLS = 16384


# The persistent kernel's warps: _warps gives about 16 elements a thread, but on the H200
# (benchmarks/sweep_inner.py --persistent, 2026-11-30) the best count at 8192 columns depends on
# the kernel: layernorm forward 0.95 of copy on 4 warps against 0.87 on 16, softmax 0.97 on 16
# against 0.81 on 4, rmsnorm 0.95 on either (at 4096 columns 4 and 8 warps tie; at 32768, 32 won
# every kernel). Rows of AUTOTUNE_WARPS_MIN_COLS or more also time fewer warps once per bucket,
# down to 4 warps and up to MAX_TUNED_ELEMENTS_PER_THREAD elements a thread.
AUTOTUNE_WARPS_MIN_COLS = 8192
MAX_TUNED_ELEMENTS_PER_THREAD = 64


def tuned_warps(params: LaunchParams, cols: int) -> list[int]:
    """Warp counts besides the default to time for a persistent inner reduction."""
    if (not params.persistent or AUTOTUNE_WARPS_MIN_COLS is None or cols < AUTOTUNE_WARPS_MIN_COLS
            or not autotuning()):
        return []
    found, warps = [], params.num_warps // 2
    while warps >= 4 and params.block0 * params.block1 // (32 * warps) <= MAX_TUNED_ELEMENTS_PER_THREAD:
        found.append(warps)
        warps //= 2
    return found


def row_loop(params: LaunchParams, cols: int) -> bool:
    return params.persistent and ROW_LOOP_MIN_COLS is not None and cols >= ROW_LOOP_MIN_COLS


def autotune_row_loop(params: LaunchParams, cols: int) -> bool:
    return (params.persistent and ROW_LOOP_MIN_COLS is None and AUTOTUNE_MIN_COLS is not None
            and cols >= AUTOTUNE_MIN_COLS and autotuning())


def row_loop_programs(params: LaunchParams, processors: int) -> int:
    return _row_loop_programs(params, processors, ROW_LOOP_PROGRAMS_PER_PROCESSOR)


def row_loop_stages(params: LaunchParams, tile_bytes_per_element: int) -> int:
    return loop_stages(params, tile_bytes_per_element, ROW_LOOP_PROGRAMS_PER_PROCESSOR, ROW_LOOP_STAGES)


COMBINE_MIN_COLS = 16  # the fewest columns a combine program takes
# Two combine programs a processor: a hand-written combine of one program an output and 128
# columns (512 programs) took 5.4 us at 32768 columns on the H200 where the generated one, 256
# programs of 128 columns, took 8.6 (the forty-fifth session's record).
COMBINE_PROGRAMS_PER_PROCESSOR = 2


def inner_outer_combine(cols: int, programs: int, processors: int = 0) -> LaunchParams:
    """The combine step of an inner-outer kernel: programs own columns and sum the partial rows.
    Columns are split finely enough for COMBINE_PROGRAMS_PER_PROCESSOR programs a processor
    (down to COMBINE_MIN_COLS): with 128 columns a program, the layernorm backward's combine at
    16384x4096 ran 32 programs over 264 partial rows and took 10.5 us beside the 99.5 us row
    kernel (H200, 2026-12-01)."""
    b1 = min(next_pow2(cols), 128)
    while b1 > COMBINE_MIN_COLS and -(-cols // b1) < COMBINE_PROGRAMS_PER_PROCESSOR * processors:
        b1 //= 2
    b0 = max(1, min(next_pow2(programs), TILE_ELEMENTS // b1))
    return LaunchParams(b0, b1, False, _warps(b0 * b1), -(-cols // b1))


# The one-pass form of an inner reduction (codegen/kernel.py, `one_pass`): the looped kernel
# with the whole row as its chunk, so that each pass runs once and the passes after the first
# read the row again, from L1 / L2, instead of holding it in registers across the reduction;
# tile dims the blocks divide carry no masks. Written by hand on the H200 (2026-11-30, bf16
# rmsnorm forward), it beat the persistent kernel: 1.00 of copy against 0.96 at 16384x8192 on
# 8 warps, 0.94 against 0.91 at 16384x4096 on 4 or 8, 0.97 against 0.90 at 4096x32768 on 8 or
# 32 (Inductor's choice there). Rows of RELOAD_MIN_COLS or more time it beside the persistent
# forms, on the warps that give a thread about 16 and 32 elements of the row, and from 16384
# columns also 128 (8 warps at 32768, which tied 32 on the hand-written kernel and leaves the
# cross-warp steps of a reduction fewer warps to combine). The 32 warps at 32768 columns won none
# of the ten kernels timed at 4096x32768 in suite run 25, but five of ten at 8192x32768 (one by
# 5% over the next form) and one at 2048x32768 (H200, 2026-12-03): they stay.
RELOAD_MIN_COLS = 4096
RELOAD_ELEMENTS_PER_THREAD = (16, 32)
RELOAD_LONG_ROW_ELEMENTS_PER_THREAD = 128


def reload_warps(params: LaunchParams, cols: int) -> list[int]:
    """Warp counts of the one-pass form to time for a persistent inner reduction (none: not a
    candidate)."""
    if (not params.persistent or params.block0 != 1 or RELOAD_MIN_COLS is None or cols < RELOAD_MIN_COLS
            or not autotuning()):
        return []
    per_thread = RELOAD_ELEMENTS_PER_THREAD + ((RELOAD_LONG_ROW_ELEMENTS_PER_THREAD,) if cols >= 16384 else ())
    return sorted({max(4, min(32, params.block1 // (32 * n))) for n in per_thread})


# From RELOAD_TWO_ROWS_MIN_COLS columns (None: never) the one-pass form is also timed with two
# rows a program (a [2, columns] tile, 64 elements a thread: 32 warps at 32768 columns). Written
# by hand on the H200 (benchmarks/sweep_wide_rows.py, 2026-12-01), the bf16 LayerNorm forward at
# 4096x32768 read 0.96 of copy so, against 0.77-0.80 with one row a program (whose load,
# cross-warp reduction and store leave the memory idle between rows while one program fills a
# multiprocessor) and 0.76 with the two rows held in registers instead of re-read. Since the
# looped forms with a constant row length are timed too, it won none of the 40 kernels timed at
# 4096x32768 in suite run 25 and at 2048x32768, 8192x16384 and 8192x32768 after it (H200,
# 2026-12-03), so it is timed no more.
RELOAD_TWO_ROWS_MIN_COLS = None
RELOAD_TWO_ROWS_ELEMENTS_PER_THREAD = 64


def reload_forms(params: LaunchParams, rows: int, cols: int) -> list[tuple[int, int]]:
    """(rows a program, warps) of the one-pass forms to time for a persistent inner reduction."""
    warps = reload_warps(params, cols)
    forms = [(1, w) for w in warps]
    if warps and rows >= 2 and RELOAD_TWO_ROWS_MIN_COLS is not None and cols >= RELOAD_TWO_ROWS_MIN_COLS:
        forms.append((2, max(4, min(32, 2 * params.block1 // (32 * RELOAD_TWO_ROWS_ELEMENTS_PER_THREAD)))))
    return forms

"""Pointwise kernels that read a vector along their columns (a bias, a norm's weight, a column
statistic) take tiles of heuristics.ROW_BROADCAST_TILE rows, so that a program loads its slice of
the vector once for many rows; others keep the default tile. Results match eager on shapes the
tile divides in neither dim."""
import pytest
import torch
import torch.nn.functional as F

from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.codegen.layout import Layout, row_broadcast
from fuser.schedulers import heuristics
from fuser.schedulers.plan import Template

ROWS, COLS = heuristics.ROW_BROADCAST_TILE


def _launch(fd):
    """The prepared launch of `fd`'s one kernel segment at its one call signature."""
    (runtime,) = fd._cache.runtimes()
    (launcher,) = runtime.launchers.values()
    (made,) = launcher.launches.values()
    return made


def _blocks(fd) -> list[tuple[int, int, int]]:
    """(BLOCK0, BLOCK1, warps) of each step of `fd`'s launch."""
    return [(s.kwargs["BLOCK0"], s.kwargs["BLOCK1"], s.kwargs["num_warps"]) for s, _, _ in _launch(fd).steps]


def _bias_gelu(bias_dims):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True, dtype=DataType.BFloat16)
        b = fd.define_tensor([-1] * len(bias_dims), contiguity=True, dtype=DataType.BFloat16)
        bb = fd.ops.broadcast_in_dim(b, x.shape(), bias_dims)
        y = fd.ops.add(fd.ops.cast(x, DataType.Float), fd.ops.cast(bb, DataType.Float))
        fd.add_output(fd.ops.cast(fd.ops.tanh(y), DataType.BFloat16))
    return fd


@pytest.mark.parametrize("shape", [(3, 45, 300), (2, 17, 1000), (1, 1, 77)])
def test_a_bias_along_the_columns_takes_the_tall_tile(shape):
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=gen).bfloat16()
    b = torch.randn(shape[-1], generator=gen).bfloat16()
    fd = _bias_gelu([2])
    (y,) = fd.execute([x, b])
    torch.testing.assert_close(y, torch.tanh(x.float() + b.float()).bfloat16(), rtol=2e-2, atol=2e-2)
    rows, cols = shape[0] * shape[1], shape[2]
    want = heuristics.choose(Template.pointwise, rows, cols, row_broadcast=rows > 1)
    assert _blocks(fd) == [(want.block0, want.block1, want.num_warps)]
    if rows >= ROWS:  # (the vector loaded once for 32 rows, 16 elements a thread)
        assert want.block1 == min(COLS, heuristics.next_pow2(cols)) and want.block0 * want.block1 <= ROWS * COLS
        assert want.block0 >= min(ROWS, heuristics.next_pow2(rows))
        assert want.num_warps == max(1, want.block0 * want.block1 // 512)


def test_a_vector_along_the_rows_keeps_the_default_tile():
    """A per-row scale (broadcast along the columns) is read once a row by any tile."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        s = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.mul(fd.ops.cast(x, DataType.Float), fd.ops.broadcast_in_dim(s, x.shape(), [0]))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    gen = torch.Generator().manual_seed(5)
    x, s = torch.randn(90, 600, generator=gen).bfloat16(), torch.randn(90, generator=gen)
    (y,) = fd.execute([x, s])
    torch.testing.assert_close(y, (x.float() * s[:, None]).bfloat16(), rtol=2e-2, atol=2e-2)
    assert _blocks(fd) == [(2, 1024, 4)]  # the default tile: POINTWISE_TILE over rows of 1024


def test_the_batch_norm_rows_kernel_takes_the_tall_tile(monkeypatch):
    """The readers kernel of the statistics form (the column mean and variance, then the rows
    that read them: schedulers/plan.py StatisticsParts), split where there are processors."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        xf = fd.ops.cast(x, DataType.Float)
        var, mean = fd.ops.var_mean(xf, [0], correction=0)
        shape = x.shape()
        centered = fd.ops.sub(xf, fd.ops.broadcast_in_dim(mean, shape, [1]))
        rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
        y = fd.ops.mul(fd.ops.mul(centered, fd.ops.broadcast_in_dim(rstd, shape, [1])),
                       fd.ops.broadcast_in_dim(w, shape, [1]))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
    gen = torch.Generator().manual_seed(11)
    x, w = (torch.randn(700, 130, generator=gen) * 3 + 5).bfloat16(), torch.randn(130, generator=gen)
    (y,) = fd.execute([x, w])
    var, mean = torch.var_mean(x.float(), 0, correction=0)
    torch.testing.assert_close(y, ((x.float() - mean) * torch.rsqrt(var + 1e-5) * w).bfloat16(), rtol=2e-2, atol=2e-2)
    code = fd.last_triton_code()
    assert "statistics" in code and "rows_tile" in code, code
    readers = _launch(fd).second_launch  # (the statistics, then the rows)
    assert [(s.kwargs["BLOCK0"], s.kwargs["BLOCK1"]) for s, _, _ in readers.steps] == [(ROWS, COLS)]


def test_row_broadcast_reads_the_innermost_row_run():
    extents = [4, 6, 8]
    layout = Layout(((0, 1),), ((2,),))
    x, bias, scale = [48, 8, 1], [0, 0, 1], [6, 1, 0]
    assert row_broadcast(layout, [x, bias], extents)
    assert not row_broadcast(layout, [x, scale], extents)  # varies along the rows
    assert not row_broadcast(layout, [x, [0, 0, 0]], extents)  # a scalar: nothing along the columns
    assert not row_broadcast(layout, [x, bias], [1, 1, 8])  # one row: no reuse
    assert not row_broadcast(Layout((), ((0, 1, 2),)), [x], extents)


def test_choose_keeps_the_default_tile_without_a_row_broadcast():
    assert heuristics.choose(Template.pointwise, 16384, 16384) == heuristics.LaunchParams(2, 1024, True, 4, 8192 * 16)
    tall = heuristics.choose(Template.pointwise, 16384, 16384, row_broadcast=True)
    assert tall == heuristics.LaunchParams(ROWS, COLS, True, 8, 16384 // ROWS * 16384 // COLS)
    narrow = heuristics.choose(Template.pointwise, 1000, 24, row_broadcast=True)  # (4096 elements)
    assert (narrow.block0, narrow.block1) == (128, 32)
    # fewer rows than the tall tile's: the default tile (a tall one would only be narrower)
    few = heuristics.choose(Template.pointwise, 8, 65536, row_broadcast=True)
    assert few == heuristics.choose(Template.pointwise, 8, 65536) == heuristics.LaunchParams(2, 1024, True, 4, 4 * 64)


def test_torch_functional_bias_matches_eager():
    """Through fuser.jit: GELU of x + bias over [rows, cols] the tile divides in neither dim."""
    import fuser
    fn = fuser.jit(lambda x, b: F.gelu(x + b, approximate="tanh"))
    gen = torch.Generator().manual_seed(2)
    x, b = torch.randn(97, 200, generator=gen).bfloat16(), torch.randn(200, generator=gen).bfloat16()
    torch.testing.assert_close(fn(x, b), F.gelu(x + b, approximate="tanh"), rtol=2e-2, atol=2e-2)

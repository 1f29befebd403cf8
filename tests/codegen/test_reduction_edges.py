"""Reductions at the edges a helper's probe found (forty-ninth session): Welford's combine with
an empty side where the squared difference of means overflows."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import launch


def _column_var_mean(dtype):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=dtype)
        var, mean = fd.ops.var_mean(x, [0], 0)
        fd.add_output(var)
        fd.add_output(mean)
    return fd


@pytest.mark.parametrize("dtype, scale", [(DataType.Float, 2e19), (DataType.Double, 2e154)])
@pytest.mark.parametrize("rows, split", [(33, False), (3000, True)])
def test_var_mean_of_values_past_the_square_root_of_the_largest(dtype, scale, rows, split, monkeypatch):
    # merging a partial with an empty one computed delta * delta * n1 * w = inf * 0: NaN mean
    # and variance (the looped column kernel's masked rows, every split kernel)
    if split:
        monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 4)
    g = torch.Generator().manual_seed(3)
    x = (scale + scale / 2000 * torch.randn(rows, 4, generator=g, dtype=torch.float64)).to(dtype.to_torch())
    var, mean = _column_var_mean(dtype).execute([x])
    ev, em = torch.var_mean(x, 0, correction=0)
    assert torch.isfinite(var).all() and torch.isfinite(mean).all()
    torch.testing.assert_close(mean, em, rtol=1e-5, atol=0)
    torch.testing.assert_close(var, ev, rtol=1e-3, atol=0)


@pytest.mark.parametrize("dtype, scale", [(DataType.Float, 1e38), (DataType.Double, 1e307)])
@pytest.mark.parametrize("rows", [3, 64])  # one row a program's branch, and many rows a tile
def test_row_var_mean_whose_sum_overflows(dtype, scale, rows):
    # the row kernel's mean was the row's sum over n: inf where the sum overflows and the mean
    # does not (values near the type's largest); such a tile now sums x / n
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=dtype)
        var, mean = fd.ops.var_mean(x, [1], 0)
        fd.add_output(var)
        fd.add_output(mean)
    g = torch.Generator().manual_seed(4)
    xs = (scale * (1 + 0.01 * torch.randn(rows, 40, generator=g, dtype=torch.float64))).to(dtype.to_torch())
    xs[0] = torch.randn(40, generator=g, dtype=xs.dtype)  # a row of small values in the same tile
    xs[-1, 5] = float("inf")  # a row holding inf: eager's NaN mean
    got_var, got_mean = fd.execute([xs])
    want_var, want_mean = torch.var_mean(xs, 1, correction=0)
    assert "inner reduction" in fd.last_segments()[0].why
    torch.testing.assert_close(got_mean, want_mean, rtol=1e-5, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(got_var, want_var, rtol=1e-4, atol=1e-5, equal_nan=True)

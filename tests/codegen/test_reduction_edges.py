"""Reductions at the edges a helper's probe found (forty-ninth session): Welford's combine with
an empty side where the squared difference of means overflows, and a reduction a kernel would
have computed again for each element along a loop axis its input does not span."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from tests.helpers import assert_eager


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


def test_a_row_sum_against_another_tensor_is_its_own_kernel():
    # y - x.sum(-1): x's reduced axis and y's columns are no one loop axis, and the kernel had
    # each output element sum its whole row again (R x C x C: 24 s a call at C = 2048 on the CPU)
    def f(x, y):
        return y - x.sum(-1, keepdim=True)
    x, y = torch.randn(4, 512), torch.randn(4, 512)
    report = fuser.explain(f, x, y)
    plans = [line for fusion in report.fusions for code in fusion.triton for line in code.splitlines()
             if line.startswith("# Plan")]
    assert len(plans) == 2 and "inner reduction: tile dim0 [i0] x dim1 [512]" in plans[0], plans
    assert_eager(fuser.jit(f)(x, y), f(x, y))


def test_an_outer_product_with_a_row_sum_is_refused_as_one_kernel():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        v = fd.define_tensor([-1], contiguity=True)
        s = fd.ops.sum(x, [1])
        fd.add_output(fd.ops.mul(fd.ops.broadcast_in_dim(s, [x.size(0), v.size(0)], [0]),
                                 fd.ops.broadcast_in_dim(v, [x.size(0), v.size(0)], [1])))
    x, v = torch.randn(5, 64), torch.randn(7)
    assert_eager(fd.execute([x, v])[0], x.sum(1)[:, None] * v[None, :])
    segments = fd.last_segments()
    assert any("would be computed again along loop axis" in s.why for s in segments), [s.why for s in segments]

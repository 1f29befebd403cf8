"""Review regressions of the kernel plans (schedulers/plan.py) and the inner-outer template
(schedulers/inner_outer.py), against eager PyTorch."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition

F32 = DataType.Float


def test_row_reduction_constant_along_rows_feeding_the_column_reduction(device):
    # sum(w * w) reduces the row's axis but does not vary along rows, so it is no row
    # statistic: the two-kernel form's column kernel computed it, planned as inner-outer again,
    # forever (RecursionError while segmenting). The group is cut instead.
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        w = fd.define_tensor(shape=[1, -1], contiguity=True, dtype=F32)
        dy = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        norm = fd.ops.sum(fd.ops.mul(w, w), [1], True)
        t = fd.ops.mul(fd.ops.mul(dy, x), w)
        fd.add_output(fd.ops.mul(t, norm))
        fd.add_output(fd.ops.sum(fd.ops.mul(t, norm), [0]))
    x, w, dy = (torch.randn(*s, device=device) for s in ((37, 33), (1, 33), (37, 33)))
    a, b = fd.execute([x, w, dy])
    norm = (w * w).sum(1, keepdim=True)
    torch.testing.assert_close(a, dy * x * w * norm, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b, (dy * x * w * norm).sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["sum", "max", "var_mean"])
def test_reduction_over_a_size_1_axis_that_meets_a_loop_axis(op, device):
    # m = sum(x, keepdim) is broadcast along the columns by x - m, so its size-1 axis meets the
    # column axis; a reduction of m over that axis reduces no loop axis, but the kernel reduced
    # the copies of m along the columns (sum: 16 times the value; var: 0 instead of NaN)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        m = fd.ops.broadcast_in_dim(fd.ops.sum(x, [1]), [x.shape()[0], 1], [0])
        fd.add_output(fd.ops.sub(x, m))
        r = fd.ops.var_mean(m, [1], 1)[0] if op == "var_mean" else getattr(fd.ops, op)(m, [1])
        fd.add_output(fd.ops.mul(fd.ops.broadcast_in_dim(r, [x.shape()[0], 1], [0]), x))
    x = torch.randn(5, 16, device=device)
    centered, out = fd.execute([x])
    m = x.sum(1, keepdim=True)
    r = torch.var(m, 1, correction=1, keepdim=True) if op == "var_mean" else getattr(torch, "amax" if op == "max" else op)(
        m, 1, keepdim=True)
    torch.testing.assert_close(centered, x - m, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, r * x, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_jit_sum_of_a_keepdim_mean():
    def f(x):
        m = x.mean(-1, keepdim=True)
        return x - m, m.sum(-1) * 2, torch.var(x.amax(-1, keepdim=True), -1)

    x = torch.randn(5, 16)
    for actual, expected in zip(fuser.jit(f)(x), f(x)):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)

"""An outer reduction whose output along the rows reads a column result (x - mean over rows, a
batch normalization written by hand) cannot split over rows as one kernel; with few column
blocks for the GPU it runs as two (schedulers/plan.py StatisticsParts): the column statistics
split over rows, then a pointwise kernel for the rows."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from tests.helpers import explained_plans


def _kernels(fd) -> list[str]:
    """The plan line of each kernel the last execution launched."""
    return [line for line in fd.last_triton_code().splitlines() if line.startswith("# Plan:")]


def _centered():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        n, c = x.shape()[0], x.shape()[1]
        mean = fd.ops.broadcast_in_dim(fd.ops.div(fd.ops.sum(x, [0]), n), [n, c], [1])
        fd.add_output(fd.ops.sub(x, mean))
    return fd


@pytest.mark.parametrize("processors", [0, 8])
def test_centering_runs_as_statistics_then_rows_when_columns_are_few(monkeypatch, processors):
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", processors)
    fd = _centered()
    a = torch.randn(700, 40, generator=torch.Generator().manual_seed(processors))
    (y,) = fd.execute([a])
    torch.testing.assert_close(y, a - a.mean(0), rtol=1e-5, atol=1e-5)
    plans = _kernels(fd)
    if processors:
        assert len(plans) == 2 and "split" in plans[0] and plans[1].startswith("# Plan: pointwise"), plans
    else:  # no processors to fill: one kernel, two passes
        assert len(plans) == 1 and "looped" in plans[0], plans


def test_batch_norm_by_hand_keeps_its_statistics_outputs(monkeypatch):
    """var_mean over rows (Welford partials across chunks), the normalized rows, and the mean and
    variance as outputs of the statistics kernel; a bf16 output and an fp32 weight and bias."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        n, c = x.shape()[0], x.shape()[1]
        xf = fd.ops.cast(x, DataType.Float)
        var, mean = fd.ops.var_mean(xf, [0], correction=0)
        rstd = fd.ops.rsqrt(fd.ops.add(var, 1e-5))
        row = lambda v: fd.ops.broadcast_in_dim(v, [n, c], [1])  # noqa: E731
        y = fd.ops.add(fd.ops.mul(fd.ops.mul(fd.ops.sub(xf, row(mean)), row(rstd)), row(w)), row(b))
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
        fd.add_output(mean)
        fd.add_output(var)
    gen = torch.Generator().manual_seed(1)
    a = (torch.randn(1000, 72, generator=gen) * 3 + 5).bfloat16()
    wt, bs = torch.randn(72, generator=gen), torch.randn(72, generator=gen)
    y, mean, var = fd.execute([a, wt, bs])
    want_var, want_mean = torch.var_mean(a.float(), 0, correction=0)
    want = torch.nn.functional.batch_norm(a.float(), None, None, wt, bs, training=True, eps=1e-5)
    torch.testing.assert_close(mean, want_mean, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(var, want_var, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=2e-2)
    plans = _kernels(fd)
    assert len(plans) == 2 and "split" in plans[0], plans


def test_an_output_needing_no_statistic_is_stored_by_the_statistics_kernel(monkeypatch):
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        n, c = x.shape()[0], x.shape()[1]
        z = fd.ops.mul(x, 2.0)
        mean = fd.ops.broadcast_in_dim(fd.ops.div(fd.ops.sum(z, [0]), n), [n, c], [1])
        fd.add_output(fd.ops.sub(z, mean))
        fd.add_output(z)
    a = torch.randn(500, 30, generator=torch.Generator().manual_seed(2))
    y, z = fd.execute([a])
    torch.testing.assert_close(z, 2 * a)
    torch.testing.assert_close(y, 2 * a - (2 * a).mean(0), rtol=1e-5, atol=1e-5)
    assert len(_kernels(fd)) == 2
    code = fd.last_triton_code()
    statistics_kernel = code.split("# Plan: pointwise")[0]
    assert "* 2.0" in statistics_kernel and statistics_kernel.count("tl.store(T") >= 2


def test_softmax_over_rows_splits_its_online_statistics(monkeypatch, any_program_order):
    """Its sum reads the max, yet the chunks' (max, sum) pairs combine exactly
    (plan.softmax_pairs): the statistics split over rows, then the rows read them. A column
    holding +inf gives eager's NaN."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        n, c = x.shape()[0], x.shape()[1]
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.broadcast_in_dim(fd.ops.max(x, [0]), [n, c], [1])))
        fd.add_output(fd.ops.div(e, fd.ops.broadcast_in_dim(fd.ops.sum(e, [0]), [n, c], [1])))
    a = torch.randn(300, 20, generator=torch.Generator().manual_seed(3)) * 3
    a[290, 4], a[7, 5] = 60.0, float("inf")
    (y,) = fd.execute([a])
    torch.testing.assert_close(y, torch.softmax(a, 0), rtol=1e-5, atol=1e-6, equal_nan=True)
    assert fd.last_segments()[0].params.statistics is not None
    assert len(_kernels(fd)) == 2


def test_jit_batch_norm_by_hand_forward_and_backward(monkeypatch):
    """A module normalizing over the batch (VICReg-style feature whitening): forward and
    backward through fuser.jit match eager."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)

    class Norm(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(c))

        def forward(self, x):
            centered = x - x.mean(0)
            return centered * torch.rsqrt(centered.pow(2).mean(0) + 1e-5) * self.weight

    gen = torch.Generator().manual_seed(4)
    model = Norm(48)
    x = torch.randn(600, 48, generator=gen, requires_grad=True)
    g = torch.randn(600, 48, generator=gen)
    jitted = fuser.jit(model)
    got = torch.autograd.grad(jitted(x), [x, model.weight], g)
    want = torch.autograd.grad(model(x), [x, model.weight], g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    # the backward sums over rows, views each sum as a vector and expands it over the rows
    # again (a squeeze of the kept axis, broadcast later): still one kernel, the keepdim
    # reduction's axis being the loop axis the expand meets (test_recomputed_reductions.py)
    plans = explained_plans(fuser.explain(model, x), "backward")
    assert len(plans) == 1 and plans[0].startswith("# Plan: outer reduction"), plans


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_split_partials_keep_double_and_int64_exact(monkeypatch, dtype):
    """A split column sum keeps its partials in the accumulator's type (an fp32 workspace
    rounded them: int64 sums of 2000 values up to 1e5 came out wrong), in the plain split and in
    the statistics form."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    dt = {torch.float64: DataType.Double, torch.int64: DataType.Int}[dtype]
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=dt)
        n, c = x.shape()[0], x.shape()[1]
        s = fd.ops.sum(x, [0])
        fd.add_output(fd.ops.sub(x, fd.ops.broadcast_in_dim(s, [n, c], [1])))
        fd.add_output(s)
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(2000, 40, generator=gen, dtype=torch.float64) + 1e6 if dtype == torch.float64 \
        else torch.randint(0, 100000, (2000, 40), generator=gen)
    y, s = fd.execute([a])
    assert len(_kernels(fd)) == 2 and "split" in _kernels(fd)[0]
    torch.testing.assert_close(s, a.sum(0), rtol=1e-14, atol=0)
    torch.testing.assert_close(y, a - a.sum(0), rtol=1e-14, atol=0)

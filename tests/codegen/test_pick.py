"""A gather of one element per row, lowered as the one-hot sum `sum(where(iota == t, v, 0))`,
is read by one load a row (codegen/pick.py), in the looped and the persistent kernels: no
compare, select and add per element of the row. Results as eager's at the row's ends, at
rows not a multiple of the chunk, beside NaN and -0.0, and for an index out of the row."""
import math
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics


def _gather_plus_sum(x, t):
    return x.gather(1, t[:, None]).squeeze(1) * 2.0 + x.sum(1)


def _kernel(fn, *args) -> str:
    code = str(fuser.explain(fn, *args))
    kernels = [k for k in code.split("\ndef fuser_")[1:] if "_hit" in k]
    assert len(kernels) == 1, code
    return kernels[0].split("\ndef ")[0]


@pytest.mark.parametrize("form", ["persistent", "looped"])
def test_a_picked_element_is_one_load_a_row(form, device, monkeypatch):
    if form == "looped":
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    torch._dynamo.reset()  # (the other form's trace of the same code would be served)
    x = torch.randn(7, 203, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0, 202, 5, 100, 64, 31, 7])
    x[2, 9] = math.nan      # another position's NaN: not picked
    x[3, 100] = -0.0        # a picked -0.0 is +0.0 as in the sum
    x, t = x.to(device), t.to(device)
    torch.testing.assert_close(fuser.jit(_gather_plus_sum)(x, t), _gather_plus_sum(x, t), equal_nan=True)
    kernel = _kernel(_gather_plus_sum, x, t)
    # the pick's load reads the row at its index; no position compares with it
    assert re.search(r"tl\.load\(T\d+_ptr \+ T\d+_v\d+_off0 \+ T\d+_v\d+_off1", kernel), kernel
    assert ("for c_start" in kernel) == (form == "looped"), kernel
    assert "1 * idx1" not in kernel, kernel  # (no iota of positions to compare with)


def test_an_index_out_of_the_row_gives_nan_as_before(monkeypatch):
    """The gather's rule makes a pick out of range NaN (eager raises); the load reads nothing
    there."""
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    x = torch.randn(3, 100)
    got = fuser.jit(_gather_plus_sum)(x, torch.tensor([3, 100, -1]))
    assert not math.isnan(got[0]) and math.isnan(got[1]) and math.isnan(got[2])
    torch.testing.assert_close(got[0], _gather_plus_sum(x[:1], torch.tensor([3]))[0])


@pytest.mark.parametrize("form", ["persistent", "looped"])
def test_a_cross_entropy_picks_its_target_logit_by_a_load(form, device, monkeypatch):
    """The target's log-probability, picked from x before the row's max and log-sum are
    subtracted (frontend/rules/shape.py), is x read at the target: its forward's loop holds the
    online softmax alone. bf16 logits with ignored targets, forward and backward as eager's."""
    if form == "looped":
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    torch._dynamo.reset()  # (the other form's trace of the same code would be served)

    def ce(logits, target):
        return F.cross_entropy(logits.float(), target, reduction="none")

    x = (torch.randn(6, 301) * 5).to(device, torch.bfloat16).requires_grad_()
    target = torch.tensor([0, 300, -100, 17, 150, 299], device=device)
    out = fuser.jit(ce)(x, target)
    want = ce(x, target)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    (grad,) = torch.autograd.grad(out.sum(), x)
    (want_grad,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(grad, want_grad, rtol=2e-2, atol=1e-4)
    forward = str(fuser.explain(ce, x, target)).split("backward: ATen graph", 1)[0]
    kernel = [k for k in forward.split("\ndef fuser_")[1:] if "_hit" in k]
    assert len(kernel) == 1 and "1 * idx1" not in kernel[0].split("\ndef ")[0], forward


@pytest.mark.parametrize("positions", [DataType.Int32, DataType.Bool])
def test_positions_cast_to_bool_are_no_pick(positions, monkeypatch):
    """An iota cast to int32 still numbers the positions (a pick); cast to bool it is 0, 1, 1,
    ..., and the sum over the positions equal to 1 is a sum of all but the first."""
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        t = fd.define_tensor([-1, 1], contiguity=True, dtype=positions)
        n = fd.define_scalar(200, dtype=DataType.Int)
        at = fd.ops.broadcast(fd.ops.cast(fd.ops.iota(n, 0, 1, DataType.Int), positions), [True, False])
        fd.add_output(fd.ops.sum(fd.ops.where(fd.ops.eq(at, t), x, 0.0), [1]))
    x = torch.randn(4, 200)
    t = torch.ones(4, 1, dtype=torch.int32 if positions is DataType.Int32 else torch.bool)
    (got,) = fd.execute([x, t])
    want = x[:, 1] if positions is DataType.Int32 else x[:, 1:].sum(1)
    torch.testing.assert_close(got, want)
    assert ("_hit" in fd.last_triton_code()) == (positions is DataType.Int32)


@pytest.mark.parametrize("positions", [DataType.BFloat16, DataType.Half])
def test_floating_positions_are_no_pick(positions, monkeypatch):
    """A bf16 or fp16 iota holds rounded positions past its mantissa (257 is 256 in bf16, 2049
    is 2048 in fp16): the sum over the positions equal to t adds every one that rounds to t, as
    eager's does, and is not read as one load."""
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 512)
    n = 2100
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        t = fd.define_tensor([-1, 1], contiguity=True, dtype=DataType.Int)
        at = fd.ops.broadcast(fd.ops.iota(fd.ops.size(x, 1), 0, 1, positions), [True, False])
        fd.add_output(fd.ops.sum(fd.ops.where(fd.ops.eq(at, t), x, 0.0), [1]))
    x = torch.randn(4, n, generator=torch.Generator().manual_seed(3))
    t = torch.tensor([[257], [259], [2049], [3]])
    (got,) = fd.execute([x, t])
    at = torch.arange(n, dtype=torch.bfloat16 if positions is DataType.BFloat16 else torch.half)
    torch.testing.assert_close(got, torch.where(at[None] == t, x, 0.0).sum(1))
    assert "_hit" not in fd.last_triton_code()


def test_an_integer_gather_out_of_the_row_raises():
    """An integer pick cannot be NaN: the gather runs through ATen, which raises naming it
    (eager raises too), where the one-hot sum read 0 for an index out of range."""
    def f(v, idx):
        return v.gather(1, idx) * 2 + 1

    v = torch.randint(-100, 100, (3, 50))
    idx = torch.tensor([[3], [49], [0]])
    torch.testing.assert_close(fuser.jit(f)(v, idx), f(v, idx))
    with pytest.raises(fuser.FusionInputError, match="gather.*out of bounds"):
        fuser.jit(f)(v, torch.tensor([[3], [50], [-7]]))


def test_a_one_hot_scatter_out_of_the_row_is_nan():
    """`zeros.scatter(1, idx, 1.0)` with an index out of range: eager raises; the fused
    one-hot's row is NaN rather than a row of zeros."""
    def f(x, idx):
        return torch.zeros_like(x).scatter(1, idx, 1.0) * x

    x = torch.randn(3, 50)
    got = fuser.jit(f)(x, torch.tensor([[3], [50], [-1]]))
    torch.testing.assert_close(got[0], f(x[:1], torch.tensor([[3]]))[0])
    assert got[1:].isnan().all()


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_a_cross_entropy_target_out_of_range_gives_a_nan_gradient(reduction):
    """The loss of a target out of range is NaN, and so is its gradient's row (it was a
    finite softmax row, which a training step would have applied)."""
    def ce(x, t):
        return F.cross_entropy(x, t, reduction=reduction)

    x = torch.randn(3, 150).requires_grad_()
    t = torch.tensor([4, 150, 7])
    out = fuser.jit(ce)(x, t)
    (grad,) = torch.autograd.grad(out, x, torch.ones_like(out))
    assert out.isnan().any() and grad[1].isnan().all()
    # (the NaN is of the one-hot's dtype: its selects were fp64 a row and an element)
    assert "float64" not in str(fuser.explain(ce, x, t))
    if reduction == "none":
        good = [0, 2]
        want = torch.autograd.grad(ce(x, torch.tensor([4, 0, 7])), x, torch.tensor([1.0, 0.0, 1.0]))[0]
        torch.testing.assert_close(grad[good], want[good])

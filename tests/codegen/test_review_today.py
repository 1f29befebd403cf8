"""Review of the shared reduction passes and of sibling joins (da19228): a reduction that waits
for another keeps the other out of its pass, a split column reduction of a value constant along
columns combines to one value, and siblings over different rows stay apart."""
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition

F32 = DataType.Float


def test_a_reduction_that_waits_for_another_does_not_redo_it(monkeypatch, device):
    """The explicit variance sum((x - sum(x)) ** 2): its pass began before the pass of sum(x)
    it waits for, took sum(x) as ready, and so accumulated sum(x) a second time in its own
    pass (one more accumulator and one more update per element, for nothing)."""
    monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 32)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        d = fd.ops.sub(x, fd.ops.sum(x, [1], True))
        fd.add_output(fd.ops.sum(fd.ops.mul(d, d), [1], True))
    x = torch.randn(4, 300, device=device)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, ((x - x.sum(1, keepdim=True)) ** 2).sum(1, keepdim=True),
                               rtol=1e-4, atol=1e-2)
    code = fd.last_triton_code()
    accumulators = re.findall(r"(acc\w+) = tl\.full", code)
    assert len(accumulators) == len(set(accumulators)) == 2, code
    assert len(re.findall(r"for c_start in (?:tl\.)?range\(", code)) == 2


def three_level_chain():
    # max(x - mean) waits for the mean; the sum of (x - max) waits for both
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        mean = fd.ops.sum(x, [1], True)
        top = fd.ops.max(fd.ops.sub(x, mean), [1], True)
        fd.add_output(fd.ops.sum(fd.ops.exp(fd.ops.sub(fd.ops.sub(x, mean), top)), [1], True))
    return fd


def test_a_chain_of_waiting_reductions_runs_one_pass_each(monkeypatch, device):
    monkeypatch.setattr(fuser.schedulers.heuristics, "MAX_PERSISTENT", 32)
    fd = three_level_chain()
    x = torch.randn(3, 200, device=device) * 0.1
    (out,) = fd.execute([x])
    c = x - x.sum(1, keepdim=True)
    torch.testing.assert_close(out, (c - c.amax(1, keepdim=True)).exp().sum(1, keepdim=True),
                               rtol=1e-4, atol=1e-4)
    code = fd.last_triton_code()
    accumulators = re.findall(r"(acc\w+) = tl\.full", code)
    assert len(accumulators) == len(set(accumulators)) == 3, code
    assert len(re.findall(r"for c_start in (?:tl\.)?range\(", code)) == 3


@pytest.mark.parametrize("joined", [True, False])
def test_a_split_column_sum_of_a_value_constant_along_columns(monkeypatch, joined):
    """sum over rows of r [n, 1] in a column-reduction kernel: its result is one value, but the
    combine kernel reduced its workspace over all columns, a [1, BLOCK1] value stored through a
    [1, 1] pointer (the interpreter's ValueError; a GPU compile error). `joined`: the two sums
    are siblings that the new sibling join put into one kernel."""
    from fuser.codegen import launch
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 132)  # the GPU's split form
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=F32)
        r = fd.define_tensor([-1, 1], contiguity=True, dtype=F32)
        s = fd.ops.sum(fd.ops.mul(r, 2.0), [0])
        cols = fd.ops.sum(fd.ops.mul(x, r), [0])
        fd.add_output(s)
        fd.add_output(cols if joined else fd.ops.add(cols, s))
    x, r = torch.randn(3000, 7), torch.randn(3000, 1)
    s, cols = fd.execute([x, r])
    torch.testing.assert_close(s, (r * 2).sum(0), rtol=1e-4, atol=1e-3)
    want = (x * r).sum(0)
    torch.testing.assert_close(cols, want if joined else want + (r * 2).sum(0), rtol=1e-4, atol=1e-3)


def test_siblings_over_different_rows_stay_apart(device):
    """sum(x * w, 1) and sum(y * w, 1) share w, but x has n rows and y has m: their union
    iterated n * m rows (R = X0 * X1), computing each output once per row of the other."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=F32)
        y = fd.define_tensor([-1, -1], contiguity=True, dtype=F32)
        w = fd.define_tensor([-1], contiguity=True, dtype=F32)
        fd.add_output(fd.ops.sum(fd.ops.mul(x, w), [1]))
        fd.add_output(fd.ops.sum(fd.ops.mul(y, w), [1]))
    x, y, w = torch.randn(30, 8, device=device), torch.randn(20, 8, device=device), torch.randn(8, device=device)
    a, b = fd.execute([x, y, w])
    torch.testing.assert_close(a, (x * w).sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b, (y * w).sum(1), rtol=1e-5, atol=1e-5)
    assert fd.last_segments() and all(seg.params is not None for seg in fd.last_segments())
    for seg in fd.last_segments():  # each kernel computes each output value once
        plan = seg.params
        kept = set(plan.dim0)
        assert all(kept <= plan.axes.spans(o) for o in plan.outputs), seg.why


def test_column_sums_of_one_input_still_join(device):
    # what the join is for: dw and db of a norm's backward read dy once, in one kernel
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=F32)
        dy = fd.define_tensor([-1, -1], contiguity=True, dtype=F32)
        fd.add_output(fd.ops.sum(fd.ops.mul(dy, x), [0]))
        fd.add_output(fd.ops.sum(dy, [0]))
    x, dy = torch.randn(50, 9, device=device), torch.randn(50, 9, device=device)
    dw, db = fd.execute([x, dy])
    torch.testing.assert_close(dw, (dy * x).sum(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(db, dy.sum(0), rtol=1e-4, atol=1e-4)
    assert len(fd.last_segments()) == 1

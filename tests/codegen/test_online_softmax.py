"""The online softmax pass (codegen/online_softmax.py): a looped kernel computes a row's max and
sum(exp(x - max)) in one pass, so a looped softmax reads its input twice; results match eager,
special values included."""
import math
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.schedulers import heuristics


@pytest.fixture
def looped(monkeypatch):
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)  # rows longer than 32: the looped kernel


def softmax_fd(dtype, log=False):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.from_torch(dtype))
        xf = fd.ops.cast(x, DataType.Float)
        m = fd.ops.max(xf, [-1], True)
        d = fd.ops.sub(xf, m)
        total = fd.ops.sum(fd.ops.exp(d), [-1], True)
        y = fd.ops.sub(d, fd.ops.log(total)) if log else fd.ops.div(fd.ops.exp(d), total)
        fd.add_output(fd.ops.cast(y, DataType.from_torch(dtype)))
    return fd


# a pass over the row's chunks: a plain loop, or one unrolled (an accumulating pass)
PASS = re.compile(r"for c_start in (?:tl\.)?range\(")


def passes(code: str) -> int:
    return len(PASS.findall(code))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("log", [False, True])
def test_a_looped_softmax_reads_its_rows_twice_and_matches_eager(looped, dtype, log, device):
    fd = softmax_fd(dtype, log)
    x = (torch.randn(9, 300, device=device) * 6).to(dtype)  # several chunks a row, maxima rising
    (y,) = fd.execute([x])
    ref = (torch.log_softmax if log else torch.softmax)(x.float(), -1).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(y, ref, rtol=tol, atol=tol)
    code = fd.last_triton_code()
    assert passes(code) == 2, code
    # the pass before the row's max: one loop, or an aligned row's two (inner chunks, then edges)
    first_pass = PASS.split(code)[1].split("tl.reduce(")[0]
    loops = 1 + first_pass.count("for c_edge in range(")
    assert "_max_nan(" in first_pass and first_pass.count("_exp_flush") == loops, first_pass  # one exp a term


def test_special_values_give_what_eager_gives(looped, device):
    inf, nan = math.inf, math.nan
    x = torch.randn(6, 100, device=device)
    x[0, :50] = -inf                # -inf in the first chunks: lanes with nothing yet
    x[1, :] = -inf                  # a row of -inf: NaN
    x[2, 70] = inf                  # +inf: NaN (inf - inf)
    x[3, 10] = nan                  # NaN
    x[4, 99] = 80.0                 # the maximum in the last chunk: every lane rescaled
    (y,) = softmax_fd(torch.float32).execute([x])
    torch.testing.assert_close(y, torch.softmax(x, -1), equal_nan=True)
    (z,) = softmax_fd(torch.float32, log=True).execute([x])
    torch.testing.assert_close(z, torch.log_softmax(x, -1), equal_nan=True)


def test_fuser_jit_log_softmax_and_logsumexp_forward_and_backward(looped):
    def f(x):
        return torch.log_softmax(x, -1) * 2 + torch.logsumexp(x, -1, keepdim=True)

    x = (torch.randn(5, 200) * 3).requires_grad_()
    dy = torch.randn(5, 200)
    jitted = fuser.jit(f)
    ours = jitted(x)
    (g_ours,) = torch.autograd.grad(ours, x, dy)
    theirs = f(x)
    (g_theirs,) = torch.autograd.grad(theirs, x, dy)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-5)


def test_a_softmax_over_rows_is_an_outer_reduction_with_one_pass_less(device):
    """A softmax over dim 0 is an outer reduction, looped over the rows at every size: the
    online pass takes it too."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        m = fd.ops.max(x, [0], True)
        e = fd.ops.exp(fd.ops.sub(x, m))
        fd.add_output(fd.ops.div(e, fd.ops.sum(e, [0], True)))
    x = torch.randn(300, 37, device=device) * 5
    x[:150, 3] = -math.inf
    (y,) = fd.execute([x])
    torch.testing.assert_close(y, torch.softmax(x, 0))
    code = fd.last_triton_code()
    assert code.count("for r_start in range(") == 2 and "_d = " in code and "(-tl.abs(" in code, code


def _logsumexp(x):
    return torch.logsumexp(x, -1)


def test_a_looped_logsumexp_reads_its_rows_once_with_eagers_infinities(looped):
    """logsumexp shifts by the max made 0 where it is infinite (its decomposition): still one
    online pass, and a row of -inf gives -inf, a row holding inf gives inf, as eager's."""
    x = torch.randn(6, 100, generator=torch.Generator().manual_seed(9)) * 5
    x[0, :50] = -math.inf
    x[1, :] = -math.inf
    x[2, 70] = math.inf
    x[3, 10] = math.nan
    x[4, 99] = 80.0
    torch.testing.assert_close(fuser.jit(_logsumexp)(x), torch.logsumexp(x, -1), equal_nan=True)
    (report,) = fuser.explain(_logsumexp, x).fusions
    code = "\n".join(report.triton)
    assert passes(code) == 1 and "_d = " in code and "(-tl.abs(" in code, code


def test_a_looped_softmax_forward_also_gives_the_log_sum_exp_its_backward_reads(looped):
    """fuser.jit's softmax backward reads exp((x - max) - log(sum)) (frontend/softmax_backward.py):
    the forward's looped kernel, its online pass giving max and sum, still reads each row twice."""
    def f(x):
        return torch.softmax(x.float(), -1).to(x.dtype)

    x = (torch.randn(7, 300) * 6).to(torch.bfloat16).requires_grad_()
    dy = torch.randn(7, 300).to(torch.bfloat16)
    ours = fuser.jit(f)(x)
    (g_ours,) = torch.autograd.grad(ours, x, dy)
    xe = x.detach().clone().requires_grad_()
    theirs = f(xe)
    (g_theirs,) = torch.autograd.grad(theirs, xe, dy)
    torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(g_ours, g_theirs, rtol=2e-2, atol=1e-2)
    forward, backward = str(fuser.explain(f, x)).split("backward: ATen graph", 1)
    assert passes(forward) == 2, forward
    assert "_exp_flush_emulated(" in backward


def test_the_online_pass_takes_the_other_reductions_ready_beside_it(looped, device):
    """A row's logsumexp and its plain sum and minimum: one pass over the row, not three."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        m = fd.ops.max(xf, [-1], True)
        lse = fd.ops.add(fd.ops.log(fd.ops.sum(fd.ops.exp(fd.ops.sub(xf, m)), [-1], True)), m)
        fd.add_output(fd.ops.sub(lse, fd.ops.sum(xf, [-1], True)))
        fd.add_output(fd.ops.min(xf, [-1]))
    x = (torch.randn(9, 300, device=device) * 6).to(torch.bfloat16)
    lse_minus_sum, low = fd.execute([x])
    xf = x.float()
    torch.testing.assert_close(lse_minus_sum, torch.logsumexp(xf, -1, keepdim=True) - xf.sum(-1, keepdim=True))
    torch.testing.assert_close(low, xf.amin(-1))
    code = fd.last_triton_code()
    assert passes(code) == 1, code


@pytest.mark.parametrize("form", ["float", "bf16", "weighted"])
def test_a_cross_entropy_forward_reads_its_logits_once(looped, form):
    """The target's log-probability is picked from x, then less max and log(sum) once a row
    (frontend/rules/shape.py): the pick no longer waits for the row's statistics, so the
    looped kernel takes it in its online pass. Also where the log-probabilities are rounded
    to bf16 (no `.float()`) or weighted. Ignored targets and the mean as eager's."""
    import torch.nn.functional as F

    weight = torch.rand(300, generator=torch.Generator().manual_seed(5)) + 0.5

    def ce(logits, target):
        if form == "bf16":
            return F.cross_entropy(logits, target)
        return F.cross_entropy(logits.float(), target, weight=weight if form == "weighted" else None)

    x = (torch.randn(9, 300) * 4).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 300, (9,))
    target[3] = -100
    jitted = fuser.jit(ce)
    out = jitted(x, target)
    (grad,) = torch.autograd.grad(out, x)
    xe = x.detach().clone().requires_grad_()
    want = ce(xe, target)
    (want_grad,) = torch.autograd.grad(want, xe)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, want_grad, rtol=2e-2, atol=1e-4)
    forward = str(fuser.explain(ce, x, target)).split("backward: ATen graph", 1)[0]
    row_kernel = [k for k in forward.split("\ndef fuser_") if "(-tl.abs(" in k]  # (the online pass's exp)
    assert len(row_kernel) == 1 and passes(row_kernel[0].split("\ndef ")[0]) == 1, forward


@pytest.mark.parametrize("form", ["persistent", "looped"])
def test_a_cross_entropy_with_infinities_and_nans_is_eagers(form, monkeypatch):
    """The target logit picked before `- max - log(sum)`: the same operations on the same
    element, so a -inf target, an inf or a NaN elsewhere in the row give eager's loss."""
    import torch.nn.functional as F

    if form == "looped":
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)

    def per_row(logits, target):
        return F.cross_entropy(logits.float(), target, reduction="none")

    x = torch.randn(6, 200, generator=torch.Generator().manual_seed(3)) * 3
    target = torch.tensor([5, 17, 60, 199, 0, 100])
    x[0, 5] = -math.inf     # the target's logit: an infinite loss
    x[1, 90] = math.inf     # another logit: NaN
    x[2, 61] = math.nan
    x[3, :] = -math.inf     # a whole row
    x[4, 0] = 80.0          # far above the rest: the max is the target
    torch.testing.assert_close(fuser.jit(per_row)(x, target), per_row(x, target), equal_nan=True)


@pytest.mark.parametrize("form", ["persistent", "looped"])
def test_a_label_smoothed_cross_entropy_forward_reads_its_logits_once(form, monkeypatch):
    """Label smoothing's row sum of log-probabilities is `sum(x - max) - n log(sum)`
    (frontend/rules/reduction.py), and the online pass sums `x - max` in each lane relative to
    its running max (codegen/online_softmax.py `shifted_sums`): one pass over the row. As
    eager's at infinities, NaN, a row of -inf, logits offset by 1e4, logits near 3e36, and rows
    whose first logit is far below the rest (where a sum of `x - r` for r that logit, less
    `n (max - r)`, overflowed or lost digits)."""
    import torch.nn.functional as F

    if form == "looped":
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    torch._dynamo.reset()  # (the other form's trace of the same code would be served)

    def smoothed(logits, target):
        return F.cross_entropy(logits.float(), target, label_smoothing=0.1, reduction="none")

    x = torch.randn(11, 301, generator=torch.Generator().manual_seed(7)) * 4
    target = torch.tensor([3, 0, 300, -100, 17, 150, 299, 5, 42, 7, 8])
    x[1, 0] = -math.inf      # the first logit, not the target
    x[2, 40] = math.inf      # NaN
    x[3, 9] = math.nan       # NaN (an ignored target still sums the row)
    x[4, :] = -math.inf      # a whole row
    x[5] += 1e4              # a common offset
    x[6] = x[6] * 1e35 + 3e36  # near the largest floats, no overflow in eager
    x[7, 0] = 1e30           # a first logit far above the rest
    x[8, 0::2], x[8, 1::2] = -1e36, 1e36
    x[9, 0] = -3e38          # a first logit far below the rest
    x[10, 0] = -1e7
    got, want = fuser.jit(smoothed)(x, target), smoothed(x, target)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-4, equal_nan=True)
    if form == "looped":
        forward = str(fuser.explain(smoothed, x, target)).split("backward: ATen graph", 1)[0]
        row_kernel = [k for k in forward.split("\ndef fuser_") if "(-tl.abs(" in k]
        assert len(row_kernel) == 1 and passes(row_kernel[0].split("\ndef ")[0]) == 1, forward


def test_a_label_smoothed_cross_entropy_over_a_middle_class_axis():
    """Logits [N, C, d] (the class axis in the middle: an outer reduction's online pass), a
    column opening with -1e36 and one far below its max, as eager's."""
    import torch.nn.functional as F

    def smoothed(logits, target):
        return F.cross_entropy(logits, target, label_smoothing=0.2, reduction="none")

    x = torch.randn(3, 37, 5, generator=torch.Generator().manual_seed(2)) * 3
    target = torch.randint(0, 37, (3, 5), generator=torch.Generator().manual_seed(3))
    x[0, 0::2, 1], x[0, 1::2, 1] = -1e36, 1e36
    x[1, 0, 2] = -3e38
    torch.testing.assert_close(fuser.jit(smoothed)(x, target), smoothed(x, target), rtol=2e-6, atol=1e-4)

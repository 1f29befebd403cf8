"""Softmax, log-softmax and norms over a few long rows (decode-time sampling over a large
vocabulary): the row statistics split across programs (a softmax's max and sum of exp(x - max)
as online pairs per chunk, combined by the row's last program; a norm's Welford or sum of
squares), then a pointwise kernel writes the outputs that read them (schedulers/plan.py
StatisticsParts). The split's thresholds are lowered so that the interpreter's small tensors
split; the programs run in any order."""
import pytest
import torch
import torch.nn.functional as F

import fuser


def softmax(x):
    return torch.softmax(x.float(), -1).to(x.dtype)


def log_softmax(x):
    return torch.log_softmax(x.float(), -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rms_norm(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def _kernels(fn, *args) -> str:
    return "\n".join(t for f in fuser.explain(fn, *args).fusions for t in f.triton)


def _assert_split(code: str) -> None:
    assert "split in one kernel" in code and "c_lo = chunk * CHUNK" in code  # the statistics
    assert "pointwise" in code  # the rows reading them


@pytest.mark.parametrize("fn", [softmax, log_softmax])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_of_few_long_rows_splits(small_splits, any_program_order, fn, dtype):
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(3, 1000, generator=g) * 4).to(dtype)
    jitted = fuser.jit(fn)
    for _ in range(2):  # a second launch finds the semaphores zero again
        got = jitted(x)
        want = fn(x.double()).to(got.dtype)
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-2 if dtype is torch.bfloat16 else 1e-5,
                                   atol=1e-5 if fn is softmax else 1e-4)
    code = _kernels(fn, x)
    _assert_split(code)
    assert "_part" in code  # the combine step merges the chunks' (max, sum) pairs


def test_the_maximum_rising_in_a_later_chunk_rescales_the_sums(small_splits, any_program_order):
    """Each row's largest value sits in a different chunk, far above the rest (exp of the
    difference underflows unless every sum is rescaled to the row's maximum), one chunk of a
    row is all -inf, and one row is -inf but for one value."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 1000, generator=g)
    x[0, 990], x[1, 5], x[2, 500] = 120.0, 95.0, -30.0
    x[1, 200:300] = float("-inf")
    x[2] = float("-inf")
    x[2, 500] = -30.0
    got = fuser.jit(softmax)(x)
    torch.testing.assert_close(got, torch.softmax(x.double(), -1).float(), rtol=1e-5, atol=1e-6)
    _assert_split(_kernels(softmax, x))


def test_special_values_match_eager(small_splits, any_program_order):
    """A row holding +inf, one all -inf and one holding NaN give what eager gives (NaN rows,
    NaN where inf - inf)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 700, generator=g)
    x[0, 650] = float("inf")
    x[1] = float("-inf")
    x[2, 10] = float("nan")
    got = fuser.jit(softmax)(x)
    torch.testing.assert_close(got, torch.softmax(x, -1), equal_nan=True)


def _logsumexp(x):
    return torch.logsumexp(x.float(), -1)


def test_logsumexp_of_few_long_rows_splits(small_splits, any_program_order):
    """logsumexp's pair (shifted by the max made 0 where infinite) splits in one kernel; a row
    of -inf gives -inf and a row holding inf gives inf, as eager's."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(5, 1000, generator=g) * 4
    x[1] = float("-inf")
    x[2, 900] = float("inf")
    x[3, 30] = float("nan")
    x[4, 995] = 90.0
    got = fuser.jit(_logsumexp)(x)
    torch.testing.assert_close(got, torch.logsumexp(x.double(), -1).float(), equal_nan=True)
    code = _kernels(_logsumexp, x)
    assert "split in one kernel" in code and "_part" in code and "pointwise" not in code


def _softmax_and_double(x):
    return torch.softmax(x, -1), x * 2


def _logsumexp_and_double(x):
    return torch.logsumexp(x, -1), x * 2


def _two_sums_of_one_max(x):
    m = x.amax(-1, keepdim=True)
    return torch.exp(x - m).sum(-1), torch.exp(x - m).sum(-1) * 2


def _a_sum_before_the_pair(x):
    a = x.sum(-1)
    m = x.amax(-1, keepdim=True)
    return a, torch.exp(x - m).sum(-1)


def _a_sum_between_max_and_sum(x):
    m = x.amax(-1, keepdim=True)
    a = x.sum(-1)
    return a, torch.log(torch.exp(x - m).sum(-1)) + m.squeeze(-1)


def _a_mean_before_a_softmax(x):
    return torch.softmax(x, -1), x.mean(-1)


def _column_sum_before_a_column_pair(x):
    m = x.amax(0, keepdim=True)
    return x.sum(0), torch.exp(x - m).sum(0)


@pytest.mark.parametrize("fn", [_softmax_and_double, _logsumexp_and_double, _two_sums_of_one_max,
                                _a_sum_before_the_pair, _a_sum_between_max_and_sum, _a_mean_before_a_softmax,
                                _column_sum_before_a_column_pair])
def test_pairs_beside_other_reductions_and_outputs(small_splits, any_program_order, fn):
    """An output needing no statistic stored in the pair's pass (the split's partial step has
    no later pass); a second sum of the same max (no pair: the plan does not split); another
    reduction emitted before, between or after the pair's max and sum (the max stays in the
    pair's own pass, in the partial and the combine step alike). Found by review."""
    g = torch.Generator().manual_seed(13)
    x = torch.randn(*((600, 20) if fn is _column_sum_before_a_column_pair else (3, 1000)), generator=g) * 4
    x.view(-1)[990] = 25.0
    got = fuser.jit(fn)(x)
    for a, b in zip(got, fn(x.double())):
        torch.testing.assert_close(a, b.float(), rtol=1e-5, atol=1e-4)


def test_norms_of_few_long_rows_split(small_splits, any_program_order):
    """LayerNorm's Welford statistics and RMSNorm's sum of squares split the same way."""
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 1000, generator=g) * 2 + 5).to(torch.bfloat16)
    w, b = (torch.randn(1000, generator=g).to(torch.bfloat16) for _ in range(2))
    for fn, args in ((layer_norm, (x, w, b)), (rms_norm, (x, w))):
        got = fuser.jit(fn)(*args)
        want = fn(*[a.double() for a in args]).to(got.dtype)
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        _assert_split(_kernels(fn, *args))


def test_many_rows_keep_one_program_a_row(small_splits):
    """Rows enough for every processor: one kernel, no split."""
    x = torch.randn(40, 100, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(fuser.jit(softmax)(x), torch.softmax(x, -1))
    code = _kernels(softmax, x)
    assert "split" not in code and "pointwise" not in code


def test_without_a_split_the_statistics_form_is_not_taken():
    """The interpreter's default (no processors): the one-kernel form, as before."""
    x = torch.randn(2, 5000, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(fuser.jit(softmax)(x), torch.softmax(x, -1))
    assert "split" not in _kernels(softmax, x)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("rows", [1, 8, 64])
def test_sampling_softmax_over_a_vocabulary_on_the_gpu(rows):
    """Decode-time sampling shapes: a softmax and a log-softmax over a 128256-entry vocabulary,
    bf16, with the default thresholds: split statistics, then the rows."""
    g = torch.Generator(device="cuda").manual_seed(8)
    x = (torch.randn(rows, 128256, device="cuda", generator=g) * 3).to(torch.bfloat16)
    for fn in (softmax, log_softmax):
        got = fuser.jit(fn)(x)
        want = fn(x.double()).to(got.dtype)
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-5 if fn is softmax else 1e-3)
        _assert_split(_kernels(fn, x))


@pytest.mark.parametrize("fn", [softmax, log_softmax, _logsumexp])
def test_forward_and_backward_of_few_long_rows(small_splits, any_program_order, fn):
    """Training through a softmax over few long rows: the forward's statistics split, and the
    backward's row sums (of dy * y, or of dy) split the same way (their readers a pointwise
    kernel); gradients match eager's."""
    g = torch.Generator().manual_seed(14)
    x = (torch.randn(3, 1000, generator=g) * 3).requires_grad_()
    y = fuser.jit(fn)(x)
    dy = torch.randn(y.shape, generator=g)
    (got,) = torch.autograd.grad(y, x, dy)
    x64 = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(fn(x64), x64, dy.double())
    torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y, fn(x64).float(), rtol=1e-5, atol=1e-5)
    plans = {p.kind: "\n".join(t for f in p.fusions for t in f.triton)
             for graph in fuser.explain(fn, x).graphs for p in graph.programs}
    assert "split in one kernel" in plans["forward"]
    # (logsumexp's gradient, dy * exp(x - lse), reduces nothing)
    assert ("split in one kernel" in plans["backward"]) == (fn is not _logsumexp)


def test_softmax_of_few_long_rows_gives_its_backward_its_statistics(small_splits, any_program_order):
    """Training through fuser.jit: the split statistics give the max and the sum whose log the
    backward reads (frontend/softmax_backward.py)."""
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 1000, generator=g) * 4).to(torch.bfloat16).requires_grad_()
    dy = torch.randn(3, 1000, generator=g).to(torch.bfloat16)
    got = fuser.jit(softmax)(x)
    (g_got,) = torch.autograd.grad(got, x, dy)
    xe = x.detach().double().requires_grad_()
    (g_want,) = torch.autograd.grad(softmax(xe), xe, dy.double())
    torch.testing.assert_close(g_got.double(), g_want, rtol=2e-2, atol=2e-3)
    _assert_split(_kernels(softmax, x))

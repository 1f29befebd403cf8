"""argmax, argmin and max / min along a dim with their indices under fuser.jit (sixty-third
session), against eager PyTorch: they ran through ATen (`fallback_ops`), cutting kernels around
them; they now lower to the extreme and the first position reaching it, one kernel, with
eager's first index on ties and NaN as the extreme (rules/argreduce.py)."""
import math

import pytest
import torch
import torch._dynamo

import fuser
from fuser.codegen import launch
from fuser.schedulers import heuristics
from tests.helpers import COMPILERS, assert_eager, fresh_jit

ROWS = 6




@pytest.fixture(params=["persistent", "looped"])
def form(request, monkeypatch):
    """Rows in one tile, or rows longer than the persistent limit: chunks of a loop."""
    if request.param == "looped":
        monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    return request.param


def tied(shape, dtype) -> torch.Tensor:
    """Small random integers (ties everywhere), in floating types with a few NaNs placed at
    random and rows of special values: one constant, one NaN at its end (after maxima and
    minima in every chunk), one all -inf."""
    x = torch.randint(-4, 5, shape).to(dtype)
    if dtype.is_floating_point:
        x.view(-1)[torch.randperm(x.numel())[:3]] = math.nan
        x[0] = 2.0
        x[1, -1] = math.nan
        x[2] = -math.inf
    return x


def check(fn, compiler, *args, kernels=1):
    """fn's outputs exactly as eager's (an extreme is one of the elements, an index an
    integer), and with fuser.jit in `kernels` kernels, no ATen call between them."""
    jitted = COMPILERS[compiler](fn)
    got, want = jitted(*args), fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert_eager(g, w)
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    info = jitted.cache_info() if hasattr(jitted, "cache_info") else None
    if info is not None:
        assert info.fallback_ops == 0 and info.kernels == kernels, info


ROW_FORMS = {
    "argmax": lambda x: x.argmax(-1),
    "argmin": lambda x: torch.argmin(x, dim=1),
    "argmax keepdim": lambda x: x.argmax(-1, keepdim=True),
    "max dim": lambda x: torch.max(x, -1),
    "min dim keepdim": lambda x: torch.min(x, 1, keepdim=True),
    "argmax of a pointwise producer": lambda x: (x * 3 - 1).argmax(-1),
    "max dim with a consumer": lambda x: tuple(t + 1 for t in torch.max(x, -1)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("name", list(ROW_FORMS))
def test_row_arg_reductions_match_eager_in_one_kernel(name, dtype, form):
    check(ROW_FORMS[name], "jit", tied((ROWS, 100), dtype))


@pytest.mark.parametrize("compiler", list(COMPILERS))
def test_int64_inputs_and_torch_compile(compiler):
    # (torch.compile's callable has no cache_info: its values alone are checked)
    check(lambda x: torch.max(x, -1), compiler, tied((ROWS, 40), torch.int64))
    check(lambda x: x.argmin(-1), compiler, tied((ROWS, 40), torch.float32))


def test_rows_of_another_length_reuse_the_program():
    jitted = fresh_jit(lambda x: x.argmax(-1))
    for cols in (50, 77):
        x = tied((ROWS, cols), torch.float32)
        assert_eager(jitted(x), x.argmax(-1))
    assert jitted.cache_info().fallback_ops == 0


OTHER_FORMS = {
    "argmax over dim 0": lambda x: x.argmax(0),
    "min over a middle dim": lambda x: torch.min(x.reshape(2, ROWS // 2, -1), 1),
    "argmax of all": lambda x: x.argmax(),
    "argmin of all, keepdim": lambda x: x.argmin(keepdim=True),
    "argmax of all of a transpose": lambda x: x.t().argmax(),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
@pytest.mark.parametrize("name", list(OTHER_FORMS))
def test_other_dims_and_whole_tensors(name, dtype):
    check(OTHER_FORMS[name], "jit", tied((ROWS, 20), dtype))


def test_an_accuracy_metric_runs_without_aten(form):
    def accuracy(logits, y):
        return (logits.argmax(-1) == y).float().mean()
    logits, y = torch.randn(ROWS, 100), torch.randint(0, 100, (ROWS,))
    y[:2] = logits[:2].argmax(-1)  # (some hits)
    check(accuracy, "jit", logits, y, kernels=2)  # (the rows' argmax, then the mean over rows)


def test_few_long_rows_match_eager(monkeypatch):
    # the settings under which the interpreter splits few long rows into chunks as a GPU does
    # (tests/codegen's small_splits, and tests/codegen/test_online_arg.py)
    monkeypatch.setattr(heuristics, "MAX_PERSISTENT", 32)
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 4)
    monkeypatch.setattr(heuristics, "INNER_SPLIT_MIN_COLS", 64)
    monkeypatch.setattr(heuristics, "INNER_SPLIT_BLOCK", 16)
    monkeypatch.setattr(heuristics, "INNER_SPLIT_MIN_CHUNK", 32)
    check(lambda x: torch.max(x, -1), "jit", tied((3, 1000), torch.float32))
    check(lambda x: x.argmin(), "jit", tied((3, 1000), torch.float32))


def test_a_looped_arg_reduction_runs_as_a_loop(form):
    report = str(fuser.explain(fresh_jit(lambda x: x.argmax(-1)), tied((ROWS, 100), torch.float32)))
    assert ("for c_start in" in report) == (form == "looped"), report


def test_max_dim_gradients_match_eager():
    def fn(x):
        values, indices = torch.max(x * 2, -1)
        return values, indices
    x = tied((ROWS, 40), torch.float32).requires_grad_()  # (ties: the gradient goes to the first)
    jitted = fresh_jit(fn)
    (values, indices), (ev, ei) = jitted(x), fn(x)
    assert_eager(indices, ei)
    weights = torch.randn(values.shape)
    grad, = torch.autograd.grad((values * weights).sum(), x)
    want, = torch.autograd.grad((ev * weights).sum(), x)
    assert_eager(grad, want)
    assert jitted.cache_info().fallback_ops == 0, jitted.cache_info()


@pytest.mark.parametrize("fn, x", [
    (lambda x: x.argmax(-1), torch.rand(ROWS, 9) > 0.5),          # eager refuses bool argmax
    (lambda x: x.argmin(-1), torch.randn(ROWS, 0)),               # and an empty axis
    (lambda x: torch.max(x, 1), torch.randn(ROWS, 0)),
    (lambda x: x.argmax(), torch.randn(ROWS, 0)),                 # and no elements at all
])
def test_what_eager_refuses_is_refused_as_eager(fn, x):
    with pytest.raises((RuntimeError, IndexError)) as want:
        fn(x)
    with pytest.raises(type(want.value)):
        fresh_jit(fn)(x)


def test_bool_max_dim_matches_eager():
    check(lambda x: torch.max(x, -1), "jit", torch.rand(ROWS, 30) > 0.5)

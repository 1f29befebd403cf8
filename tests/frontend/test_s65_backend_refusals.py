"""Refusals of fuser's torch.compile backend (frontend/backend.py) where eager PyTorch runs:

- a write to a part of an expanded argument whose elements share no memory (`x[0] = 3.0` of
  `x = row.expand(4, 8)`) runs in eager, each row showing it. AOTAutograd's functional form
  writes the whole input back, which the expanded tensor refuses, and fuser turned that into a
  FusionInputError saying eager requires a clone();
- `torch.floor_divide` has no derivative: with an input needing grad eager's forward runs and
  only backward() raises, a RuntimeError (igamma's and zeta's are NotImplementedErrors, which
  got fuser's UnsupportedError): fuser.jit raised an InternalError, torch.compile a raw
  BackendCompilerFailed."""
import warnings

import pytest
import torch

import fuser
from tests.helpers import COMPILERS, make

from .jit_helpers import assert_compile_names_the_op_without_derivative


def write_a_row(x):
    x[0] = 3.0
    return x * 2


def bump_a_row(x):
    x[1].add_(1.0)
    return x.sum()


def bump_all(x):
    x.add_(1.0)
    return x * 2


def _expanded_pair():
    """Two expanded (4, 8) views of equal fresh rows: one for eager, one for fuser."""
    row = make((8,))
    return row.expand(4, 8), row.clone().expand(4, 8)


@pytest.mark.parametrize("front", sorted(COMPILERS))
@pytest.mark.parametrize("fn", [write_a_row, bump_a_row], ids=lambda fn: fn.__name__)
def test_a_write_to_a_row_of_an_expanded_argument_runs_as_eager(front, fn):
    compiled = COMPILERS[front](fn)
    for _ in range(2):  # (the second call runs the graph compiled at the first)
        theirs, ours = _expanded_pair()
        ref = fn(theirs)
        out = compiled(ours)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(ours, theirs)  # (every row shows the write, as in eager)
        assert ours.stride() == (0, 1)


@pytest.mark.parametrize("front", sorted(COMPILERS))
def test_a_write_to_a_whole_expanded_argument_still_names_it(front):
    compiled = COMPILERS[front](bump_all)
    theirs, ours = _expanded_pair()
    with pytest.raises(RuntimeError, match="single memory location"):
        bump_all(theirs)  # eager refuses it
    with pytest.raises(fuser.FusionInputError, match=r"input x \(shape \[4, 8\], strides \[0, 1\]\).*clone\(\)"):
        compiled(ours)
    y = make((4, 8))  # a tensor of its own (a new trace) is written as eager writes it
    ref = y.clone()
    out = compiled(y)
    ref.add_(1.0)
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(out, ref * 2)


def floor_divided(x):
    return torch.floor_divide(x, 0.5) * x


def test_jit_of_floor_divide_needing_grad_is_unsupported_not_internal():
    x = make((4, 8)).requires_grad_()
    y = floor_divided(x)  # eager's forward runs ...
    with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not implemented"):
        y.sum().backward()  # ... and its backward raises
    jitted = COMPILERS["jit"](floor_divided)
    with warnings.catch_warnings(), pytest.raises(fuser.FuserError) as caught:
        warnings.simplefilter("ignore")
        jitted(x)
    assert type(caught.value) is fuser.UnsupportedError, repr(caught.value)
    assert "op torch cannot differentiate" in str(caught.value) and "floor_divide" in str(caught.value)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), floor_divided(x))


def test_torch_compile_of_floor_divide_needing_grad_names_the_op():
    assert_compile_names_the_op_without_derivative(floor_divided, make((4, 8)).requires_grad_())

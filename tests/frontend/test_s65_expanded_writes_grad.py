"""A write to part of an expanded input that needs a gradient (sixty-fifth session), against eager
PyTorch: `x = (b * 1).expand(4, 8)` passed in, `x[0, :3] = 3.0`. Eager writes the row (its
elements share no memory); in training AOTAutograd compiled the graph and refused only at the
call, writing the whole input back ("more than one element of the written-to tensor refers to
a single memory location"). The graph now runs as traced, as without gradients (backend.py
`_writes_expanded_input`, `_ExpandedWrites`)."""
import pytest

from fuser import FusionInputError
from tests.helpers import COMPILERS, assert_eager, make


def _write_a_row(x):
    x[0, :3] = 3.0
    return x * 2


def _add_to_all(x):
    x.add_(1.0)
    return x * 2


def _expanded_leaf():
    b = make((8,)).requires_grad_()
    return b, (b * 1).expand(4, 8)


@pytest.mark.parametrize("compiler", list(COMPILERS))
def test_a_row_write_to_an_expanded_input_needing_grad_as_eager(compiler):
    be, xe = _expanded_leaf()
    bf = be.detach().clone().requires_grad_()
    xf = (bf * 1).expand(4, 8)
    g = make((4, 8))
    ye, yf = _write_a_row(xe), COMPILERS[compiler](_write_a_row)(xf)
    assert_eager(yf, ye)
    assert_eager(xf, xe)
    ye.backward(g)
    yf.backward(g)
    assert_eager(bf.grad, be.grad)
    assert bf.grad[3:].abs().sum() > 0  # (the elements not overwritten get the four rows' gradient)


def test_a_write_to_all_of_an_expanded_input_needing_grad_names_it():
    _, x = _expanded_leaf()
    with pytest.raises(RuntimeError):
        _add_to_all(x)  # eager refuses it too
    _, x = _expanded_leaf()
    with pytest.raises(FusionInputError, match=r"input x \(shape \[4, 8\], strides \[0, 1\]\) is written in place"):
        COMPILERS["jit"](_add_to_all)(x)

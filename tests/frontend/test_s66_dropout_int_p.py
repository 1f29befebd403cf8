"""torch.dropout given an int probability outside [0, 1] (2, -1): eager raises "dropout
probability has to be between 0 and 1"; fuser's check (backend.py `_drops_out_outside_unit_range`)
took floats only, so out of training the jitted function copied its input."""
import pytest
import torch

from tests.helpers import COMPILERS, assert_eager, assert_raises_as_eager, make

SHAPE = (4, 33)

_INT_P_DROPOUTS = {
    "torch.dropout_2_eval": lambda a: torch.dropout(a, 2, False) * 2,
    "torch.dropout_-1_eval": lambda a: torch.dropout(a, -1, False) + 1,
    "torch.dropout_2_train": lambda a: torch.dropout(a, 2, True) * 2,
}


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("case", list(_INT_P_DROPOUTS))
def test_int_dropout_probability_outside_unit_range_raises_as_eager(compiler, case):
    assert_raises_as_eager(compiler, _INT_P_DROPOUTS[case], make(SHAPE))


@pytest.mark.parametrize("p", [0, 1, False, True])
def test_int_and_bool_dropout_probabilities_in_range_compute_as_eager(p):
    fn = lambda a: torch.dropout(a, p, False) * 2  # noqa: E731
    x = make(SHAPE)
    assert_eager(COMPILERS["jit"](fn)(x), fn(x))

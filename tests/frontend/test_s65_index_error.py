"""An index value past the size it indexes is a FusionIndexError: a FusionInputError naming the op
and its tensors, and an IndexError, as eager raises one (a FusionInputError alone escaped a
user's `except IndexError`)."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import make


def pick_rows(x, idx):
    return torch.index_select(x, 0, idx) * 2


def test_an_index_past_the_rows_through_jit_is_an_index_error():
    x = make((4, 3))
    jitted = fuser.jit(pick_rows)
    torch.testing.assert_close(jitted(x, torch.tensor([0, 3])), pick_rows(x, torch.tensor([0, 3])))
    with pytest.raises(IndexError, match="index out of range in self") as got:
        jitted(x, torch.tensor([0, 9]))
    assert isinstance(got.value, fuser.FusionIndexError) and isinstance(got.value, fuser.FusionInputError)


def test_an_index_past_the_rows_of_a_definition_names_the_op():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        i = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(t, i, 0))
    with pytest.raises(fuser.FusionIndexError, match="index_select: the index values"):
        fd.execute([make((4, 3)), torch.tensor([5])])

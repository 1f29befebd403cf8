"""Review of the ready key (298c257): the ready call is looked up before binding, so the key
must be computable for any argument binding would reject."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import FusionInputError


def scaled():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(x, s))
    return fd


@pytest.mark.parametrize("bad", [[[2.0]], {"s": 2.0}, {2.0}], ids=["list", "dict", "set"])
def test_an_unhashable_scalar_is_a_fusion_input_error(bad):
    """The ready key held the scalar itself: a list in a scalar's place made the dict lookup
    raise TypeError (unhashable type) before binding could name the input. (A list of numbers
    there is spread over the scalars, as nvFuser's define_vector takes it; a list inside it is
    not a number.)"""
    fd = scaled()
    x = torch.rand(3, 5)
    torch.testing.assert_close(fd.execute([x, 2.0])[0], x * 2.0)  # a ready call exists
    with pytest.raises(FusionInputError, match="input 1"):
        fd.execute([x, bad])
    torch.testing.assert_close(fd.execute([x, 3.0])[0], x * 3.0)


def test_an_unhashable_scalar_on_the_first_call_is_a_fusion_input_error():
    with pytest.raises(FusionInputError, match="input 1"):
        scaled().execute([torch.rand(3, 5), [[2.0]]])

"""Reductions' dims and reshape's shape entries given as numpy integers (refused as "must be a
list" or "must be an int" where permute, cat and the scheduling API take them), and a complex
fill value for a real result (`full`, `pad`: an InternalError at execute, the imaginary part
dropped by the cast)."""
import numpy as np
import pytest
import torch

from fuser import DataType, FusionDefinition, FusionDefinitionError
from tests.helpers import make


def test_numpy_integers_as_reduction_dims_and_shape_entries():
    x = make((3, 4))
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        fd.add_output(fd.ops.sum(t, [np.int64(1)]))
        fd.add_output(fd.ops.sum(t, np.int32(0)))
        fd.add_output(fd.ops.max(t, dim=np.int64(-1)))
        fd.add_output(fd.ops.reshape(t, [np.int64(4), np.int64(3)]))
    by_dims, by_dim, by_keyword, reshaped = fd.execute([x])
    torch.testing.assert_close(by_dims, x.sum(1))
    torch.testing.assert_close(by_dim, x.sum(0))
    torch.testing.assert_close(by_keyword, x.amax(-1))
    torch.testing.assert_close(reshaped, x.reshape(4, 3))


@pytest.mark.parametrize("dims", [[1.0], [True], 1.5])
def test_reduction_dims_of_other_types_are_refused_for_their_type(dims):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        with pytest.raises(FusionDefinitionError, match="must be"):
            fd.ops.sum(t, dims)
        fd.add_output(t)


@pytest.mark.parametrize("make_fill", [
    lambda fd, t: fd.ops.full([3], 1 + 1j, DataType.Float),
    lambda fd, t: fd.ops.pad(t, [1, 1], 1 + 1j),
    lambda fd, t: fd.ops.pad(t, [1, 1], fd.define_scalar(dtype=DataType.ComplexDouble)),
], ids=["full", "pad", "pad-input"])
def test_a_complex_fill_of_a_real_result_is_refused(make_fill):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        with pytest.raises(FusionDefinitionError, match="is complex, which a DataType.Float result cannot hold"):
            make_fill(fd, t)
        fd.add_output(t)


def test_a_complex_fill_of_a_complex_result_is_taken():
    x = torch.randn(3, dtype=torch.complex64)
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.ComplexFloat)
        fd.add_output(fd.ops.pad(t, [1, 1], 1 + 1j))
    fill = torch.full((1,), 1 + 1j, dtype=torch.complex64)
    torch.testing.assert_close(fd.execute([x])[0], torch.cat([fill, x, fill]))

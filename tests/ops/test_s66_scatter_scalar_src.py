"""scatter's scalar src that arg's dtype cannot hold: a constant is refused when defined, naming
the value and the dtype (it was accepted, and at execution ATen's error was worded as the
index's fault); a scalar input's value is checked when ATen runs, and the error is about the
value. A number the dtype holds (inf, NaN, its largest, a float truncated into an integer)
still scatters as eager does."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.errors import FusionDefinitionError, FusionInputError
from tests.helpers import make
from tests.ops.test_indexing import distinct_along


def _define(dtype, src):
    """scatter(x, index, src, 1) of an [n, m] arg of `dtype`; `src` a number, or None for a
    Double (Int for an integer arg) scalar input."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=dtype)
        index = fd.define_tensor([-1, -1], dtype=DataType.Int)
        if src is None:
            src = fd.define_scalar(dtype=DataType.Int if dtype in (DataType.Int, DataType.Int32) else DataType.Double)
        fd.add_output(fd.ops.scatter(x, index, src, 1))
    return fd


@pytest.mark.parametrize("dtype, value, words", [
    (DataType.Half, 1e6, "65504"),
    (DataType.BFloat16, 1e39, "3.38953e+38"),
    (DataType.Int32, 2**40, "[-2147483648, 2147483647]"),
    (DataType.Int, float("nan"), "a finite number"),
    (DataType.ComplexFloat, 1e39, "3.40282e+38"),
])
def test_a_constant_src_out_of_the_dtype_is_refused_when_defined(dtype, value, words):
    torch_dtype = dtype.to_torch()
    with pytest.raises(RuntimeError, match="value cannot be converted"):  # (eager refuses it at each call)
        torch.zeros(2, 3, dtype=torch_dtype).scatter(1, torch.tensor([[0], [1]]), value)
    with pytest.raises(FusionDefinitionError) as err:
        _define(dtype, value)
    message = str(err.value)
    assert message.startswith("scatter: src") and str(value) in message and str(dtype) in message
    assert words in message and "index" not in message


def test_a_complex_src_of_a_real_arg_is_refused_when_defined():
    with pytest.raises(FusionDefinitionError, match=r"scatter: src is the complex scalar \(1\+2j\), which a "
                                                    r"DataType.Float arg cannot hold"):
        _define(DataType.Float, 1 + 2j)


@pytest.mark.parametrize("dtype, value", [(DataType.Half, 1e6), (DataType.Int32, 2**40)])
def test_a_scalar_input_out_of_the_dtype_is_the_values_fault(dtype, value):
    x, index = make((4, 6), dtype.to_torch()), distinct_along((4, 2), 1, 6)
    fd = _define(dtype, None)
    with pytest.raises(FusionInputError) as err:
        fd.execute([x, index, value])
    message = str(err.value)
    assert message.startswith("scatter: the value of src") and f"arg's dtype {dtype}" in message
    assert "index" not in message


@pytest.mark.parametrize("dtype, value", [
    (DataType.Half, 65504.0), (DataType.Half, float("inf")), (DataType.Float, float("nan")),
    (DataType.Int32, 1.5), (DataType.Int32, -2147483648), (DataType.Bool, 2), (DataType.ComplexFloat, 1 + 2j),
])
def test_a_src_the_dtype_holds_scatters_as_eager(dtype, value):
    x, index = make((4, 6), dtype.to_torch()), distinct_along((4, 2), 1, 6)
    (out,) = _define(dtype, value).execute([x, index])
    want = x.scatter(1, index, value)
    assert out.dtype == want.dtype
    torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True)


def test_a_scalar_input_the_dtype_holds_scatters_as_eager():
    x, index = make((4, 6), torch.float16), distinct_along((4, 2), 1, 6)
    (out,) = _define(DataType.Half, None).execute([x, index, -1.25])
    torch.testing.assert_close(out, x.scatter(1, index, -1.25), rtol=0, atol=0)

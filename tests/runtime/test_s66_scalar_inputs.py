"""Scalar inputs as binding makes them (evaluate/binding.py) and as the executor cache keys them
(runtime/cache.py signature): a Float, Half or BFloat16 scalar holds a value of its type, as
nvFuser passes it to its kernel (eager's analog: a 0-d tensor of that dtype); numpy scalars of
a fitting kind are taken; arguments that bind alike share one runtime."""
import numpy as np
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.evaluate.binding import InputBinder, bind_inputs
from tests.helpers import BACKENDS, assert_eager, backend_env, make


def add_scalar(scalar_dtype: DataType, tensor_dtype: DataType):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=tensor_dtype)
        s = fd.define_scalar(dtype=scalar_dtype)
        fd.add_output(fd.ops.add(x, s))
    return fd


ROUNDED = [(DataType.Float, DataType.Double), (DataType.Half, DataType.Float), (DataType.BFloat16, DataType.Float)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scalar_dtype, tensor_dtype", ROUNDED, ids=lambda d: d.name)
def test_a_narrow_float_scalar_input_holds_a_value_of_its_type(scalar_dtype, tensor_dtype, backend):
    # a Half 0.1 added 0.10000000238 (the fp32 value), where eager adds 0.0999755859375: the
    # scalar was never rounded to its declared type. One IEEE add either way: bitwise equal
    x = make((300,), tensor_dtype.to_torch())
    v = 0.1 + torch.rand(()).item()
    expected = x + torch.tensor(v, dtype=scalar_dtype.to_torch())
    with backend_env(backend):
        fd = add_scalar(scalar_dtype, tensor_dtype)
        for _ in range(2):  # (the second call replays the first's ready call)
            (out,) = fd.execute([x, v])
            assert_eager(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("scalar_dtype, tensor_dtype", ROUNDED, ids=lambda d: d.name)
def test_binding_rounds_a_scalar_alike_on_its_fast_and_full_paths(scalar_dtype, tensor_dtype):
    fusion = add_scalar(scalar_dtype, tensor_dtype).fusion
    x_val, s_val = fusion.inputs()
    extent, scalar = x_val.domain.no_reductions()[0].size.name, s_val.expr.name
    x = make((300,), tensor_dtype.to_torch())
    v = 0.1 + torch.rand(()).item()
    rounded = torch.tensor(v, dtype=scalar_dtype.to_torch()).item()
    binder = InputBinder(fusion)
    for table in [binder.bind([x, v]), bind_inputs(fusion, [x, v]), binder.bind([x, np.float64(v)])]:
        assert dict(table.values) == {extent: 300, scalar: rounded}
        assert type(table.values[extent]) is int and type(table.values[scalar]) is float
    for table in [binder.bind([x, 3]), bind_inputs(fusion, [x, torch.tensor(3)])]:  # (an int: a float)
        assert type(table.values[scalar]) is float and table.values[scalar] == 3.0


def test_a_complex_float_scalar_input_holds_fp32_parts():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.ComplexDouble)
        s = fd.define_scalar(dtype=DataType.ComplexFloat)
        fd.add_output(fd.ops.add(x, s))
    x = make((300,), torch.float64) + 1j * make((300,), torch.float64)
    v = complex(0.1 + torch.rand(()).item(), 0.3 + torch.rand(()).item())
    (out,) = fd.execute([x, v])
    torch.testing.assert_close(out, x + torch.tensor(v, dtype=torch.complex64), rtol=0, atol=0)


def mul_double():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(x, s))
    return fd


@pytest.mark.parametrize("backend", BACKENDS)
def test_scalars_that_bind_alike_share_one_runtime(backend):
    # a Double scalar given as 2.0, 2, numpy.float64 and 0-d tensors of three dtypes made six
    # runtimes (re-segmented, re-planned) for one binding, s = 2.0
    x = make((4, 8))
    with backend_env(backend):
        fd = mul_double()
        for v in [2.0, 2, np.float64(2.0), np.float32(2.0), torch.tensor(2.0), torch.tensor(2.0, dtype=torch.float64),
                  torch.tensor(2)]:
            (out,) = fd.execute([x, v])
            assert_eager(out, x * 2.0)
        assert fd.cache.num_runtimes == 1


def test_size_one_strides_make_no_runtime_of_their_own():
    # two (4, 1) contiguous tensors, strides (1, 1) and (1, 4): one layout, but two runtimes
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=False, dtype=DataType.Float)
        fd.add_output(fd.ops.exp(x))
    for t in [make((4, 1)), make((1, 4)).t()]:
        (out,) = fd.execute([t])
        assert_eager(out, t.exp())
    assert fd.cache.num_runtimes == 1
    t = make((3, 4)).t()  # (another stride order still has its own)
    assert_eager(fd.execute([t])[0], t.exp())
    assert fd.cache.num_runtimes == 2


def where_of_three():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        f = fd.define_scalar(dtype=DataType.Double)
        i = fd.define_scalar(dtype=DataType.Int)
        b = fd.define_scalar(dtype=DataType.Bool)
        fd.add_output(fd.ops.where(b, fd.ops.mul(x, f), fd.ops.add(x, i)))
    return fd


@pytest.mark.parametrize("f, i, b", [(np.float32(2.5), 1, True), (2.5, np.int64(3), False), (2.5, np.int32(3), False),
                                     (2.5, 1, np.bool_(True)), (np.float16(2.5), np.uint8(3), np.False_)])
def test_numpy_scalars_of_a_fitting_kind_are_taken(f, i, b):
    fd = where_of_three()
    x = make((30,))
    (out,) = fd.execute([x, f, i, b])
    assert_eager(out, x * float(f) if b else x + int(i))


@pytest.mark.parametrize("args, message", [
    ((2.5, np.True_, True), r"input 2 \(scalar i2\): expected an Int scalar, got np.True_ \(numpy.bool\)"),
    ((2.5, np.float32(3.0), True), r"expected an Int scalar, got np.float32\(3.0\) \(numpy.float32\)"),
    ((np.complex64(1j), 1, True), r"expected a Double scalar, got np.complex64\(1j\) \(numpy.complex64\)"),
    ((2.5, 1, np.int64(1)), r"expected a Bool scalar, got np.int64\(1\) \(numpy.int64\)"),
])
def test_numpy_scalars_of_another_kind_are_refused_by_their_numpy_type(args, message):
    fd = where_of_three()
    with pytest.raises(fuser.FusionInputError, match=message):
        fd.execute([make((30,)), *args])

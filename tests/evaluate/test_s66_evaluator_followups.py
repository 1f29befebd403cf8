"""Follow-ups of the sixty-sixth session's scalar and indexing changes, each against eager
PyTorch: a scatter ATen has no CPU kernel for (a UInt64 arg) blamed the index (aten.py
`_indexing`); a 0-dim meta tensor given for a scalar input raised Tensor.item()'s raw error
(binding.py `_bind_scalar`); and the reference evaluator (`evaluate_fusion`, the oracle of
tests/fuzz_fusions.py) read a scalar input's argument as given, not the value binding made of
it (a Half 0.1 as 0.10000000149, where eager and fd.execute use 0.0999755859375)."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.evaluate import bind_inputs, evaluate_fusion, infer_meta
from tests.helpers import make


# -- a scatter ATen has no kernel for -------------------------------------------------------------


def test_scatter_of_a_dtype_aten_lacks_is_unsupported_not_a_bad_index():
    idx = torch.tensor([[0, 2], [3, 1]])
    arg = torch.randint(0, 100, (2, 4)).to(torch.uint64)
    with pytest.raises(NotImplementedError) as eager:
        arg.scatter(1, idx, 5)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.UInt64)
        i = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(x, i, 5, 1))
    with pytest.raises(fuser.UnsupportedError) as ours:  # (it blamed "the index values or sizes")
        fd.execute([arg, idx])
    message = str(ours.value)
    assert "Scatter" in message and "UInt64" in message and str(eager.value) in message
    assert "index" not in message


def test_scatter_of_an_index_out_of_range_still_names_the_index():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        i = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.scatter(x, i, 5.0, 1))
    with pytest.raises(fuser.FusionInputError, match="scatter: the index values"):
        fd.execute([make((2, 4)), torch.tensor([[0, 9]])])


# -- a meta tensor for a scalar input -------------------------------------------------------------


def _scaled():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, s))
    return fd


@pytest.mark.parametrize("warm", [False, True], ids=["first call", "after a call"])
def test_a_meta_tensor_for_a_scalar_input_is_named_as_a_meta_input(warm):
    fd = _scaled()
    x, v = make((40,)), 0.5 + torch.rand(()).item()
    if warm:  # (the ready call's checks refuse it, and binding names it)
        (out,) = fd.execute([x, v])
        torch.testing.assert_close(out, x * v, rtol=0, atol=0)
    with pytest.raises(fuser.FusionInputError, match=r"input 1 \(scalar .*\): a meta tensor"):
        fd.execute([x, torch.tensor(v, device="meta")])


def test_compile_ahead_names_a_meta_tensor_for_a_scalar_input():
    fd = _scaled()
    meta = torch.empty(40, device="meta")
    with pytest.raises(fuser.FusionInputError, match=r"input 1 \(scalar .*\): a meta tensor"):
        fd.compile_ahead([meta, torch.tensor(0.5, device="meta")], device="cpu")


# -- the reference evaluator reads scalar inputs as bound -----------------------------------------


@pytest.mark.parametrize("scalar_dtype, value", [(DataType.Half, 0.1), (DataType.BFloat16, 0.1),
                                                 (DataType.Float, 0.1), (DataType.Double, 3)],
                         ids=["Half", "BFloat16", "Float", "Double given an int"])
def test_evaluate_fusion_reads_a_scalar_input_as_bound(scalar_dtype, value):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Double)
        s = fd.define_scalar(dtype=scalar_dtype)
        fd.add_output(fd.ops.add(x, s))
        fd.add_output(fd.ops.pow(x, s))
    x = make((300,), torch.float64).abs() + 0.5  # (pow of a fractional power: positive bases)
    held = torch.tensor(value, dtype=scalar_dtype.to_torch())  # eager's analog of the scalar
    expected = [x + held, torch.pow(x, held)]
    args = [x, value]
    got = evaluate_fusion(fd.fusion, args, bind_inputs(fd.fusion, args))
    for out, want in zip(got, expected):
        assert out.dtype == want.dtype
        torch.testing.assert_close(out, want, rtol=0, atol=0)
    metas = infer_meta(fd.fusion, args, bind_inputs(fd.fusion, args))
    assert [(m.shape, m.dtype) for m in metas] == [(w.shape, w.dtype) for w in expected]

"""The generated straight-line binder (InputBinder._compile_fast) agrees with `bind_inputs`, the
reference, on valid arguments and on every kind of bad one: the same values, or the same error."""
import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.evaluate.binding import InputBinder, bind_inputs


def definition():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([1, -1], contiguity=True)       # broadcast rows, shares a's columns
        c = fd.define_tensor([4], contiguity=False, dtype=DataType.BFloat16)
        s = fd.define_scalar(dtype=DataType.Int)
        t = fd.define_scalar(dtype=DataType.Double)
        out = fd.ops.mul(fd.ops.add(a, b), t)
        fd.add_output(fd.ops.add(out, fd.ops.cast(s, DataType.Float)))
        fd.add_output(fd.ops.cast(c, DataType.Float))
    return fd


def good():
    return [torch.randn(3, 5), torch.randn(1, 5), torch.randn(4, dtype=torch.bfloat16), 7, 0.5]


CASES = {
    "valid": lambda a: a,
    "tuple": tuple,
    "int for a double": lambda a: a[:4] + [2],
    "wrong dtype": lambda a: [a[0].double()] + a[1:],
    "wrong rank": lambda a: [a[0][None]] + a[1:],
    "conflicting columns": lambda a: [a[0], torch.randn(1, 6)] + a[2:],
    "not a broadcast": lambda a: [a[0], torch.randn(2, 5)] + a[2:],
    "wrong static size": lambda a: a[:2] + [torch.randn(5, dtype=torch.bfloat16)] + a[3:],
    "strided static input": lambda a: a[:2] + [torch.randn(8, dtype=torch.bfloat16)[::2]] + a[3:],
    "not contiguous": lambda a: [torch.randn(5, 3).t()] + a[1:],
    "float for an int": lambda a: a[:3] + [7.0, a[4]],
    "bool for an int": lambda a: a[:3] + [True, a[4]],
    "a list for a tensor": lambda a: [[1.0]] + a[1:],
    "too few": lambda a: a[:4],
    "a parameter": lambda a: [torch.nn.Parameter(a[0])] + a[1:],
}


@pytest.mark.parametrize("case", list(CASES))
def test_generated_binder_agrees_with_bind_inputs(case):
    fd = definition()
    fusion = fd.fusion
    binder = InputBinder(fusion)
    assert binder._fast is not None
    args = CASES[case](good())

    def outcome(fn):
        try:
            return dict(fn(args).values)
        except Exception as e:  # noqa: BLE001 - compared below
            return (type(e), str(e))
    assert outcome(binder.bind) == outcome(lambda a: bind_inputs(fusion, a))
    # plain arguments take the generated path itself, not the fallback
    assert (binder._fast(args) is not None) == (case in ("valid", "tuple", "int for a double", "a parameter", "strided static input"))


def test_an_empty_tensor_with_odd_strides_gets_the_full_check():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1, -1], contiguity=True)
        fd.add_output(fd.ops.neg(a))
    binder = InputBinder(fd.fusion)
    odd = torch.empty_strided((5, 0, 3), (6, 6, 2))

    def outcome(fn):
        try:
            return dict(fn([odd]).values)
        except Exception as e:  # noqa: BLE001 - compared below
            return (type(e), str(e))
    assert outcome(binder.bind) == outcome(lambda a: bind_inputs(fd.fusion, a))


def test_a_dim_without_contiguity_leaves_the_stride_chain_for_both_binders():
    """contiguity None on a dim larger than 1 (nvFuser's expanded broadcast): the dims around it
    are contiguous with each other, skipping it. A dense tensor there is refused by both
    binders (the generated one used to take it through is_contiguous()); the expanded one and a
    stride-0 dim anywhere are taken."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([1, -1, 16, -1], contiguity=[None, True, None, True], stride_order=[3, 2, 1, 0])
        fd.add_output(fd.ops.exp(a))
    binder = InputBinder(fd.fusion)
    expanded = torch.randn(3 * 8).as_strided((1, 3, 16, 8), (24, 8, 0, 1))

    def outcome(fn, x):
        try:
            return dict(fn([x]).values)
        except Exception as e:  # noqa: BLE001 - compared below
            return (type(e), str(e))
    for x in (expanded, expanded.contiguous()):
        assert outcome(binder.bind, x) == outcome(lambda a: bind_inputs(fd.fusion, a), x)
    assert isinstance(outcome(binder.bind, expanded), dict)
    with pytest.raises(fuser.FusionInputError, match="axis 1: declared contiguous, so stride 8"):
        fd.execute([expanded.contiguous()])
    torch.testing.assert_close(fd.execute([expanded])[0], expanded.exp())

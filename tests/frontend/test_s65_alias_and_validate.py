"""Faults of `fd.add_output(alias_input=)` and `fd.validate` found by probing the definition API
(sixty-fifth session): a refused alias left part of its check behind, and validate raised
torch's raw errors on an fp8 output and on a meta reference."""
import pytest
import torch

from fuser import DataType, FusionDefinition, FusionDefinitionError, FusionInputError, ValidationError
from tests.helpers import assert_eager, make


def test_a_refused_alias_leaves_the_definition_as_it_was():
    # the check unified axis 0 of the output and of its alias input, then refused axis 1
    # (4 against 5): later inputs whose axis 0 differ were refused as an extent conflict
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, 4], contiguity=True)
        w = fd.define_tensor([-1, 5], contiguity=True)
        with pytest.raises(FusionDefinitionError, match="axis 1 of output"):
            fd.add_output(fd.ops.exp(a), alias_input=w)
        fd.add_output(fd.ops.add(a, 1.0))
        fd.add_output(fd.ops.mul(w, 2.0))
    x, y = make((3, 4)), make((6, 5))
    out_a, out_w = fd.execute([x, y])
    assert_eager(out_a, x + 1.0)
    assert_eager(out_w, y * 2.0)


def test_an_alias_accepted_after_a_refused_one_is_written():
    # the refused call leaves nothing that the next alias of the same input would trip on
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, 4], contiguity=True)
        w = fd.define_tensor([-1, 5], contiguity=True)
        with pytest.raises(FusionDefinitionError):
            fd.add_output(fd.ops.exp(a), alias_input=w)
        fd.add_output(fd.ops.exp(a))
        fd.add_output(fd.ops.mul(w, 2.0), alias_input=w)
    x, y = make((3, 4)), make((6, 5))
    want_w = y * 2.0
    (out_a,) = fd.execute([x, y])
    assert_eager(out_a, x.exp())
    assert_eager(y, want_w)


@pytest.mark.parametrize("dtype", [DataType.Float8_e4m3fn, DataType.Float8_e5m2])
def test_validate_compares_fp8_outputs(dtype):
    # torch.allclose has no fp8 kernel: validate raised its NotImplementedError
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.cast(fd.ops.mul(t, 1.5), dtype))
    x = make((3, 4))
    want = (x * 1.5).to(dtype.to_torch())
    (out,) = fd.validate([x])  # against fuser's own ATen evaluation
    assert out.dtype == want.dtype and torch.equal(out.view(torch.uint8), want.view(torch.uint8))
    fd.validate([x], [want])
    with pytest.raises(ValidationError, match=r"output 0 \(torch.float8"):
        fd.validate([x], [(x * 3.0).to(want.dtype)])


def test_validate_refuses_a_meta_reference():
    # its values cannot be read: torch's "Cannot copy out of meta tensor" escaped raw
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.exp(t))
        fd.add_output(fd.ops.sum(t, [0]))
    x = make((3, 4))
    with pytest.raises(FusionInputError, match="reference output 0 is a meta tensor"):
        fd.validate([x], [x.exp().to("meta"), x.sum(0)])
    outs = fd.validate([x], [x.exp(), x.sum(0)])
    assert_eager(outs[0], x.exp())
    assert_eager(outs[1], x.sum(0))

"""A Python constant beyond its op's type range in an ATen segment converts as eager converts
it (inf for a float type), rather than raising (torch.full refuses such values)."""
import pytest
import torch

from fuser import DataType, FusionDefinition, FusionDefinitionError
from fuser.runtime import FusionExecutorCache


def test_constants_beyond_fp32_become_inf_as_in_eager():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, 1e300))
        with pytest.raises(FusionDefinitionError, match="does not fit in 64 bits"):
            fd.ops.mul(x, 2**70)  # (eager refuses the int too: OverflowError)
    x = torch.randn(6, generator=torch.Generator().manual_seed(5))
    big, = FusionExecutorCache(fd.fusion, use_kernels=False).execute([x])
    assert torch.equal(big, x * 1e300)
    empty = fd.execute([torch.randn(0)])  # an empty tensor runs through ATen too
    assert all(t.numel() == 0 for t in empty)


def _int(fd, v, dtype=DataType.Int):
    return fd.define_scalar(v, dtype=dtype)


@pytest.mark.parametrize("make, shown", [
    (lambda fd: fd.ops.bitwise_left_shift(_int(fd, 1), _int(fd, 63)), "bitwise_left_shift: .* 9223372036854775808"),
    (lambda fd: fd.ops.abs(_int(fd, -2**63)), "abs: .* 9223372036854775808"),
    (lambda fd: fd.ops.pow(_int(fd, 2), _int(fd, 64)), "pow: .* 18446744073709551616"),
    (lambda fd: fd.ops.mul(_int(fd, 2**62), 2), "mul: .* 9223372036854775808"),
    (lambda fd: fd.ops.bitwise_left_shift(_int(fd, 1, DataType.Int32), _int(fd, 31, DataType.Int32)),
     "Int32 scalar result 2147483648"),
])
def test_a_constant_scalar_result_beyond_its_type_is_refused(make, shown):
    """As an integer operand the kernel's literal wrapped such a result (1 << 63 was -2**63) and
    cast to a Double it kept its value (+2**63): one scalar, two values (fifty-fifth session)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        with pytest.raises(FusionDefinitionError, match=shown):
            make(fd)
        fd.add_output(fd.ops.neg(x))


def test_constant_scalar_results_in_range_fold():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.add(x, fd.ops.mul(_int(fd, 2**61), 3)))
        fd.add_output(fd.ops.add(x, fd.ops.bitwise_left_shift(_int(fd, 1), _int(fd, 62))))
    x = torch.tensor([-2, 5])
    a, b = fd.execute([x])
    assert torch.equal(a, x + 3 * 2**61) and torch.equal(b, x + 2**62)


@pytest.mark.parametrize("use_kernels", [True, False], ids=["kernel", "aten"])
def test_a_size_whose_bytes_pass_int64_is_an_input_error(use_kernels):
    """Each size fits int64 but the element count does not: torch's raw "Storage size
    calculation overflowed" (through ATen an InternalError, fuser's bug) before."""
    from fuser import FusionInputError

    with FusionDefinition() as fd:
        n = fd.define_scalar(DataType.Int)
        fd.add_output(fd.ops.full([n, 4], 2.5, DataType.Float))
    cache = FusionExecutorCache(fd.fusion, use_kernels=use_kernels)
    assert torch.equal(cache.execute([3])[0], torch.full((3, 4), 2.5))
    with pytest.raises(FusionInputError, match="more bytes than a 64-bit size counts"):
        cache.execute([2**62])

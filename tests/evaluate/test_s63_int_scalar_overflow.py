"""An Int scalar computed at execution (a product of Int scalar inputs) past 64 bits that then
becomes a float (a cast, float arithmetic, a float function) is refused, naming the op and the
scalar, as the same constant is when the definition is built: it was rounded to a double
silently, where only a scalar's final integer value was checked against 64 bits."""
import math

import pytest
import torch

from fuser import DataType, FusionDefinition, FusionInputError

BIG = (2**40 + 3, 2**40 + 5)  # each fits int64, their product (about 2**80) does not
SMALL = (2**20 + 3, 2**20 + 5)


def _cast_to_double(fd, p, d):
    return fd.ops.cast(p, DataType.Double)


def _times_double(fd, p, d):
    return fd.ops.mul(p, d)


def _true_divided(fd, p, d):
    return fd.ops.truediv(p, fd.define_scalar(7, dtype=DataType.Int))


def _square_root(fd, p, d):
    return fd.ops.sqrt(p)


FLOATED = {"cast": (_cast_to_double, lambda p, d: float(p)),
           "mul": (_times_double, lambda p, d: p * d),
           "truediv": (_true_divided, lambda p, d: p / 7),
           "sqrt": (_square_root, lambda p, d: math.sqrt(p))}


def _definition(floated, dtype=DataType.Int):
    """t + f(a * b, d): an Int product of two scalar inputs, turned into a Double by `floated`."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Double)
        a, b = fd.define_scalar(dtype=dtype), fd.define_scalar(dtype=dtype)
        d = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.add(t, floated(fd, fd.ops.mul(a, b), d)))
    return fd


def _tensor(seed=0):
    return torch.randn(16, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("op", sorted(FLOATED))
def test_an_int_product_past_64_bits_made_a_float_is_refused(op):
    fd = _definition(FLOATED[op][0])
    with pytest.raises(FusionInputError, match=rf"{op}: the Int scalar \( i1 \* i2 \) = {BIG[0] * BIG[1]} is out "
                                               r"of the range of a 64-bit integer \(with i1 = "):
        fd.execute([_tensor(), *BIG, 1.5])


@pytest.mark.parametrize("op", sorted(FLOATED))
def test_an_int_product_in_range_made_a_float_matches_eager(op):
    floated, eager = FLOATED[op]
    fd = _definition(floated)
    for seed, d in ((1, 1.5), (2, -0.25)):  # (the second call: new values, the fast binder's path)
        t = _tensor(seed)
        out, = fd.execute([t, *SMALL, d])
        torch.testing.assert_close(out, t + eager(SMALL[0] * SMALL[1], d), rtol=1e-12, atol=0)


def test_a_call_in_range_then_past_64_bits_then_in_range_again():
    """The checks run where the inputs are bound, on every call with new scalar values: a call
    after a good one (its ready call keyed by other values) is still refused, and a good one
    after the refusal runs."""
    fd = _definition(_cast_to_double)
    t = _tensor(3)
    torch.testing.assert_close(fd.execute([t, *SMALL, 0.0])[0], t + float(SMALL[0] * SMALL[1]))
    with pytest.raises(FusionInputError, match="cast: the Int scalar"):
        fd.execute([t, *BIG, 0.0])
    with pytest.raises(FusionInputError, match="cast: the Int scalar"):
        fd.execute([t, -BIG[0], BIG[1], 0.0])  # (past -2**63 too)
    torch.testing.assert_close(fd.execute([t, 3, -5, 0.0])[0], t - 15.0)


def test_an_int32_product_past_32_bits_made_a_float_is_refused():
    fd = _definition(_cast_to_double, DataType.Int32)
    with pytest.raises(FusionInputError, match=r"cast: the Int32 scalar \( i1 \* i2 \) = 4294967296, expected "
                                               r"a finite value within \[-2147483648, 2147483647\], the range of its type \(fuser refuses"):
        fd.execute([_tensor(), 2**16, 2**16, 0.0])
    t = _tensor(4)
    torch.testing.assert_close(fd.execute([t, 2**15, 2**15, 0.0])[0], t + 2.0**30)


def test_a_size_computed_through_a_double_of_an_overflowing_product_is_refused():
    """full([(a * b) / c]): the size, 32, fit, so nothing named the 2**65 it came from."""
    with FusionDefinition() as fd:
        a, b, c = (fd.define_scalar(dtype=DataType.Int) for _ in range(3))
        n = fd.ops.truediv(fd.ops.mul(a, b), c)
        fd.add_output(fd.ops.full([n], 2.0, DataType.Float))
    with pytest.raises(FusionInputError, match=r"truediv: the Int scalar \( i0 \* i1 \)"):
        fd.execute([2**33, 2**32, 2**60])
    out, = fd.execute([2**5, 2**6, 2**3])
    torch.testing.assert_close(out, torch.full([2**8], 2.0))


def test_products_of_extents_made_floats_add_no_execution_check():
    """Only integers that depend on a scalar input are checked: a tensor's extents multiply to
    sizes of tensors that exist, and a mean's count is one (no check in every call's binding)."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        count = fd.ops.mul(t.shape()[0], t.shape()[1])
        fd.add_output(fd.ops.div(fd.ops.sum(t, [0, 1]), fd.ops.cast(count, DataType.Double)))
    assert fd.fusion.finite == []
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(fd.execute([x])[0], x.mean())

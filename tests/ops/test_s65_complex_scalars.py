"""A complex scalar where the result is real, and maximum/minimum of complex scalars: refused
when the fusion is defined, as eager refuses them, instead of dropping the imaginary part
(addcmul's value, threshold's threshold and value), an InternalError at execute (clamp's
bound) or a raw sympy ValueError (maximum, minimum). The real forms still match eager."""
import pytest
import torch
import torch.nn.functional as F

from fuser import DataType, FusionDefinition, FusionDefinitionError
from tests.helpers import make, run_and_check

REFUSED = [  # (id, builder of x, y, the complex scalar c; eager, the argument named)
    ("addcmul-value", lambda fd, x, y, c: fd.ops.addcmul(x, x, y, c), lambda x, y, c: torch.addcmul(x, x, y, value=c),
     "addcmul: value"),
    ("threshold-value", lambda fd, x, y, c: fd.ops.threshold(x, 0.5, c), lambda x, y, c: F.threshold(x, 0.5, c),
     "threshold: value"),
    ("threshold-threshold", lambda fd, x, y, c: fd.ops.threshold(x, c, 0.0),
     lambda x, y, c: F.threshold(x, c, 0.0), "threshold: threshold"),
    ("clamp-max", lambda fd, x, y, c: fd.ops.clamp(x, 0.0, c), lambda x, y, c: torch.clamp(x, 0.0, c), "max"),
    ("clamp-min", lambda fd, x, y, c: fd.ops.clamp(x, c, y), lambda x, y, c: torch.clamp(x, c, 1.0), "min"),
]


@pytest.mark.parametrize("scalar", ["constant", "input"])
@pytest.mark.parametrize("build,eager,named", [pytest.param(b, e, n, id=i) for i, b, e, n in REFUSED])
def test_complex_scalar_for_a_real_result_is_refused(build, eager, named, scalar):
    x, y = make((3, 4)), make((3, 4))
    with pytest.raises(RuntimeError):  # (eager: "value cannot be converted to type float")
        eager(x, y, 2 + 1j)
    with pytest.raises(FusionDefinitionError, match=named) as info:
        with FusionDefinition() as fd:
            c = fd.define_scalar(2 + 1j) if scalar == "constant" else fd.define_scalar(DataType.ComplexDouble)
            fd.add_output(build(fd, fd.from_pytorch(x), fd.from_pytorch(y), c))
    assert "complex" in str(info.value)


def test_clamp_of_a_complex_tensor_is_refused_when_defined():
    with pytest.raises(RuntimeError, match="complex"):
        torch.clamp(torch.randn(3, dtype=torch.complex64), 0.0, 1.0)
    with pytest.raises(FusionDefinitionError, match="clamp: not defined for complex operands, got input T0"):
        with FusionDefinition() as fd:
            fd.add_output(fd.ops.clamp(fd.define_tensor([3], dtype=DataType.ComplexFloat), 0.0, 1.0))


def test_real_scalars_still_match_eager():
    x, y = make((3, 4)), make((3, 4))
    run_and_check(lambda fd, a, b: [fd.ops.addcmul(a, a, b, 2.5), fd.ops.threshold(a, 0.25, -1.5),
                                    fd.ops.clamp(a, -0.5, b)],
                  lambda a, b: [torch.addcmul(a, a, b, value=2.5), F.threshold(a, 0.25, -1.5),
                                torch.clamp(a, torch.full_like(a, -0.5), b)], [x, y])


def test_complex_value_of_complex_tensors_still_match_eager():
    x, y = torch.randn(3, 4, dtype=torch.complex64), torch.randn(3, 4, dtype=torch.complex64)
    with FusionDefinition() as fd:
        a, b = fd.from_pytorch(x), fd.from_pytorch(y)
        fd.add_output(fd.ops.addcmul(a, a, b, 2 + 1j))
    torch.testing.assert_close(fd.execute([x, y])[0], torch.addcmul(x, x, y, value=2 + 1j), rtol=1e-5, atol=1e-5)


# -- maximum and minimum of scalars: complex numbers have no order ------------------------------

@pytest.mark.parametrize("op", ["maximum", "minimum"])
@pytest.mark.parametrize("operands", [(-3, 1 + 2j), (1j, 1 + 2j), (0.5, None)],
                         ids=["int-complex", "complex-complex", "float-complex-input"])
def test_maximum_minimum_of_complex_scalars_is_refused(op, operands):
    with pytest.raises(RuntimeError, match="not implemented for complex"):
        getattr(torch, op)(torch.tensor(-3), torch.tensor(1 + 2j))
    fd = FusionDefinition()
    a, b = operands
    b = fd.define_scalar(DataType.ComplexDouble) if b is None else fd.define_scalar(b)
    with pytest.raises(FusionDefinitionError, match=f"{op}: not defined for complex operands"):
        getattr(fd.ops, op)(a, b)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_of_real_scalars_still_computed(op):
    x = make((5,))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.mul(fd.from_pytorch(x), getattr(fd.ops, op)(-3, fd.define_scalar(0.5))))
    torch.testing.assert_close(fd.execute([x])[0], x * (0.5 if op == "maximum" else -3.0))

"""Operands of two dtypes (sixty-fifth session), each against eager PyTorch. torch's
decompositions promote them where eager's kernels do not: heaviside, linalg.cross and mv (a
matmul of a matrix and a vector) computed in the promoted type where eager refuses the pair,
and huber_loss and soft_margin_loss returned the promoted type where eager writes the loss in
the input's (backend.py `decompositions`: `_whole_for_mixed_dtypes`, `_loss_of_input_dtype`,
`_whole_for_other_target_type`)."""
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from tests.helpers import COMPILERS, assert_eager, assert_raises_as_eager, fresh_jit, make

SHAPE = (5, 3)
PAIRS = [(torch.bfloat16, torch.float32), (torch.float32, torch.float64), (torch.float16, torch.bfloat16),
         (torch.int32, torch.int64)]


def _pair_id(pair):
    return "-".join(str(d).removeprefix("torch.") for d in pair)


# -- ops eager refuses for operands of two dtypes --------------------------------------------


_TWO_OPERANDS = {
    "heaviside": lambda a, b: torch.heaviside(a, b),
    "heaviside_": lambda a, b: (b * 1).heaviside_(a),
    "linalg.cross": lambda a, b: torch.linalg.cross(a, b),
    "cross_dim": lambda a, b: torch.cross(a, b, dim=1) + 1,
    "mv": lambda a, b: torch.mv(a, b[0]),
    "matmul_2d_1d": lambda a, b: torch.matmul(a * 2, b[0]),
    "matmul_3d_1d": lambda a, b: torch.matmul(a[None], b[1]),
}


def _operands(pair):
    a, b = (make(SHAPE) * 4).to(pair[0]), (make(SHAPE) * 4).to(pair[1])
    return a, b


@pytest.mark.parametrize("pair", PAIRS, ids=_pair_id)
@pytest.mark.parametrize("case", list(_TWO_OPERANDS))
def test_operands_of_two_dtypes_raise_as_eager(case, pair):
    assert_raises_as_eager("jit", _TWO_OPERANDS[case], *_operands(pair))


@pytest.mark.parametrize("case", ["heaviside", "linalg.cross", "mv"])
def test_operands_of_two_dtypes_raise_as_eager_in_torch_compile(case):
    assert_raises_as_eager("torch.compile", _TWO_OPERANDS[case], *_operands(PAIRS[0]))


@pytest.mark.parametrize("case,dtype", [("heaviside", torch.complex64), ("linalg.cross", torch.bool),
                                        ("mv", torch.bool)])
def test_a_dtype_eager_has_no_kernel_of_raises_as_eager(case, dtype):
    # the decompositions computed a bool mv, and failed a complex heaviside and a bool cross in
    # another op, with another error
    a, b = _operands((dtype, dtype)) if dtype.is_complex else (make(SHAPE, dtype), make(SHAPE, dtype))
    assert_raises_as_eager("jit", _TWO_OPERANDS[case], a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("case", ["heaviside", "linalg.cross", "mv", "matmul_2d_1d"])
def test_operands_of_one_dtype_compute_as_eager(case, dtype):
    # (a heaviside input with zeros, where the values operand is taken)
    a, b = (make(SHAPE) * 2).round().to(dtype), (make(SHAPE) * 2).to(dtype)
    fn = _TWO_OPERANDS[case]
    assert_eager(fresh_jit(fn)(a, b), fn(a, b))


# -- huber_loss and soft_margin_loss of a target of another type: the input's type -----------


_LOSSES = {
    **{f"huber_{reduction}_delta_{delta}": (lambda r, d: lambda x, t: F.huber_loss(x, t, reduction=r, delta=d))(
        reduction, delta) for reduction in ("mean", "sum", "none") for delta in (1.0, 0.6)},
    **{f"soft_margin_{reduction}": (lambda r: lambda x, t: F.soft_margin_loss(x, t, reduction=r))(reduction)
       for reduction in ("mean", "sum", "none")},
}
_LOSS_PAIRS = [(torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.float64),
               (torch.float16, torch.bfloat16), (torch.float32, torch.bfloat16)]


def _loss_operands(pair):
    # (|x * t| < 11: eager's soft margin loss of a half input overflows its exp in half beyond)
    return make((6, 7)).clamp(-3, 3).to(pair[0]), make((6, 7)).clamp(-3, 3).to(pair[1])


def _one_rounding_apart(actual, expected):
    """eager's soft margin kernel rounds each step (neg, mul, exp, log1p) to the input's type, the
    decomposition once: a unit in the last place of the result apart."""
    assert_eager(actual, expected, rtol=2 * torch.finfo(expected.dtype).eps)


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("pair", _LOSS_PAIRS, ids=_pair_id)
@pytest.mark.parametrize("case", list(_LOSSES))
def test_a_loss_of_a_target_of_another_type_has_the_inputs_type(case, pair, compiler):
    fn = _LOSSES[case]
    x, t = _loss_operands(pair)
    _one_rounding_apart(COMPILERS[compiler](fn)(x, t), fn(x, t))


@pytest.mark.parametrize("case", [c for c in _LOSSES if c.startswith("huber")])
def test_huber_backward_of_a_target_of_another_type_raises_as_eager(case):
    # eager computes the forward and refuses the backward ("Found dtype Float but expected
    # BFloat16"): fuser's backward raises it, its forward computes eager's value
    fn = _LOSSES[case]
    x, t = _loss_operands(_LOSS_PAIRS[0])
    xe, xf = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yf = fn(xe, t), fresh_jit(fn)(xf, t)
    assert_eager(yf.detach().to(ye.dtype), ye.detach())
    with pytest.raises(RuntimeError) as eager:
        ye.sum().backward()
    with pytest.raises(RuntimeError) as ours:
        yf.sum().backward()
    assert str(eager.value).splitlines()[0] in str(ours.value)


@pytest.mark.parametrize("pair", _LOSS_PAIRS[:3], ids=_pair_id)
@pytest.mark.parametrize("case", [c for c in _LOSSES if c.startswith("soft_margin")])
def test_soft_margin_gradient_of_a_target_of_another_type_as_eager(case, pair):
    # training keeps the promoted type (AOTAutograd traces the backward for a gradient of the
    # type torch's meta function gives), eager's values in it; the gradient is eager's
    fn = _LOSSES[case]
    x, t = _loss_operands(pair)
    xe, xf = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yf = fn(xe, t), fresh_jit(fn)(xf, t)
    _one_rounding_apart(yf.detach().to(ye.dtype), ye.detach())
    g = make(ye.shape)
    ye.backward(g.to(ye.dtype))
    yf.backward(g.to(yf.dtype))
    assert_eager(xf.grad, xe.grad, rtol=4 * torch.finfo(x.dtype).eps, atol=torch.finfo(x.dtype).eps)

"""Integer and bool tensors in add's alpha, addcmul_'s value and in-place ops (sixty-third
session), each against eager PyTorch: eager converts addcmul_'s value to the tensors' type
(int(1.5) = 1), and refuses a float or bool alpha of an integer sum, an in-place result its
tensor cannot hold (`x.mul_(2.5)` of an int x) and an integer addcdiv, where fuser computed
truncated values (rules/pointwise.py `_scaled`; backend.py `_check_dynamo_rewrites` and
`_writes_uncastable_result`)."""
import pytest
import torch
import torch._dynamo

from tests.helpers import COMPILERS, assert_eager, fresh_jit, make

SHAPE = (4, 33)




# -- addcmul_'s value in the tensors' type ---------------------------------------------------


def _addcmul_(value):
    def fn(x, t1, t2):
        x.addcmul_(t1, t2, value=value)
        return x * 2
    return fn


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("value", [1.5, 0.5, -2.5, True, 3])
def test_integer_addcmul_in_place_takes_its_value_as_an_integer(compiler, dtype, value):
    fn = _addcmul_(value)
    x, t1, t2 = make(SHAPE, dtype), make(SHAPE, dtype), make(SHAPE, dtype)
    xe, xf = x.clone(), x.clone()
    out = COMPILERS[compiler](fn)(xf, t1, t2)
    assert_eager(out, fn(xe, t1, t2))
    assert_eager(xf, xe)


def test_integer_addcmul_in_place_keeps_every_digit():
    # int32 values past 2^24, which a sum in fp32 (the traced type of an fma with a float
    # value) would round
    fn = _addcmul_(1.5)
    x = make(SHAPE, torch.int32) + (1 << 25) + 1
    t1, t2 = make(SHAPE, torch.int32), make(SHAPE, torch.int32)
    xe, xf = x.clone(), x.clone()
    out = fresh_jit(fn)(xf, t1, t2)
    assert_eager(out, fn(xe, t1, t2))
    assert_eager(xf, xe)


# -- eager's refusals, raised as eager raises them ---------------------------------------------


def _int(): return make(SHAPE, torch.int32)  # noqa: E704
def _float(): return make(SHAPE)  # noqa: E704
def _bool(): return make(SHAPE, torch.bool)  # noqa: E704


def _imul(x, y):
    x *= 2.0
    return x


# add's and sub's alpha: a float one for an integer result, a bool one for a non-bool result
# (fuser.jit's: torch.compile's Dynamo traces a float alpha as a symbol, and its fake-tensor
# run refuses it before any backend sees the graph)
ALPHA_REFUSED = {
    "add alpha 2.5": (lambda x, y: torch.add(x, y, alpha=2.5), _int, _int),
    "add alpha 1.0": (lambda x, y: torch.add(x, y, alpha=1.0), _int, _int),
    "sub alpha 2.5": (lambda x, y: torch.sub(x, y, alpha=2.5), _int, _int),
    "rsub alpha 2.5": (lambda x, y: torch.rsub(x, y, alpha=2.5), _int, _int),
    "add_ alpha 2.5": (lambda x, y: x.add_(y, alpha=2.5) + 0, _int, _int),
    "add alpha True": (lambda x, y: torch.add(x, y, alpha=True), _int, _int),
    "float add alpha True": (lambda x, y: torch.add(x, y, alpha=True), _float, _float),
}
REFUSED = {
    # in-place results the tensor's type cannot hold
    "mul_ 2.5": (lambda x, y: x.mul_(2.5) + 0, _int, _int),
    "*= 2.0": (lambda x, y: _imul(x, y) + 0, _int, _int),
    "mul_ float tensor": (lambda x, y: x.mul_(y) + 0, _int, _float),
    "bool mul_ 2": (lambda x, y: x.mul_(2) + 0, _bool, _int),
    "addcmul_ float tensor": (lambda x, y: x.addcmul_(y, x) + 0, _int, _float),
    "addcmul_ float tensor, value": (lambda x, y: x.addcmul_(y, x, value=2) + 0, _int, _float),
    "addcmul_ value out of int32": (lambda x, y: x.addcmul_(y, y, value=1e12) + 0, _int, _int),
    "bool addcmul_": (lambda x, y: x.addcmul_(y, y, value=2) + 0, _bool, _bool),
    "add_ float tensor alpha": (lambda x, y: x.add_(y, alpha=torch.tensor(2.5)) + 0, _int, _int),
    # integer quotients of addcdiv
    "addcdiv": (lambda x, y: torch.addcdiv(x, x, y, value=2), _int, _int),
    "addcdiv_": (lambda x, y: x.addcdiv_(y, y, value=2) + 0, _float, _int),
    "int addcdiv_": (lambda x, y: x.addcdiv_(y, y, value=2) + 0, _int, _int),
}


@pytest.mark.parametrize("compiler, case", [("jit", case) for case in ALPHA_REFUSED] +
                         [(compiler, case) for compiler in COMPILERS for case in REFUSED])
def test_what_eager_refuses_raises_eagers_error(compiler, case):
    fn, x, y = {**ALPHA_REFUSED, **REFUSED}[case]
    x, y = x(), y()
    with pytest.raises(Exception) as eager:
        fn(x.clone(), y.clone())
    xf = x.clone()
    with pytest.raises(Exception) as ours:
        COMPILERS[compiler](fn)(xf, y)
    assert str(eager.value).splitlines()[0] in str(ours.value)
    if compiler == "jit":  # (torch.compile wraps a backend's error in its BackendCompilerFailed)
        assert type(ours.value) is type(eager.value)
    assert torch.equal(xf, x)  # (eager raises before it writes)


# -- what eager computes still fuses ---------------------------------------------------------


def _addcdiv_by_hand(x, a, b):
    return torch.add(x, torch.mul(torch.div(a, b), 2))  # (one line, as Dynamo's addcdiv is)


ACCEPTED = {
    "int mul_ 2": (lambda x, y: x.mul_(2) + 0, _int, _int),
    "float mul_ int tensor": (lambda x, y: x.mul_(y) + 0, _float, _int),
    "int add alpha 2": (lambda x, y: torch.add(x, y, alpha=2), _int, _int),
    "bool add alpha True": (lambda x, y: torch.add(x, y, alpha=True), _bool, _bool),
    "float addcmul_ int tensors": (lambda x, y: x.addcmul_(y, y, value=0.5) + 0, _float, _int),
    "float addcdiv_": (lambda x, y: x.addcdiv_(y, y.abs() + 1, value=-0.5) + 0, _float, _float),
    "int addcdiv by hand": (lambda x, y: _addcdiv_by_hand(x, x, y), _int, lambda: make(SHAPE, torch.int32, nonzero=True)),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_what_eager_computes_fuses(case):
    fn, x, y = ACCEPTED[case]
    x, y = x(), y()
    xe, xf = x.clone(), x.clone()
    jitted = fresh_jit(fn)
    assert_eager(jitted(xf, y), fn(xe, y))
    assert_eager(xf, xe)
    assert jitted.cache_info().fusions >= 1

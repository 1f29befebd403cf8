"""torch.linalg.vector_norm, torch.norm and Tensor.norm of an order other than 1, 2 and inf
(sixty-fifth session): 0, -inf, fractional, larger and negative orders ran as an ATen call
between fusions (the rule refused them). Each fuses now, with eager's values on rows holding
zeros, NaN and inf, eager's dtypes (a bf16 norm computed in fp32) and eager's gradients.
(An int order other than 0 and 1 held in a closure or passed as an argument is traced as a
symbol, whose value nothing guards: the tests parametrized by ORDERS take that path for their
int orders; `test_orders_written_as_literals` the path of a known order.)"""
import pytest
import torch
import torch._dynamo

import fuser
from tests.helpers import assert_eager, make

ORDERS = [0, 0.5, 3, 1.5, -1, -2, float("-inf")]
ORDER_IDS = ["0", "0.5", "3", "1.5", "-1", "-2", "-inf"]


def _fused(fn, *args):
    """fn under fuser.jit on args, checked to run without an ATen call between fusions."""
    torch._dynamo.reset()
    jitted = fuser.jit(fn)
    got = jitted(*args)
    info = jitted.cache_info()
    assert info.fallback_ops == 0 and info.kernels >= 1, str(fuser.explain(jitted, *args))
    return got


def _with_special_rows(shape):
    """Random rows, then rows holding a zero, all zeros, a NaN, an inf and a -inf."""
    x = make(shape)
    x[0] = 0
    x[1, 3] = 0
    x[2, 5] = float("nan")
    x[3, 1] = float("inf")
    x[4, 2] = float("-inf")
    x[5, 0], x[5, 1] = 0, float("inf")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("p", ORDERS, ids=ORDER_IDS)
def test_vector_norm_of_any_order_fuses(p, dtype):
    fn = lambda t: torch.linalg.vector_norm(t * 2, ord=p, dim=-1)  # noqa: E731
    x = make((8, 100), dtype)
    assert_eager(_fused(fn, x), fn(x))


@pytest.mark.parametrize("p", ORDERS, ids=ORDER_IDS)
def test_rows_with_zeros_nan_and_inf_take_eager_values(p):
    # a negative order's zero is an inf term (norm 0), the count of order 0 takes NaN as nonzero
    fn = lambda t: torch.linalg.vector_norm(t, ord=p, dim=1)  # noqa: E731
    x = _with_special_rows((8, 40))
    assert_eager(_fused(fn, x), fn(x))


LITERALS = {
    "0": lambda t: torch.linalg.vector_norm(t, 0, -1),
    "3": lambda t: torch.linalg.vector_norm(t, 3, -1),
    "-2": lambda t: torch.linalg.vector_norm(t, -2, -1),
    "4_keepdim": lambda t: torch.linalg.vector_norm(t, 4, 0, keepdim=True),
}


@pytest.mark.parametrize("name", list(LITERALS))
def test_orders_written_as_literals(name):
    fn = LITERALS[name]
    x = _with_special_rows((8, 40))
    assert_eager(_fused(fn, x), fn(x))


def test_order_passed_as_an_argument_takes_each_value():
    # 3 and 5 share a trace (Dynamo guards only the order's sign, parity and != 0): the kernel
    # reads the order at execution
    torch._dynamo.reset()
    fn = lambda t, p: torch.linalg.vector_norm(t * 2, ord=p, dim=-1)  # noqa: E731
    jitted = fuser.jit(fn)
    x = _with_special_rows((8, 40))
    for p in (3, 5):
        assert_eager(jitted(x, p), fn(x, p))
    assert jitted.cache_info().graphs == 1
    for p in (-2, -1, 2, 0):
        assert_eager(jitted(x, p), fn(x, p))
    assert jitted.cache_info().fallback_ops == 0, jitted.cache_info()


@pytest.mark.parametrize("p", [0, 3, -2, float("-inf")], ids=["0", "3", "-2", "-inf"])
def test_dim_tuple_keepdim_and_dtype(p):
    fn = lambda t: (torch.linalg.vector_norm(t, ord=p, dim=(0, 2), keepdim=True),  # noqa: E731
                    torch.linalg.vector_norm(t, ord=p, dim=1, dtype=torch.float32))
    x = make((4, 30, 3), torch.bfloat16)
    for got, want in zip(_fused(fn, x), fn(x)):
        assert_eager(got, want)


@pytest.mark.parametrize("p", [0.5, 3, -1, 0], ids=["0.5", "3", "-1", "0"])
def test_torch_norm_and_tensor_norm(p):
    fn = lambda t: (torch.norm(t, p), t.norm(p, 1), t.norm(p, 0, keepdim=True))  # noqa: E731
    x = make((6, 50))
    for got, want in zip(_fused(fn, x), fn(x)):
        assert_eager(got, want)


@pytest.mark.parametrize("p", [3, 2, -2, 0, 3.0], ids=["3", "2", "-2", "0", "3.0"])
def test_norm_over_one_element_is_its_magnitude(p):
    # eager returns |x| itself where each norm is of one element: 1e15 ** 3 would overflow
    fn = lambda t: (torch.linalg.vector_norm(t[:, :1] * 1e15, ord=p, dim=1),  # noqa: E731
                    torch.linalg.vector_norm(t[:1, :1] * 1e15, ord=p, keepdim=True))
    x = _with_special_rows((6, 20))
    for got, want in zip(_fused(fn, x), fn(x)):
        assert_eager(got, want)


@pytest.mark.parametrize("p", [0.5, 3, 1.5, -1, -2, float("-inf")], ids=["0.5", "3", "1.5", "-1", "-2", "-inf"])
def test_backward_matches_eager_at_zeros(p):
    # eager's gradient at a zero is 0, or NaN where the row has a NaN or inf; a zero row's 0
    fn = lambda t: torch.linalg.vector_norm(t * 2, ord=p, dim=-1) * 3  # noqa: E731
    x = _with_special_rows((8, 40))
    x[4, 2] = 0.5  # (the -inf's gradient is NaN alike, but exercises nothing new)
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch._dynamo.reset()
    jitted = fuser.jit(fn)
    got, want = jitted(ours), fn(theirs)
    assert_eager(got, want)
    grad = make(want.shape)
    got.backward(grad)
    want.backward(grad)
    assert_eager(ours.grad, theirs.grad)
    info = jitted.cache_info()
    assert info.fallback_ops == 0 and info.kernels >= 2, info

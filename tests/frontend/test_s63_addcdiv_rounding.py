"""Out-of-place `torch.addcdiv(x, t1, t2, value=v)` on half and bf16 tensors rounds once, as
eager's kernel does: Dynamo traces it as add(x, mul(div(t1, t2), v)), three roundings, a fifth
of the elements a unit off; fuser puts the call back (frontend/eager_checks.py)."""
import pytest
import torch

import fuser


def _addcdiv(x, a, b):
    return torch.addcdiv(x, a, b, value=0.37)


def _written_out(x, a, b):
    # the user's own three ops, on one line as Dynamo's rewrite is: eager rounds each
    return torch.add(x, torch.mul(torch.div(a, b), 0.37))


def _operands(dtype, requires_grad=False):
    x, a, b = (torch.randn(4096, dtype=dtype) for _ in range(3))
    b = b.abs() + 0.5
    return [t.requires_grad_(requires_grad) for t in (x, a, b)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("fn", [_addcdiv, _written_out], ids=["addcdiv", "written_out"])
def test_addcdiv_rounds_as_eager(dtype, fn):
    torch._dynamo.reset()
    jitted = fuser.jit(fn)
    args = _operands(dtype)
    want = fn(*args)
    got = jitted(*args)
    assert got.dtype == want.dtype
    assert torch.equal(got, want), f"{(got != want).sum().item()} of {want.numel()} elements differ"
    assert jitted.cache_info().fallback_ops == 0


def test_addcdiv_gradients_as_eager():
    torch._dynamo.reset()
    jitted = fuser.jit(_addcdiv)
    args = _operands(torch.bfloat16, requires_grad=True)
    twins = [t.detach().clone().requires_grad_() for t in args]
    grad = torch.randn(4096, dtype=torch.bfloat16)
    jitted(*args).backward(grad)
    _addcdiv(*twins).backward(grad)
    for got, want in zip(args, twins):
        torch.testing.assert_close(got.grad, want.grad, rtol=1.6e-2, atol=1e-2)


def test_the_users_own_three_ops_without_a_source_file_keep_their_roundings():
    """Code with no source file (exec, python -c) records positions without column markers, so
    every node of a line has the same one: the user's own add(x, mul(div(a, b), v)) there was
    taken for Dynamo's addcdiv (review)."""
    namespace = {"torch": torch}
    exec("def written(x, a, b):\n    return torch.add(x, torch.mul(torch.div(a, b), 0.37))\n", namespace)
    written = namespace["written"]
    torch._dynamo.reset()
    args = _operands(torch.bfloat16)
    got = fuser.jit(written)(*args)
    assert torch.equal(got, written(*args)), f"{(got != written(*args)).sum().item()} elements differ"

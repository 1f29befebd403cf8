"""Llama's complex rotary embedding, `view_as_real(view_as_complex(x) * freqs_cis)`, fuses: the
product runs as real arithmetic on the pairs (frontend/complex_products.py). It ran as an ATen
complex multiply between fusions: no kernel at all in fp32, three passes in bf16."""
import pytest
import torch

import fuser
from tests.helpers import make


def rotary(h, freqs_cis):
    xq = h * 1.5  # (a projection's output: pairs of a fresh tensor)
    pairs = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    rotation = freqs_cis.view(1, pairs.shape[1], 1, pairs.shape[-1])
    return torch.view_as_real(pairs * rotation).flatten(3).type_as(xq)


def rotary_rotation_first(h, freqs_cis):
    xq = h * 1.5
    pairs = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    return torch.view_as_real(torch.mul(freqs_cis[None, :, None], pairs)).flatten(3).type_as(xq)


def _freqs(s, half, dtype=torch.float32):
    return torch.polar(torch.ones(s, half, dtype=dtype), make((s, half), dtype=dtype) * 3)


@pytest.mark.parametrize("fn", [rotary, rotary_rotation_first])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_complex_rotary_fuses_and_matches_eager(fn, dtype):
    b, s, h, d = 2, 8, 2, 16
    freqs = _freqs(s, d // 2)
    x = make((b, s, h, d), dtype=dtype).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    jitted = fuser.jit(fn)
    out, theirs = jitted(x, freqs), fn(x_eager, freqs)
    torch.testing.assert_close(out, theirs)
    g = make(out.shape, dtype=dtype)
    out.backward(g)
    theirs.backward(g)
    torch.testing.assert_close(x.grad, x_eager.grad)
    info = jitted.cache_info()
    assert info.kernels >= 1 and info.fusions == 2, info  # (one fusion each way)


def test_a_learned_complex_factor_gets_its_gradient():
    x, z = make((3, 4, 2)), torch.complex(make((3, 4)), make((3, 4))).requires_grad_()
    z_eager = z.detach().clone().requires_grad_()

    def f(x, z):
        return torch.view_as_real(torch.view_as_complex(x) * z).sum(-1)

    out = fuser.jit(f)(x, z)
    theirs = f(x, z_eager)
    torch.testing.assert_close(out, theirs)
    out.sum().backward()
    theirs.sum().backward()
    torch.testing.assert_close(z.grad, z_eager.grad)


def test_a_complex_product_used_as_complex_stays_complex():
    x, z = make((3, 4, 2)), torch.complex(make((3, 4)), make((3, 4)))

    def f(x, z):
        p = torch.view_as_complex(x) * z
        return torch.view_as_real(p) * 2, p.abs()

    out, magnitude = fuser.jit(f)(x, z)
    theirs, their_magnitude = f(x, z)
    torch.testing.assert_close(out, theirs)
    torch.testing.assert_close(magnitude, their_magnitude)


def test_double_pairs_by_complex128_and_special_values():
    x = make((5, 3, 2), dtype=torch.float64)
    x[0, 0, 0] = float("inf")
    x[1, 1, 1] = float("nan")
    z = torch.complex(make((5, 3), dtype=torch.float64), make((5, 3), dtype=torch.float64))

    def f(x, z):
        return torch.view_as_real(torch.view_as_complex(x) * z)

    torch.testing.assert_close(fuser.jit(f)(x, z), f(x, z), equal_nan=True)


def test_a_write_between_the_product_and_its_real_view_is_not_read():
    # the real form was computed at the view_as_real, after the write (a review's find)
    def f(x, z):
        p = torch.view_as_complex(x) * z
        x.add_(1)
        z.mul_(2)
        return torch.view_as_real(p)

    x, z = make((3, 4, 2)), torch.complex(make((3, 4)), make((3, 4)))
    x2, z2 = x.clone(), z.clone()
    torch.testing.assert_close(fuser.jit(f)(x, z), f(x2, z2))
    torch.testing.assert_close(x, x2)
    torch.testing.assert_close(z, z2)


def test_pairs_of_an_argument_keep_view_as_complex_and_its_checks():
    # an argument's storage offset is not fixed by the trace, and view_as_complex refuses an
    # odd one: the product stays complex there (the real form would drop the check)
    def f(x, z):
        return torch.view_as_real(torch.view_as_complex(x) * z)

    z = torch.complex(make((4, 4)), make((4, 4)))
    jitted = fuser.jit(f)
    x = make((4, 4, 2))
    torch.testing.assert_close(jitted(x, z), f(x, z))
    odd = make((33,))[1:].view(4, 4, 2)
    with pytest.raises(RuntimeError, match="storage_offset divisible by 2"):
        jitted(odd, z)


def test_a_transposed_product_keeps_its_layout():
    def f(h, z):
        q = (h * 2).transpose(1, 2)
        rotated = torch.view_as_real(torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2)) * z)
        return rotated.transpose(1, 2).reshape(2, 4, -1)

    h, z = make((2, 4, 3, 8)), torch.complex(make((4, 4)), make((4, 4)))
    torch.testing.assert_close(fuser.jit(f)(h, z), f(h, z))

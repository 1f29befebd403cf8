"""Cases found by review that once failed under fuser.jit."""
import torch

import fuser


def test_python_float_assigned_into_a_slice():
    def f(a):
        a[:, 0] = 7.0
        a[1:, 2:4] = torch.tensor(9.0)
        return a.sum()

    x = torch.randn(3, 5)
    y = x.clone()
    got = fuser.jit(f)(x)
    torch.testing.assert_close(got, f(y))
    torch.testing.assert_close(x, y)  # the argument was updated in place, as eager does


def test_grouped_query_attention_repeat_kv():
    def repeat_kv(h):
        b, kvh, s, d = h.shape
        return h[:, :, None].expand(b, kvh, 2, s, d).reshape(b, kvh * 2, s, d)

    def attention_scores(q, k):
        return torch.softmax(q @ repeat_kv(k).transpose(-1, -2), -1)

    q, k = torch.randn(2, 6, 4, 5), torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(fuser.jit(attention_scores)(q, k), attention_scores(q, k))


def test_gather_and_cross_entropy_with_an_index_out_of_range_give_nan_not_a_value():
    """Eager raises on an index out of range; a fused kernel cannot raise, so fuser's one-hot
    gather gives NaN (and a NaN loss) instead of a plausible 0."""
    def pick(x, idx):
        return x.gather(1, idx) * 2.0

    def loss(logits, target):
        return torch.nn.functional.cross_entropy(logits, target)

    x = torch.randn(4, 7)
    good = torch.randint(0, 7, (4, 1))
    bad = good.clone()
    bad[1, 0], bad[3, 0] = 7, 12
    jitted = fuser.jit(pick)
    torch.testing.assert_close(jitted(x, good), pick(x, good))
    out = jitted(x, bad)
    assert torch.isnan(out[1, 0]) and torch.isnan(out[3, 0])
    torch.testing.assert_close(out[[0, 2]], pick(x, good)[[0, 2]])
    jitted_loss = fuser.jit(loss)
    target = torch.randint(0, 7, (4,))
    torch.testing.assert_close(jitted_loss(x, target), loss(x, target))
    target[2] = 9
    assert torch.isnan(jitted_loss(x, target))
    target[2] = -100  # ignore_index stays ignored
    torch.testing.assert_close(jitted_loss(x, target), loss(x, target))


def test_cross_entropy_over_one_class():
    # logits [6, 1]: the one-hot's iota spans no loop axis; its index was a bare `0`, and
    # `0.to(tl.int64)` is not Python (found by review)
    import torch.nn.functional as F

    def f(x, t):
        return F.cross_entropy(x, t)

    x = torch.randn(6, 1)
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    t = torch.zeros(6, dtype=torch.long)
    got, want = fuser.jit(f)(xj, t), f(xe, t)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, xj)[0], torch.autograd.grad(want, xe)[0])


def test_a_flattening_view_whose_size_is_another_input_s_extent():
    # the backward reshapes the input's [4, 3, 8] values to the tangent's [96]: unifying the
    # element counts replaced the tangent's extent symbol, but the reshape's output ids were
    # made after that with the old symbol, which no input binds (InternalError; found by review)
    def f(x):
        y = (x - x.amax(-1, keepdim=True)).abs().view(-1)
        z = -y
        return z - z.amax(-1, keepdim=True)

    x = torch.randn(4, 3, 8)
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn(96)
    got, want = fuser.jit(f)(xj), f(xe)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(torch.autograd.grad(got, xj, g)[0], torch.autograd.grad(want, xe, g)[0])

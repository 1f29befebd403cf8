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

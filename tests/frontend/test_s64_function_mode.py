"""A user's TorchFunctionMode around fuser.jit calls sees the calls the user's code makes, not
fuser's own reads of each argument's layout and device (`untraceable_argument`)."""
import torch
from torch.overrides import TorchFunctionMode

from tests.helpers import fresh_jit


class Recorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def fn(x, w):
    return torch.relu(x @ w) + 1


def test_a_function_mode_sees_the_user_s_calls_only():
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    with Recorder() as eager:
        want = fn(x, w)
    jitted = fresh_jit(fn)
    for _ in range(3):  # (the first call, and the repeat ones)
        with Recorder() as seen:
            got = jitted(x, w)
        torch.testing.assert_close(got, want)
        assert seen.names == eager.names, seen.names


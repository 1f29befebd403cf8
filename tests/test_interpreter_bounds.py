"""The test-time bounds check of interpreted kernels (tests/interpreter_bounds.py) catches a
load or store past every tensor argument and lets in-bounds ones through."""
import pytest
import torch

from fuser.codegen.compile import load_kernel

from .interpreter_bounds import OutOfBoundsAccess, install

SOURCE = """
import triton
import triton.language as tl


def copy_shifted(x_ptr, y_ptr, n, shift, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i + shift, mask=m, other=0.0), mask=m)
"""


def test_an_access_past_the_tensors_raises_and_one_inside_does_not():
    if not install():
        pytest.skip("this Triton's interpreter has other internals")
    kernel = load_kernel("copy_shifted", SOURCE, "interpreter", ["n", "shift"])
    x, y = torch.randn(8), torch.empty(8)
    kernel[(1,)](x, y, 8, 0, BLOCK=8)
    torch.testing.assert_close(y, x)
    # the interpreter re-raises what a kernel raises as an InterpreterError quoting it
    with pytest.raises(Exception, match=f"{OutOfBoundsAccess.__name__}.*load outside every tensor argument "
                                        "in copy_shifted"):
        kernel[(1,)](x, y, 8, 100000, BLOCK=8)

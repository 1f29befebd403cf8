"""On a GPU, a repeat call of a single-kernel fusion is one generated function that allocates
its outputs and calls Triton's C launcher inline (runtime/ready.py ReadyCall,
codegen/inline.py). It must take the prepared launch instead where the
kernel's assumptions no longer hold: an input pointer that lost its alignment, a launch hook
installed since. Every call gets fresh data and is compared with eager."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.ready import ReadyCall

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _scaled_exp_and_row_sums():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        e = fd.ops.mul(fd.ops.exp(x), y)
        fd.add_output(e)
        fd.add_output(fd.ops.sum(e, [1]))
        fd.add_output(y)  # an input handed back as it is
    return fd


def _check(fd, x, y) -> None:
    e, total, same = fd.execute([x, y])
    want = torch.exp(x) * y
    torch.testing.assert_close(e, want)
    torch.testing.assert_close(total, want.sum(1), rtol=1e-5, atol=1e-4)
    assert same is y


def _ready_call(fd) -> ReadyCall:
    (ready,) = fd.cache.ready_calls()
    assert isinstance(ready, ReadyCall)
    return ready


def test_a_repeat_call_launches_inline():
    fd = _scaled_exp_and_row_sums()
    g = torch.Generator(device="cuda").manual_seed(3)
    for _ in range(4):
        _check(fd, torch.randn(37, 300, device="cuda", generator=g), torch.randn(37, 300, device="cuda", generator=g))
    assert _ready_call(fd).run.__code__.co_filename == "<fuser ready launch>"


def test_a_misaligned_input_takes_the_prepared_launch():
    """x[1:] of a flat buffer has the layout of an aligned x (the ready key holds no offset)
    but a pointer 4 bytes off: the kernel compiled for aligned pointers must not get it."""
    fd = _scaled_exp_and_row_sums()
    g = torch.Generator(device="cuda").manual_seed(4)
    y = torch.randn(16, 64, device="cuda", generator=g)
    for _ in range(2):
        _check(fd, torch.randn(16, 64, device="cuda", generator=g), y)
    flat = torch.randn(16 * 64 + 1, device="cuda", generator=g)
    x = flat[1:].view(16, 64)
    assert x.data_ptr() % 16
    _check(fd, x, y)
    _check(fd, torch.randn(16, 64, device="cuda", generator=g), y)  # aligned again: inline


def test_a_launch_hook_installed_later_sees_every_launch():
    from triton import knobs

    fd = _scaled_exp_and_row_sums()
    g = torch.Generator(device="cuda").manual_seed(5)
    args = lambda: (torch.randn(8, 128, device="cuda", generator=g), torch.randn(8, 128, device="cuda", generator=g))  # noqa: E731
    for _ in range(2):
        _check(fd, *args())
    _ready_call(fd)
    seen = []
    chain = knobs.runtime.launch_enter_hook
    if not hasattr(chain, "add"):
        pytest.skip("this Triton keeps one launch hook, not a chain")
    hook = lambda metadata: seen.append(metadata)  # noqa: E731
    chain.add(hook)
    try:
        for _ in range(2):
            _check(fd, *args())
    finally:
        chain.remove(hook)
    assert len(seen) == 2
    _check(fd, *args())
    assert len(seen) == 2

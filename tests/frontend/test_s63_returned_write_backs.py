"""A jitted function that writes an input in place and returns it (`return x.add_(y)`, an
optimizer-like step returning its parameters, a module returning an updated buffer): the
write is folded into the fusion that computes it (frontend/write_backs.py), as the same write
not returned is, and the call returns the input itself, as eager does."""
import torch
from torch import nn

import fuser
from tests.helpers import make


def _follow_eager(f, make_args, written, calls=3):
    """Calls `f` jitted and eager on fresh copies of the same random arguments; checks values,
    every argument after the call, and that each argument at `written` (positions) is written
    (its version moves at least as eager's) and returned where eager returns it. The jitted
    function, for its cache_info."""
    jitted = fuser.jit(f)
    for _ in range(calls):
        ours = make_args()
        theirs = [a.clone() for a in ours]
        before = [(ours[k]._version, theirs[k]._version) for k in written]
        got, expected = jitted(*ours), f(*theirs)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(ours, theirs)
        for k, (ours_before, theirs_before) in zip(written, before):
            assert ours[k]._version - ours_before >= theirs[k]._version - theirs_before > 0
        for g, e in zip(_flat(got), _flat(expected)):
            for k in written:
                assert (g is ours[k]) == (e is theirs[k])
    return jitted


def _flat(result):
    return list(result) if isinstance(result, (list, tuple)) else [result]


def test_a_returned_in_place_add_is_written_by_the_fusion(written_in_place):
    jitted = _follow_eager(lambda x, y: x.add_(y * 2), lambda: [make((64, 64)), make((64, 64))], [0])
    assert jitted.cache_info().fallback_ops == 0  # (no ATen copy_ after the kernel)
    assert written_in_place[-1:] == [True], written_in_place  # (the kernel wrote x itself)


def test_an_augmented_assignment_returned_with_a_later_read_is_written_by_the_fusion(written_in_place):
    def f(x, y):
        x *= y
        return x, x * 3 - y

    jitted = _follow_eager(f, lambda: [make((16, 48)), make((16, 48))], [0])
    assert jitted.cache_info().fallback_ops == 0
    assert written_in_place[-1:] == [True], written_in_place


def test_a_step_returning_its_updated_parameters_writes_each_in_the_fusion():
    def step(p0, p1, p2, g0, g1, g2):
        return [p.sub_(g * 0.1) for p, g in ((p0, g0), (p1, g1), (p2, g2))]

    shapes = [(32, 8), (8,), (4, 4, 4)]
    jitted = _follow_eager(step, lambda: [make(s) for s in shapes * 2], [0, 1, 2])
    assert jitted.cache_info().fallback_ops == 0


class _Decaying(nn.Module):
    """A forward that updates a buffer in place and returns it (a running statistic)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(32))
        self.register_buffer("avg", torch.randn(32))

    def forward(self, x):
        return x * self.w, self.avg.mul_(0.9).add_(x.sum(0) * 0.1)


def _module_twins():
    ours = _Decaying()
    theirs = _Decaying()
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def test_a_module_returning_its_updated_buffer_writes_it_in_the_fusion():
    ours, theirs = _module_twins()
    jitted = fuser.jit(ours)
    with torch.no_grad():
        for _ in range(3):
            x = make((16, 32))
            versions = ours.avg._version, theirs.avg._version
            got, expected = jitted(x), theirs(x)
            torch.testing.assert_close(got, expected)
            assert got[1] is ours.avg and expected[1] is theirs.avg
            assert ours.avg._version - versions[0] >= theirs.avg._version - versions[1] > 0
    assert jitted.cache_info().fallback_ops == 0


def test_a_training_forward_returning_its_updated_buffer_writes_it_in_the_fusion():
    # (the forward graph returns the buffer's input itself: AOTAutograd's output of an input)
    ours, theirs = _module_twins()
    jitted = fuser.jit(ours)
    for _ in range(3):
        x = make((16, 32))
        got, expected = jitted(x), theirs(x)
        torch.testing.assert_close(got, expected)
        assert got[1] is ours.avg
        (got[0] * got[0]).sum().backward()
        (expected[0] * expected[0]).sum().backward()
        torch.testing.assert_close(ours.w.grad, theirs.w.grad)
        torch.testing.assert_close(ours.avg, theirs.avg)
    assert jitted.cache_info().fallback_ops == 0


def test_a_returned_in_place_write_into_a_non_leaf_keeps_its_gradient():
    def f(x, y):
        return x.mul_(y + 1)

    jitted = fuser.jit(f)
    for _ in range(2):
        a, y = make((8, 16)).requires_grad_(), make((8, 16)).requires_grad_()
        a2, y2 = a.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        x, x2 = a * 2, a2 * 2
        got, expected = jitted(x, y), f(x2, y2)
        assert got is x and expected is x2
        torch.testing.assert_close(got, expected)
        assert x._version == x2._version
        grad = make((8, 16))
        got.backward(grad)
        expected.backward(grad)
        torch.testing.assert_close(a.grad, a2.grad)
        torch.testing.assert_close(y.grad, y2.grad)

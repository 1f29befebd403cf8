"""Write-backs into buffers folded into the fusion that computes them (sixty-third session):
InstanceNorm's running statistics reach their `copy_` through an ATen `alias` of the fusion's
output, and spectral norm's `v` is written by a fusion that never reads it; both stayed ATen
`copy_` calls after the fusion (frontend/write_backs.py)."""
import copy

import pytest
import torch
import torch._dynamo
from torch import nn

import fuser
from tests.helpers import assert_eager, make


def _randomized_buffers(m: nn.Module) -> nn.Module:
    """`m` with random parameters and buffers (running variances positive), not ones and zeros."""
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(make(p.shape))
        for name, buf in m.named_buffers():
            if buf.is_floating_point():
                buf.copy_(make(buf.shape, positive=name.endswith("running_var")))
    return m


def _follow_eager(module: nn.Module, shapes: list, modes: list, grad: bool = False):
    """Eager and jitted copies of `module` called on the same fresh inputs, one call per shape
    in the training mode given: outputs (and input gradients) and every buffer after each call
    equal. Returns the jitted callable."""
    eager, ours = module, copy.deepcopy(module)
    jitted = fuser.jit(ours)
    for shape, train in zip(shapes, modes):
        eager.train(train), ours.train(train)
        x = make(shape) * 2 + 1  # (a mean away from 0: the statistics matter)
        xe, xf = x.clone().requires_grad_(grad), x.clone().requires_grad_(grad)
        ye, yf = eager(xe), jitted(xf)
        assert_eager(yf, ye)
        if grad:
            dy = make(ye.shape)
            ye.backward(dy), yf.backward(dy)
            assert_eager(xf.grad, xe.grad)
        for (name, be), bf in zip(eager.named_buffers(), ours.buffers()):
            assert bf.dtype == be.dtype and bf.shape == be.shape, name
            assert_eager(bf, be)
    return jitted


@pytest.mark.parametrize("module, shapes", [
    (lambda: nn.InstanceNorm1d(6, momentum=0.3, track_running_stats=True), [(4, 6, 7), (4, 6, 7), (4, 6, 7)]),
    (lambda: nn.InstanceNorm2d(5, affine=True, track_running_stats=True), [(3, 5, 4, 3)] * 3),
    # (a batch of another size: Dynamo's symbolic batch repeats the buffers)
    (lambda: nn.InstanceNorm1d(6, track_running_stats=True), [(3, 6, 8), (5, 6, 8), (2, 6, 8), (4, 6, 8)]),
], ids=["1d", "2d_affine", "1d_batch_sizes"])
def test_instance_norm_running_stats_are_written_by_the_fusion(module, shapes):
    torch._dynamo.reset()
    modes = [True] * (len(shapes) - 1) + [False]
    jitted = _follow_eager(_randomized_buffers(module()), shapes, modes)
    info = jitted.cache_info()
    assert info.fallback_ops == 0, info  # (two ATen copy_ calls a training call before)


def test_instance_norm_training_with_gradients_writes_its_stats_in_the_fusion():
    torch._dynamo.reset()
    module = _randomized_buffers(nn.InstanceNorm2d(4, affine=True, track_running_stats=True))
    jitted = _follow_eager(module, [(2, 4, 5, 3)] * 3, [True, True, False], grad=True)
    assert jitted.cache_info().fallback_ops == 0, jitted.cache_info()


def test_spectral_norm_power_iteration_buffers_are_written_by_the_fusion():
    # u is read and written by the fusion; v, only written, was left to an ATen copy_
    torch._dynamo.reset()
    module = nn.utils.spectral_norm(nn.Linear(6, 5))
    jitted = _follow_eager(module, [(4, 6)] * 4, [True, True, True, False], grad=True)
    assert jitted.cache_info().fallback_ops == 0, jitted.cache_info()


def _write_stats(x, stats):
    torch.mul(x.sum(0), 0.5, out=stats)  # (`out=`: copy_ into an input nothing reads)
    return x.exp()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "rounded_to_bf16"])
def test_a_buffer_only_written_is_written_by_the_fusion(dtype):
    torch._dynamo.reset()
    jitted = fuser.jit(_write_stats)
    for _ in range(3):
        x = make((8, 16))
        ours = make((16,), dtype)
        theirs = ours.clone()
        assert_eager(jitted(x, ours), _write_stats(x, theirs))
        assert_eager(ours, theirs)
    assert jitted.cache_info().fallback_ops == 0, jitted.cache_info()

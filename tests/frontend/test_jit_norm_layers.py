"""Batch norm and group norm under fuser.jit (sixty-second session): their forwards fuse (they
ran as an ATen call between fusions, the running statistics written back by two more), with
eager's values, gradients and running statistics, and bf16 statistics computed in fp32."""
import copy

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

import fuser
from tests.helpers import assert_eager, make


def _module(kind: str) -> nn.Module:
    return {
        "batch_norm": lambda: nn.BatchNorm2d(6, momentum=0.3),
        "batch_norm_1d": lambda: nn.BatchNorm1d(6),
        "batch_norm_no_affine": lambda: nn.BatchNorm2d(6, affine=False),
        "batch_norm_batch_stats": lambda: nn.BatchNorm2d(6, track_running_stats=False),
        "group_norm": lambda: nn.GroupNorm(2, 6),
        "group_norm_no_affine": lambda: nn.GroupNorm(3, 6, affine=False),
    }[kind]()


def _randomized(m: nn.Module, dtype: torch.dtype) -> nn.Module:
    """`m` in `dtype` with random parameters and running statistics (not ones and zeros)."""
    m = m.to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(make(p.shape, dtype))
        for name, buf in m.named_buffers():
            if name.endswith("running_mean"):
                buf.copy_(make(buf.shape, dtype))
            elif name.endswith("running_var"):
                buf.copy_(make(buf.shape, dtype, positive=True))
    return m


def _input(kind: str, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    shape = (12, 6) if kind == "batch_norm_1d" else (4, 6, 5, 3)
    x = (make(shape) * 2 + 3).to(dtype)  # (a mean away from 0: the statistics matter)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _steps(module: nn.Module, kind: str, dtype: torch.dtype, channels_last: bool, steps: int = 2):
    """Eager and jitted copies of `module` run `steps` forward and backward steps on the same
    inputs: [(eager, fuser) pairs of output, input gradient, parameter gradients, buffers], the
    jitted function, and the same run in float64 (the reference)."""
    eager, ours, exact = module, copy.deepcopy(module), copy.deepcopy(module).double()
    jitted = fuser.jit(ours)
    pairs, reference = [], []
    for _ in range(steps):
        x = _input(kind, dtype, channels_last)
        xe, xf, xd = x.clone().requires_grad_(), x.clone().requires_grad_(), x.double().requires_grad_()
        ye, yf, yd = eager(xe), jitted(xf), exact(xd)
        dy = make(ye.shape, dtype)
        ye.backward(dy), yf.backward(dy), yd.backward(dy.double())
        pairs += [(ye, yf), (xe.grad, xf.grad)]
        reference += [yd, xd.grad]
        for p, q, r in zip(eager.parameters(), ours.parameters(), exact.parameters()):
            pairs.append((p.grad, q.grad))
            reference.append(r.grad)
            p.grad = q.grad = r.grad = None
    for b, c, r in zip(eager.buffers(), ours.buffers(), exact.buffers()):
        pairs.append((b, c))
        reference.append(r)
    return pairs, reference, jitted


KINDS = ["batch_norm", "batch_norm_1d", "batch_norm_no_affine", "batch_norm_batch_stats", "group_norm",
         "group_norm_no_affine"]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", KINDS)
def test_norm_steps_follow_eager_with_no_aten_calls(kind, train):
    torch._dynamo.reset()
    module = _randomized(_module(kind), torch.float32).train(train)
    pairs, _, jitted = _steps(module, kind, torch.float32, channels_last=False)
    for got_eager, got in pairs:  # (num_batches_tracked included: an int64 buffer, exact)
        assert_eager(got, got_eager)
    info = jitted.cache_info()
    # group norm without parameters: its backward (torch's decomposition) returns a view of
    # the fusion's output, which ATen may take (counted, though it moves nothing); its forward
    # alone is checked below (test_functional_norm_forward_is_one_fusion)
    assert info.fallback_ops <= (1 if kind == "group_norm_no_affine" else 0), fuser.explain(jitted, pairs[0][0])
    assert info.kernels >= 1


@pytest.mark.parametrize("kind", ["batch_norm", "group_norm"])
def test_norm_of_a_channels_last_input(kind):
    torch._dynamo.reset()
    pairs, _, jitted = _steps(_randomized(_module(kind), torch.float32), kind, torch.float32, channels_last=True)
    for got_eager, got in pairs:
        assert_eager(got, got_eager)
    assert jitted.cache_info().fallback_ops == 0


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind", ["batch_norm", "batch_norm_1d", "batch_norm_batch_stats", "group_norm"])
def test_bf16_norm_is_as_close_to_float64_as_eager(kind, train):
    """Statistics in fp32 and the output rounded once: no further from the float64 result than
    eager's (output, gradients, running statistics; 2 steps)."""
    torch._dynamo.reset()
    module = _randomized(_module(kind), torch.bfloat16).train(train)
    pairs, reference, jitted = _steps(module, kind, torch.bfloat16, channels_last=kind == "group_norm")
    for k, ((got_eager, got), exact) in enumerate(zip(pairs, reference)):
        assert got.dtype == got_eager.dtype and got.shape == got_eager.shape
        if not exact.is_floating_point():
            assert torch.equal(got, got_eager)
            continue
        ulp = 2.0 ** -8 * exact.abs().max().item()  # (a bf16 unit at the largest value)
        ours, theirs = ((g.double() - exact).abs().mean().item() for g in (got, got_eager))
        # (a parameter's gradient, one sum a channel, averages too few errors to tell closer)
        slack = 2.0 if exact.numel() < 32 else 1.25
        assert ours <= slack * theirs + 0.01 * ulp, (k, ours, theirs)
    assert jitted.cache_info().fallback_ops == 0


@pytest.mark.parametrize("fn", [
    lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2),
    lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, training=False),
    lambda x, w, b, rm, rv: F.batch_norm(x, None, None, w, b, training=True),
    lambda x, w, b, rm, rv: F.group_norm(x, 3, w, b, eps=1e-3),
    lambda x, w, b, rm, rv: F.group_norm(x, 2),
], ids=["batch_norm_train", "batch_norm_eval", "batch_norm_no_stats", "group_norm", "group_norm_no_affine"])
def test_functional_norm_forward_is_one_fusion(fn):
    torch._dynamo.reset()
    x = make((4, 6, 7)) * 3 + 1
    w, b, rm, rv = make((6,)), make((6,)), make((6,)), make((6,), positive=True)
    rm2, rv2 = rm.clone(), rv.clone()
    jitted = fuser.jit(fn)
    with torch.no_grad():
        got, want = jitted(x, w, b, rm2, rv2), fn(x, w, b, rm, rv)
    assert_eager(got, want)
    assert_eager(rm2, rm)
    assert_eager(rv2, rv)
    info = jitted.cache_info()
    assert (info.fusions, info.fallback_ops) == (1, 0), fuser.explain(jitted, x, w, b, rm2, rv2)

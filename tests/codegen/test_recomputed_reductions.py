"""A reduction's result used along an axis its input does not span. Where the broadcast that
puts the reduced axis back meets an axis of the reduced extent, the two are one loop axis (a
normalization's kernel: reduce the row, then write it). Otherwise the group's loop space would
hold more elements than any of its tensors, each output element summing its whole row again
(R x C x C work: 24 s a call for label-smoothed cross entropy's backward at C = 2048 on the
CPU), and the reduction is a kernel of its own."""
import time

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import assert_eager, explained_plans


def _row_sum_against(x, y):
    return y - x.sum(-1, keepdim=True)


def _scaled_row_sum_against(x, y):
    # a scale and a cast between the sum and its broadcast; x[:, None] slices every axis first
    return y - (x.sum(-1) * 0.5).to(torch.float16)[:, None]


@pytest.mark.parametrize("fn", [_row_sum_against, _scaled_row_sum_against])
def test_a_row_sum_against_another_tensor_is_one_normalization_kernel(fn):
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 512, generator=g), torch.randn(6, 512, generator=g)
    plans = explained_plans(fuser.explain(fn, x, y))
    assert len(plans) == 1 and "inner reduction: tile dim0 [i0] x dim1 [512]" in plans[0], plans
    assert_eager(fuser.jit(fn)(x, y), fn(x, y))


def test_a_column_sum_against_a_tensor_of_other_rows_is_its_own_kernel():
    # x [n, c] summed over rows, subtracted from y [m, c]: n is no axis of y's
    def f(x, y):
        return y - x.sum(0)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(40, 24, generator=g), torch.randn(7, 24, generator=g)
    plans = explained_plans(fuser.explain(f, x, y))
    assert len(plans) == 2 and plans[0].startswith("# Plan: outer reduction") and "pointwise" in plans[1], plans
    assert_eager(fuser.jit(f)(x, y), f(x, y))


def test_a_definition_with_two_column_extents_sums_each_row_once():
    # y's columns (i3) and x's (i1) are different symbols: they may differ in a call, so they
    # are never one loop axis, and the row sums are a kernel of their own
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sub(y, fd.ops.sum(x, [1], keepdim=True)))
    g = torch.Generator().manual_seed(3)
    for c, d in ((300, 300), (64, 5)):
        x, y = torch.randn(4, c, generator=g), torch.randn(4, d, generator=g)
        (out,) = fd.execute([x, y])
        torch.testing.assert_close(out, y - x.sum(-1, keepdim=True), rtol=1e-5, atol=1e-4)
        kernels = [s for s in fd.last_segments() if s.kind.value == "kernel"]
        assert len(kernels) == 2, [s.why for s in fd.last_segments()]
        assert "computed again along loop axis" in kernels[0].why and "no tensor spans every loop axis" in kernels[0].why


def test_label_smoothed_cross_entropy_backward_takes_linear_time():
    # its backward sums each row of the logits' gradient beside the one-hot target's columns;
    # with those two apart it summed the row again per element: 24 s a call at 16 x 2048
    def loss(logits, target):
        return torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1)
    g = torch.Generator().manual_seed(5)
    jitted = fuser.jit(loss)
    times = []
    for c in (256, 2048):
        logits = torch.randn(16, c, generator=g, requires_grad=True)
        target = torch.randint(0, c, (16,), generator=g)
        for _ in range(2):  # the second call: compiled
            start = time.perf_counter()
            got = torch.autograd.grad(jitted(logits, target), logits)[0]
            times.append(time.perf_counter() - start)
        want = torch.autograd.grad(loss(logits, target), logits)[0]
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # 8x the columns: quadratic work would take 64x as long; allow generous noise over 8x
    assert times[3] < 24 * times[1] + 0.5, times


def test_a_merge_refused_before_later_ops_link_its_axes_is_tried_again():
    # interleaved rope in bf16 with cos and sin learned: midway, the backward's group held the
    # cos gradient's reduction and a branch whose batch and head axes only later ops link, so
    # no tensor spanned its loop space; retried after the greedy pass, the group forms (the
    # backward wrote an fp32 intermediate and read it back in a kernel more: 7 kernels)
    def rope(x, cos, sin):
        xr = x.float().reshape(*x.shape[:-1], 8, 2)
        a, b = xr[..., 0], xr[..., 1]
        c, s = cos.float(), sin.float()
        return torch.stack([a * c - b * s, a * s + b * c], -1).flatten(-2).to(x.dtype)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 2, 8, 16, generator=g).to(torch.bfloat16).requires_grad_()
    cos, sin = (torch.randn(8, 8, generator=g).to(torch.bfloat16).requires_grad_() for _ in range(2))
    dy = torch.randn(4, 2, 8, 16, generator=g).to(torch.bfloat16)
    jitted = fuser.jit(rope)
    got = torch.autograd.grad(jitted(x, cos, sin), (x, cos, sin), dy)
    want = torch.autograd.grad(rope(x, cos, sin), (x, cos, sin), dy)
    for a, b in zip(got, want):
        assert_eager(a, b)
    assert jitted.cache_info().kernels <= 6, jitted.cache_info()

"""The benchmark harness's checks of a contender's outputs (benchmarks/harness.py), on the CPU."""
import pytest
import torch
import torch.nn.functional as F

from benchmarks import harness, suite


def _writes_dx_into_logits(logits, target):
    """Cross entropy whose forward computes the gradient and writes it into the logits, as
    Liger's kernel does; its backward hands that gradient on."""

    class Fused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, t):
            xf = x.detach().float()
            loss = F.cross_entropy(xf, t)
            dx = (torch.softmax(xf, -1) - F.one_hot(t, xf.shape[-1])) / xf.shape[0]
            x.data.copy_(dx.to(x.dtype))  # (in place: a second call reads a gradient as logits)
            ctx.save_for_backward(x)
            return loss

        @staticmethod
        def backward(ctx, dy):
            (dx,) = ctx.saved_tensors
            return dx * dy, None

    return Fused.apply(logits, target)


def test_a_contender_that_writes_into_its_inputs_is_checked_on_fresh_ones_once_settled():
    case = suite.make_case("cross_entropy_bwd", 16, 96)
    device = torch.device("cpu")
    reference = harness.eager_reference(case, device, 0)
    impl = harness.Impl(_writes_dx_into_logits, forward_in_timing=True)
    result = harness.run_contender(case, impl, reference, device, copy_gbps=10.0, seed=0)
    assert result["ms"] > 0 and "tuned_s" in result


def test_a_contender_whose_settled_call_differs_is_a_mismatch():
    case = suite.make_case("rmsnorm_fwd", 16, 96)
    device = torch.device("cpu")
    reference = harness.eager_reference(case, device, 0)
    calls = [0]

    def right_once(*args):
        calls[0] += 1
        out = case.fn(*args)
        return out if calls[0] == 1 else out * 1.5
    try:
        harness.run_contender(case, harness.Impl(right_once), reference, device, copy_gbps=10.0, seed=0)
    except harness.Mismatch as e:
        assert "output 0" in str(e)
    else:
        raise AssertionError("the settled call's wrong output passed")


def test_a_named_kernel_at_a_shape_the_suite_lacks_becomes_a_case():
    cases = harness.select_cases(True, "softmax_fwd[64x1001],rmsnorm,cross_entropy_bwd[16x50257]")
    names = [c.name for c in cases]
    assert "softmax_fwd[64x1001]" in names and "cross_entropy_bwd[16x50257]" in names
    assert any(n.startswith("rmsnorm_fwd[") for n in names)  # (the substring still selects)
    odd = next(c for c in cases if c.name == "softmax_fwd[64x1001]")
    assert odd.shape == (64, 1001) and odd.bytes_moved == 2 * 64 * 1001 * 2
    again = harness.select_cases(True, "gelu_bwd[256x512],gelu_bwd[256x512]")
    assert [c.name for c in again] == ["gelu_bwd[256x512]"]  # (a suite case is not added twice)


def test_a_named_case_of_an_unknown_kernel_is_refused():
    with pytest.raises(SystemExit, match="no kernel 'matmul'"):
        harness.select_cases(True, "matmul[64x64]")


def test_the_exact_reference_draws_the_same_dy_as_the_runner():
    """A backward row's float64 result, rounded, agrees with eager's: the same inputs and dy."""
    case = suite.make_case("softmax_bwd", 16, 96)
    device = torch.device("cpu")
    reference = harness.eager_reference(case, device, 0)
    exact = harness.exact_reference(case, device, 0)
    assert all(e.dtype == torch.float64 for e in exact)
    harness.check_close(tuple(e.to(r.dtype) for e, r in zip(exact, reference)), reference)


def test_an_output_eager_rounds_away_from_is_judged_by_the_exact_one():
    """Where eager's output is off (a bf16 sum rounded at each step), an output near the exact
    value passes; one far from both is a mismatch, reported against eager."""
    exact = (torch.linspace(-4, 4, 64, dtype=torch.float64),)
    eager = (exact[0].to(torch.bfloat16) + torch.where(torch.arange(64) == 7, 0.5, 0.0).to(torch.bfloat16),)
    near = (exact[0].to(torch.bfloat16),)
    with pytest.raises(harness.Mismatch):
        harness.check_close(near, eager)
    harness.check_output(near, eager, lambda: exact)
    far = (near[0] + torch.where(torch.arange(64) == 9, 0.5, 0.0).to(torch.bfloat16),)
    with pytest.raises(harness.Mismatch, match="output 0: 2/64 off"):
        harness.check_output(far, eager, lambda: exact)

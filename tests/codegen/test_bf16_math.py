"""Kernels whose outputs are all bf16 use a cheaper tanh (exp-based, absolute error about 1e-7),
and where the tanh is only added to a constant of size about 1 (GELU), one without the series
that keeps it relatively accurate near 0; kernels with an fp32 output keep libdevice's. Either
way the result is eager's, up to one bf16 rounding step."""
import pytest
import torch

from fuser import DataType, FusionDefinition


def _gelu_definition(out_dtype: DataType) -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        h = fd.ops.cast(x, DataType.Float)
        inner = fd.ops.mul(fd.ops.add(h, fd.ops.mul(fd.ops.mul(fd.ops.mul(h, h), h), 0.044715)), 0.7978845608028654)
        y = fd.ops.mul(fd.ops.mul(h, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))
        fd.add_output(fd.ops.cast(y, out_dtype))
    return fd


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("out_dtype", [DataType.BFloat16, DataType.Float])
def test_tanh_lowering_follows_the_output_precision(out_dtype):
    fd = _gelu_definition(out_dtype)
    x = torch.randn(300, 1000, device="cuda", dtype=torch.bfloat16) * 3
    (out,) = fd.execute([x])
    expected = torch.nn.functional.gelu(x.float(), approximate="tanh")
    source = fd.last_triton_code()
    if out_dtype is DataType.BFloat16:
        assert "_tanh_near_one(" in source and "libdevice.tanh" not in source
        rounded = expected.to(torch.bfloat16).float()
        ulp = torch.exp2(torch.floor(torch.log2(rounded.abs().clamp_min(1e-30))) - 7)
        # one rounding step at most, beyond the ~1e-7 |x| both lose in GELU's negative tail
        # (where 1 + tanh(z) cancels in eager's fp32 too)
        assert bool(((out.float() - rounded).abs() <= ulp + 1e-6 * x.float().abs()).all())
    else:
        assert "libdevice.tanh" in source
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_tanh_is_accurate_near_zero_and_saturates():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.tanh(x))
    x = torch.cat([torch.logspace(-12, 1.5, 300), -torch.logspace(-12, 1.5, 300),
                   torch.tensor([0.0, float("inf"), float("-inf"), float("nan")])])
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, torch.tanh(x), rtol=2e-6, atol=0, equal_nan=True)


def _tanh_kernel_source(build) -> str:
    """The source of a bf16-output kernel of `build(fd, tanh(x))`, run on the interpreter."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.BFloat16)
        build(fd, fd.ops.tanh(fd.ops.cast(x, DataType.Float)))
    fd.execute([torch.randn(64, dtype=torch.bfloat16)])
    return fd.last_triton_code()


def _out(fd, v):
    fd.add_output(fd.ops.cast(v, DataType.BFloat16))


@pytest.mark.parametrize("build, near_one", [
    (lambda fd, t: _out(fd, fd.ops.add(t, 1.0)), True),
    (lambda fd, t: _out(fd, fd.ops.sub(1.0, fd.ops.mul(t, t))), True),
    (lambda fd, t: _out(fd, fd.ops.mul(fd.ops.add(t, -0.5), fd.ops.sub(1.0, fd.ops.mul(t, t)))), True),
    (lambda fd, t: _out(fd, t), False),  # tanh itself: relative accuracy near 0
    (lambda fd, t: _out(fd, fd.ops.add(t, 0.25)), False),  # a small constant: tanh's own digits show
    (lambda fd, t: _out(fd, fd.ops.add(fd.ops.mul(t, 2.0), 1.0)), False),
    (lambda fd, t: (_out(fd, fd.ops.sub(1.0, fd.ops.mul(t, t))), _out(fd, fd.ops.mul(t, t))), False),
])
def test_tanh_near_one_only_where_absolute_accuracy_suffices(build, near_one):
    assert ("_tanh_near_one(" in _tanh_kernel_source(build)) is near_one


def test_gelu_backward_with_tanh_near_one_is_eager_up_to_a_rounding():
    """The GELU backward definition (bf16, tanh only in 1 + t and 1 - t^2) on the interpreter,
    over the negative tail, near zero and the saturated range: within one bf16 rounding step of
    the fp64 result, beyond the ~1e-7 absolute error of fp32 GELU math."""
    from benchmarks import fuser_defs

    fd = fuser_defs.gelu_dx.__wrapped__()
    g = torch.Generator().manual_seed(11)
    x = torch.cat([torch.randn(64, 96, generator=g) * 4, torch.randn(64, 96, generator=g) * 1e-4,
                   -torch.rand(64, 96, generator=g) * 9]).to(torch.bfloat16)
    dy = torch.randn(x.shape, generator=g).to(torch.bfloat16)
    (dx,) = fd.execute([x, dy])
    assert "_tanh_near_one(" in fd.last_triton_code()
    want = torch.ops.aten.gelu_backward(dy.double(), x.double(), approximate="tanh")
    rounded = want.to(torch.bfloat16).double()
    ulp = torch.exp2(torch.floor(torch.log2(rounded.abs().clamp_min(1e-30))) - 7)
    slack = 1e-6 * (1 + x.double().abs() ** 3) * dy.double().abs()
    assert bool(((dx.double() - want).abs() <= ulp + slack).all())


def _exp_definition(out_dtype: DataType, op: str = "exp") -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.cast(getattr(fd.ops, op)(x), out_dtype))
    return fd


def test_exp_flushes_subnormal_results_only_in_bf16_kernels():
    """A kernel whose outputs are all bf16 computes exp with the smallest normal float as its
    floor (results below 2^-126 are 0, as CUDA's fast math gives them); an fp32 output keeps
    subnormal results. Elsewhere the result is eager's, up to one bf16 rounding step."""
    g = torch.Generator().manual_seed(5)
    tail = torch.tensor([-88.0, -88.5, -95.0, -103.0, -120.0, float("-inf"), float("inf"), float("nan")])
    x = torch.cat([torch.randn(200, generator=g) * 6, tail])
    subnormal = (torch.exp(x) < 2.0 ** -126) & (torch.exp(x) > 0)
    assert int(subnormal.sum()) >= 3  # -88.5, -95 and -103 (2^-126 is about exp(-87.3))

    bf16 = _exp_definition(DataType.BFloat16)
    (out,) = bf16.execute([x])
    assert "_exp_flush" in bf16.last_triton_code()
    assert bool((out[subnormal] == 0).all())
    eager = torch.exp(x).to(torch.bfloat16)
    torch.testing.assert_close(out[~subnormal], eager[~subnormal], rtol=1e-2, atol=0, equal_nan=True)

    fp32 = _exp_definition(DataType.Float)
    (out32,) = fp32.execute([x])
    assert "_exp_flush" not in fp32.last_triton_code()
    torch.testing.assert_close(out32, torch.exp(x), rtol=1e-6, atol=0, equal_nan=True)
    assert bool((out32[subnormal] > 0).all())


@pytest.mark.parametrize("op, eager", [("sigmoid", torch.sigmoid), ("silu", torch.nn.functional.silu)])
def test_sigmoid_and_silu_in_bf16_kernels_use_the_flushing_exp(op, eager):
    """exp(-x) underflows for x > 87 either way: sigmoid is 1 there and silu x."""
    g = torch.Generator().manual_seed(6)
    x = torch.cat([torch.randn(300, generator=g) * 8, torch.tensor([90.0, 100.0, -90.0, -100.0, 0.0])])
    fd = _exp_definition(DataType.BFloat16, op)
    (out,) = fd.execute([x])
    assert "_exp_flush" in fd.last_triton_code()
    torch.testing.assert_close(out, eager(x).to(torch.bfloat16), rtol=1e-2, atol=1e-30)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_exp_flush_on_the_gpu_matches_the_interpreter():
    """The inline ex2.approx.ftz.f32 of the CUDA lowering: the same flush, the same values."""
    g = torch.Generator().manual_seed(7)
    x = torch.cat([torch.randn(4000, generator=g) * 30, torch.tensor([-88.5, -95.0, -120.0, 0.0])])
    fd = _exp_definition(DataType.BFloat16)
    (out,) = fd.execute([x.cuda()])
    assert "ex2.approx.ftz.f32" in fd.last_triton_code()
    expected = torch.exp(x).to(torch.bfloat16)
    expected[torch.exp(x) < 2.0 ** -126] = 0
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-2, atol=0)


@pytest.mark.parametrize("fn", [
    lambda x: torch.log(torch.exp(x).sum(-1)).to(torch.bfloat16),  # a log of flushed terms: -inf
    lambda x: (torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)).to(torch.bfloat16),  # 0 / 0
    lambda x: (torch.exp(x - 8.0) * torch.exp(x * 0.0 + 80.0)).to(torch.bfloat16),  # exp(a) exp(b)
    lambda x: torch.sqrt(torch.exp(x)).to(torch.bfloat16),
    lambda x: (torch.exp(x) > 0).to(torch.bfloat16),
])
def test_exp_keeps_subnormals_where_its_uses_could_magnify_them(fn):
    """Rows of -95 (exp about 5.5e-42, subnormal): eager's values, not -inf, NaN or 0."""
    import fuser

    x = torch.full((4, 256), -95.0) + torch.rand(4, 256, generator=torch.Generator().manual_seed(2))
    got, want = fuser.jit(fn)(x), fn(x)
    assert bool(torch.isfinite(want.float()).all())
    torch.testing.assert_close(got, want, rtol=2e-2, atol=0)


def test_exp_over_a_sum_stored_by_another_kernel_keeps_subnormals(monkeypatch):
    """Rows long enough for the statistics form (a kernel stores the row sums, another divides
    by them, as on a 132-processor GPU): exp over a stored sum of tiny exps must not flush
    (it gave 0 for eager's 6e-6). Division by anything keeps tl.exp."""
    import fuser
    from fuser.codegen import launch

    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 132)
    x = torch.full((2, 70000), -95.0) + torch.rand(2, 70000, generator=torch.Generator().manual_seed(9))

    def f(x):
        return (torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)).to(torch.bfloat16)

    got, want = fuser.jit(f)(x), f(x)
    assert float(want.float().min()) > 0
    torch.testing.assert_close(got, want, rtol=2e-2, atol=0)


def test_flush_follows_the_uses_in_the_suite_backward_rows():
    """The bf16 cross entropy backward scales exp(x - lse): flushed. So does the softmax
    backward, pointed at exp((x - max) - log(sum)) before partitioning
    (frontend/softmax_backward.py); it divided
    exp(x - max) by the saved sum before, and kept tl.exp (a division could magnify a flushed
    term)."""
    import fuser

    g = torch.Generator().manual_seed(4)
    x = (torch.randn(8, 300, generator=g) * 30).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 300, (8,), generator=g)

    def softmax(x):
        return torch.softmax(x.float(), dim=-1).to(torch.bfloat16)

    def cross_entropy(x):
        return torch.nn.functional.cross_entropy(x.float(), target).to(torch.bfloat16)

    for fn, flushed in ((softmax, True), (cross_entropy, True)):
        _, backward = str(fuser.explain(fn, x)).split("backward: ATen graph", 1)
        assert ("_exp_flush_emulated(" in backward) is flushed, fn.__name__
        out = fuser.jit(fn)(x)
        dy = torch.randn(out.shape, generator=g).to(torch.bfloat16)
        (gx,) = torch.autograd.grad(out, x, dy)
        xe = x.detach().clone().requires_grad_()
        (ge,) = torch.autograd.grad(fn(xe), xe, dy)
        torch.testing.assert_close(gx, ge, rtol=2e-2, atol=1e-2)

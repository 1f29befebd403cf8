"""Faults of `fuser.jit` and `torch.compile(backend="fuser")` found by probing them as a user
would (fifty-seventh session: in-place writes and aliasing, indexing errors, dtypes and
float8, normalization and loss layers, ATen fallbacks, hooks), each against eager."""
import re
import warnings

import pytest
import torch
import torch._dynamo

import fuser
from tests.helpers import make


def _ways():
    torch._dynamo.reset()
    return [("jit", fuser.jit), ("compile", lambda f: torch.compile(f, backend="fuser"))]


def _add_and_read(t0, ta):  # ta is (or was traced as) a slice of t0
    t0.add_(100)
    return ta * 2


@pytest.mark.parametrize("viewed", [False, True], ids=["plain", "a-view"])
def test_a_write_to_an_argument_another_slices_reads_as_eager(viewed):
    # AOTAutograd merges overlapping arguments into a synthetic base, and its wrapper read t0's
    # rows where the slice's are (or raised an AssertionError for a t0 that is itself a view),
    # and kept doing so for later calls with separate tensors
    for name, compile_fn in _ways():
        f = compile_fn(_add_and_read)
        for call in range(3):
            t0 = torch.arange(24.).view(4, 6) if viewed else torch.arange(24.).reshape(4, 6).clone()
            ta = t0[1:] if call != 1 else t0[1:].clone()
            e0 = t0.clone()
            expected = _add_and_read(e0, e0[1:] if call != 1 else ta.clone())
            got = f(t0, ta)
            assert torch.equal(got, expected), (name, call)
            assert torch.equal(t0, e0), (name, call)


def test_a_training_write_to_overlapping_arguments_as_eager():
    def f(a, b):
        a.mul_(2)
        return (a * b).sum()
    for name, compile_fn in _ways():
        g = compile_fn(f)
        for call in range(3):
            leaf = torch.randn(10, 4, requires_grad=True)
            eleaf = leaf.detach().clone().requires_grad_()
            base, ebase = leaf * 1, eleaf * 1
            args = (base[:6], base[3:9]) if call != 1 else (base[:6].clone(), base[3:9].clone())
            eargs = (ebase[:6], ebase[3:9]) if call != 1 else (ebase[:6].clone(), ebase[3:9].clone())
            expected = f(*eargs)
            expected.backward()
            got = g(*args)
            got.backward()
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(leaf.grad, eleaf.grad, msg=f"{name} call {call}")


class _LayerScale(torch.nn.Module):  # timm's LayerScale(inplace=True)
    def __init__(self, dim: int):
        super().__init__()
        self.gamma = torch.nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x.mul_(self.gamma)


def test_an_input_written_in_place_keeps_its_old_value_for_the_gradient():
    # the forward saved x itself for gamma's gradient, and AOTAutograd's write-back of x.mul_
    # bumped its version: autograd refused a backward that eager runs
    torch.manual_seed(0)
    eager = _LayerScale(8)
    x = torch.randn(2, 3, 8)
    w = torch.randn(8, 8, requires_grad=True)
    expected_x = None
    for name, compile_fn in [("eager", lambda m: m)] + _ways():
        module = compile_fn(eager) if name != "eager" else eager
        eager.gamma.grad, w.grad = None, None
        for _ in range(2):
            y = module(x @ w)  # a non-leaf input needing grad
            y.square().sum().backward()
        if expected_x is None:
            expected_x, expected_g, expected_w = y.detach(), eager.gamma.grad.clone(), w.grad.clone()
            continue
        torch.testing.assert_close(y.detach(), expected_x)
        torch.testing.assert_close(eager.gamma.grad, expected_g, msg=name)
        torch.testing.assert_close(w.grad, expected_w, msg=name)


def test_a_write_to_a_value_the_backward_needs_is_named():
    def f(x):
        y = x.exp()
        y.add_(1)  # exp's backward reads y
        return y
    x = make((3, 4)).requires_grad_()
    torch._dynamo.reset()
    jitted = fuser.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (autograd's anomaly report of the op)
        with pytest.raises(fuser.UnsupportedError, match="writes in place to a value its own backward needs"):
            jitted(x)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), f(x))


def test_an_index_past_a_size_raises_eagers_error_with_the_real_size():
    # the fake tensor's IndexError passed Dynamo raw, naming the symbol `s77`
    x = make((6, 5))
    torch._dynamo.reset()
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 6"):
        fuser.jit(lambda x: x[7] * 2)(x)
    f = fuser.jit(lambda x, k: x[k] * 2)
    torch.testing.assert_close(f(x, 2), x[2] * 2)
    torch.testing.assert_close(f(x, 3), x[3] * 2)  # k now a symbol
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 0 with size 6"):
        f(x, 9)


@pytest.mark.parametrize("fn", [
    lambda i: i / 3,
    lambda i: i * 0.1,
    lambda i: i.abs().sqrt(),
    lambda i: (i > 0) * 0.1,
    lambda i: i // 0.3 + i * 0.1,
], ids=["div", "mul", "sqrt", "bool-mul", "floordiv"])
def test_integer_math_under_a_double_default_dtype_is_double(fn):
    # nvFuser's rule promotes integers to Float: the result was computed in fp32, then widened
    i = torch.randint(-200000, 200000, (64,), dtype=torch.int32)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        expected = fn(i)
        for name, compile_fn in _ways():
            got = compile_fn(fn)(i)
            assert got.dtype == expected.dtype == torch.float64
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=name)
    finally:
        torch.set_default_dtype(before)


@pytest.mark.parametrize("fn", [
    lambda x, y: x * 2,
    lambda x, y: x + x,
    lambda x, y: -x,
    lambda x, y: x.sum(),
    lambda x, y: x * y,
    lambda x, y: x == y,
    lambda x, y: torch.where(y > 0, x, y),
    lambda x, y: x.masked_fill(y > 0, 0.0),
], ids=["mul", "add", "neg", "sum", "promote", "eq-promote", "where-promote", "masked_fill"])
def test_float8_arithmetic_eager_refuses_raises_as_in_eager(fn):
    x, y = make((4, 5)).to(torch.float8_e4m3fn), make((4, 5))
    with pytest.raises((NotImplementedError, RuntimeError)) as expected:
        fn(x, y)
    torch._dynamo.reset()
    with pytest.raises(type(expected.value), match=re.escape(str(expected.value).split(",")[0][:40])):
        fuser.jit(fn)(x, y)


def test_float8_casts_still_fuse():
    def f(x8, scale):
        return (x8.T.contiguous().T.ravel().view(4, 5).float() * scale).to(torch.float8_e4m3fn)
    x8, scale = make((4, 5)).to(torch.float8_e4m3fn), make((5,))
    torch._dynamo.reset()
    jitted = fuser.jit(f)
    out = jitted(x8, scale)
    assert out.dtype == torch.float8_e4m3fn
    assert torch.equal(out.view(torch.uint8), f(x8, scale).view(torch.uint8))
    assert jitted.cache_info().fusions >= 1


@pytest.mark.parametrize("fn", [
    lambda x: torch.nn.functional.softmax(x, -1),
    lambda x: torch.nn.functional.log_softmax(x, -1),
    lambda x: torch.softmax(x.cumsum(-1), 0),
    lambda x: x.float().softmax(-1, dtype=torch.int64),
    lambda x: (x > 0).softmax(-1),
], ids=["softmax", "log_softmax", "dim0", "dtype", "bool"])
def test_a_softmax_of_integers_raises_as_in_eager(fn):
    # the decomposition computed exp of the integers in fp32, cast back: zeros
    x = torch.randint(-5, 5, (2, 3))
    with pytest.raises((NotImplementedError, RuntimeError)) as expected:
        fn(x)
    for name, compile_fn in _ways():
        with pytest.raises(type(expected.value), match=re.escape(str(expected.value)[:30])):
            compile_fn(fn)(x)


@pytest.mark.parametrize("x_dtype,w_dtype,b_dtype", [
    (torch.float32, torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float64, torch.float64),
    (torch.bfloat16, torch.float32, torch.bfloat16)], ids=["fp32-bf16", "bf16-fp64", "bf16-fp32-bf16"])
def test_layer_norm_parameters_of_a_type_eager_refuses(x_dtype, w_dtype, b_dtype):
    x, w, b = make((4, 8), x_dtype), make((8,), w_dtype), make((8,), b_dtype)

    def f(x, w, b):
        return torch.nn.functional.layer_norm(x, (8,), w, b)
    with pytest.raises(RuntimeError, match="mixed dtype") as expected:
        f(x, w, b)
    for name, compile_fn in _ways():
        with pytest.raises(RuntimeError, match=re.escape(str(expected.value)[:20])):
            compile_fn(f)(x, w, b)
    # (the mix eager takes still fuses: a half input with fp32 parameters)
    x16 = make((4, 8), torch.bfloat16)
    assert fuser.jit(f)(x16, make((8,)), make((8,))).dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adams_in_place_updates_fuse(dtype):
    # Dynamo writes addcmul_ and addcdiv_ with a value as Inductor's prims.fma, which had no
    # lowering: two ATen calls between fusions a step
    def f(v, g, p, d):
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        p.addcdiv_(g, v.sqrt() + 1e-8, value=-0.01)
        return (p * d).sum(-1)
    v, g, p, d = make((8, 16), dtype).abs(), make((8, 16), dtype), make((8, 16), dtype), make((8, 16), dtype)
    ve, pe = v.clone(), p.clone()
    torch._dynamo.reset()
    jitted = fuser.jit(f)
    out, expected = jitted(v, g, p, d), f(ve, g, pe, d)
    tol = {} if dtype is torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out, expected, **tol)
    torch.testing.assert_close(v, ve, **tol)
    torch.testing.assert_close(p, pe, **tol)
    report = str(fuser.explain(jitted, v.clone(), g, p.clone(), d))
    assert "no lowering for prims.fma" not in report


def test_max_unpool_checks_each_index_against_its_plane():
    # the decomposition's index_put over the flattened batch wrote an index past its plane
    # into the next channel, silently
    x = make((1, 2, 4, 4))
    pooled, indices = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
    f = lambda y, i: torch.nn.functional.max_unpool2d(y * 2, i, 2)  # noqa: E731
    torch._dynamo.reset()
    jitted = fuser.jit(f)
    torch.testing.assert_close(jitted(pooled, indices), f(pooled, indices))
    bad = indices.clone()
    bad[0, 0, 0, 0] = 20
    with pytest.raises(RuntimeError, match="invalid max index: 20"):
        f(pooled, bad)
    with pytest.raises(RuntimeError, match="invalid max index: 20"):
        jitted(pooled, bad)


def test_affine_grid_trains_under_the_default_rows_mode():
    # torch's backward of affine_grid refused the static row length beside symbolic sizes:
    # an InternalError every call, each after an eager run
    def f(t, x):
        grid = torch.nn.functional.affine_grid(t * 2, x.shape, align_corners=False)
        return torch.nn.functional.grid_sample(x, grid, align_corners=False)
    t, x = make((2, 2, 3)).requires_grad_(), make((2, 3, 5, 6)).requires_grad_()
    te, xe = t.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    torch._dynamo.reset()
    jitted = fuser.jit(f)
    for _ in range(2):
        out, expected = jitted(t, x), f(te, xe)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(out, expected)
    torch.testing.assert_close(t.grad, te.grad, rtol=1e-4, atol=1e-4)  # (sums over pixels, reordered)
    torch.testing.assert_close(x.grad, xe.grad, rtol=1e-4, atol=1e-4)
    assert jitted.cache_info().graphs == 1


def test_a_hook_added_to_a_submodule_after_the_first_call_runs():
    # Dynamo leaves submodules' hook dicts unguarded by default: the old trace ran, hook unseen
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    torch._dynamo.reset()
    jitted = fuser.jit(model)
    x = make((3, 4))
    jitted(x)
    jitted(x)
    handle = model[0].register_forward_hook(lambda mod, inputs, out: out * 0 + 1)
    torch.testing.assert_close(jitted(x), model(x))
    handle.remove()
    torch.testing.assert_close(jitted(x), model(x))


def test_multilabel_margin_loss_as_eager():
    # torch's decomposition (at the Autograd key too) counted slots after the first -1 as class 0
    x = make((2, 5)).requires_grad_()
    target = torch.tensor([[3, 0, -1, 1, 4], [1, 2, 4, -1, 0]])
    xe = x.detach().clone().requires_grad_()
    for name, compile_fn in _ways():
        x.grad = None
        out = compile_fn(lambda x, t: torch.nn.functional.multilabel_margin_loss(x, t, reduction="sum"))(x, target)
        out.backward()
        expected = torch.nn.functional.multilabel_margin_loss(xe, target, reduction="sum")
        xe.grad = None
        expected.backward()
        torch.testing.assert_close(out, expected, msg=name)
        torch.testing.assert_close(x.grad, xe.grad, msg=name)


@pytest.mark.parametrize("fn,args", [
    (torch.nn.functional.cross_entropy, lambda: (make((4, 5)), torch.randint(0, 5, (4,), dtype=torch.int32))),
    (torch.nn.functional.nll_loss, lambda: (make((4, 5)), torch.randint(0, 5, (4,), dtype=torch.int32))),
    (lambda x, t: torch.nn.functional.cross_entropy(x, t, weight=torch.ones(5)),
     lambda: (make((4, 5), torch.bfloat16), torch.randint(0, 5, (4,)))),
    (torch.nn.functional.binary_cross_entropy, lambda: (make((4, 5)).sigmoid(), torch.randint(0, 2, (4, 5)))),
], ids=["ce-int32", "nll-int32", "ce-weight-type", "bce-int-target"])
def test_loss_types_eager_refuses_raise_as_in_eager(fn, args):
    a = args()
    with pytest.raises(RuntimeError) as expected:
        fn(*a)
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match=re.escape(str(expected.value)[:30])):
        fuser.jit(fn)(*a)


@pytest.mark.parametrize("loss", [torch.nn.functional.mse_loss, torch.nn.functional.smooth_l1_loss,
                                  torch.nn.functional.huber_loss], ids=["mse", "smooth_l1", "huber"])
def test_a_regression_loss_of_an_empty_batch_trains_as_eager(loss):
    # its backward's decomposition divided by the element count in Python: ZeroDivisionError
    torch._dynamo.reset()
    jitted = fuser.jit(loss)
    for rows in (6, 0):
        x, t = make((rows, 3)).requires_grad_(), make((rows, 3))
        out = jitted(x, t)
        out.backward()
        xe = x.detach().clone().requires_grad_()
        expected = loss(xe, t)
        expected.backward()
        torch.testing.assert_close(out, expected, equal_nan=True)
        torch.testing.assert_close(x.grad, xe.grad)


@pytest.mark.parametrize("fn, dim", [(lambda x: x.sum(dim=3), 3), (lambda x: torch.softmax(x * 2, dim=2), 2)],
                         ids=["sum", "softmax"])
def test_a_dim_out_of_range_raises_eagers_error(fn, dim):
    # torch's reference raised it on the fake tensors: Dynamo's or AOTAutograd's text followed
    x = make((4, 8))
    with pytest.raises(IndexError) as caught:
        fuser.jit(fn)(x)
    assert str(caught.value) == f"Dimension out of range (expected to be in range of [-2, 1], but got {dim})"


# -- fifty-eighth session: probes of autograd's other modes and of quantized values -----------

def test_forward_mode_tangents_are_carried():
    # Dynamo keeps no guard on a dual tensor, and the kernels read the primal alone: the
    # tangent came back None, silently (fuser.jit and torch.compile(backend="fuser"))
    import torch.autograd.forward_ad as fwAD

    def f(x, w):
        return torch.nn.functional.layer_norm(x, (16,), w).sigmoid() * x

    for jitted in (fuser.jit(f), torch.compile(f, backend="fuser")):
        x, w, t = make((4, 16)), make((16,)), make((4, 16))
        torch.testing.assert_close(jitted(x, w), f(x, w))  # compiled outside the dual level first
        for _ in range(2):
            with fwAD.dual_level():
                y, tangent = fwAD.unpack_dual(jitted(fwAD.make_dual(x, t), w))
                y_eager, tangent_eager = fwAD.unpack_dual(f(fwAD.make_dual(x, t), w))
            torch.testing.assert_close(y, y_eager)
            assert tangent is not None
            torch.testing.assert_close(tangent, tangent_eager)


def test_batched_gradients_run_through_the_backward():
    # is_grads_batched=True hands vmap's batched tensors to the backward: the kernels raised
    # "Cannot access storage of BatchedTensorImpl"
    def f(x, w):
        return torch.nn.functional.gelu(x * w).softmax(-1) * x

    jitted = fuser.jit(f)
    for _ in range(3):
        x, w = make((3, 8)).requires_grad_(), make((8,)).requires_grad_()
        v = make((5, 3, 8))
        got = torch.autograd.grad(jitted(x, w), (x, w), v, is_grads_batched=True)
        expected = torch.autograd.grad(f(x, w), (x, w), v, is_grads_batched=True)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)
    g = fuser.jit(lambda x: torch.nn.functional.layer_norm(x, (8,)).tanh())
    x = make((2, 8))
    torch.testing.assert_close(torch.autograd.functional.jacobian(g, x, vectorize=True),
                               torch.autograd.functional.jacobian(lambda x: torch.nn.functional.layer_norm(x, (8,)).tanh(),
                                                                  x, vectorize=True))


def test_double_backward_of_a_linear_function_under_a_nonlinear_one():
    # the incoming gradient needs grad (the square's), the backward (3 g) is linear in it: the
    # gradient penalty's backward was refused from the second call on
    def f(x):
        return x * 3 + 1

    jitted = fuser.jit(f)
    for call in range(3):
        x = make((8,)).requires_grad_()
        x_eager = x.detach().clone().requires_grad_()
        g_eager, = torch.autograd.grad((f(x_eager) ** 2).sum(), x_eager, create_graph=True)
        g_eager.pow(2).sum().backward()
        if call == 0:  # (the first call's backward is AOTAutograd's, which refuses it)
            jitted(x).sum().backward()
            continue
        g, = torch.autograd.grad((jitted(x) ** 2).sum(), x, create_graph=True)
        torch.testing.assert_close(g, g_eager)
        g.pow(2).sum().backward()
        torch.testing.assert_close(x.grad, x_eager.grad)


def test_a_quantized_tensor_between_ops():
    # the trace records quantize_per_tensor's output as float: it was cast back with .to(), which
    # torch refuses for a qint8 tensor
    def f(x):
        q = torch.quantize_per_tensor(x * 2, 0.05, 3, torch.qint8)
        return q.dequantize() + 1

    jitted = fuser.jit(f)
    for shape in ((8, 32), (8, 32), (6, 32)):
        x = make(shape)
        torch.testing.assert_close(jitted(x), f(x), rtol=0, atol=0)


def test_scaled_mm_with_scales_torch_refuses_raises_eagers_error():
    a = (make((16, 32)) * 20).to(torch.float8_e4m3fn)
    b = (make((24, 32)) * 20).to(torch.float8_e4m3fn).t()
    sa, sb = make((16, 1)).abs(), make((1, 1)).abs()

    def f(a, b, sa, sb):
        return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16).float() + 1

    with pytest.raises(ValueError, match="Invalid scaling configuration"):
        f(a, b, sa, sb)
    with pytest.raises(ValueError, match="Invalid scaling configuration"):
        fuser.jit(f)(a, b, sa, sb)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fn", [lambda a, b: torch.add(a, b, alpha=0.9), lambda a, b: torch.sub(a, b, alpha=0.3),
                                lambda a, b: torch.rsub(a, b, alpha=1.7)], ids=["add", "sub", "rsub"])
def test_add_with_alpha_in_half_types_rounds_once(fn, dtype):
    # the product alpha y was rounded to the tensor's type before the sum: an SGD step on bf16
    # parameters (p.add_(g, alpha=-lr)) was 1 ulp off in a sixth of them, against CUDA's kernel
    a, b = make((512,), dtype=torch.float32) * 10, make((512,), dtype=torch.float32) * 10
    a, b = a.to(dtype), b.to(dtype)
    got = fuser.jit(fn)(a, b)
    assert got.dtype == dtype
    expected = fn(a.float(), b.float()).to(dtype)  # (CUDA's kernel: in fp32, rounded once)
    # (an fp32 fused multiply-add or not moves a rare sum across a rounding boundary: rounded
    # twice, a quarter of the elements were off)
    assert (got != expected).float().mean() < 0.02
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("fn", [lambda x: x.clamp(min=0.0), lambda x: x.clamp(0.0, 1.0), lambda x: x.clamp(max=0.0),
                                lambda x: x.clamp(-1.0, -0.0), torch.nn.functional.relu6,
                                lambda x: x.clamp(min=float("nan")), lambda x: x.clamp(min=torch.zeros(()))],
                         ids=["min", "min-max", "max", "negative-zero-max", "relu6", "nan-bound", "tensor-bound"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_clamp_keeps_x_on_a_tie_as_eager(fn, dtype):
    # maximum/minimum gave the bound's zero on a tie: clamp(-0.0, min=0.0) was +0.0
    x = torch.tensor([-0.0, 0.0, 1.0, -1.0, 7.0, float("nan")], dtype=dtype)
    got, expected = fuser.jit(fn)(x), fn(x)
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(torch.signbit(got), torch.signbit(expected))


def test_bicubic_antialias_backward_traces_with_static_sizes():
    # torch's backward of the antialiased bicubic interpolation takes no symbolic size ("Expected
    # IntList but got GenericList"): an InternalError where eager runs
    def f(x):
        return torch.nn.functional.interpolate(x, size=(3, 4), mode="bicubic", antialias=True)

    jitted = fuser.jit(f)
    for shape in ((2, 3, 8, 9), (2, 3, 8, 9), (1, 3, 7, 9)):
        x = make(shape).requires_grad_()
        x_eager = x.detach().clone().requires_grad_()
        y = jitted(x)
        torch.testing.assert_close(y, f(x_eager))
        g = make(y.shape)
        y.backward(g)
        f(x_eager).backward(g)
        torch.testing.assert_close(x.grad, x_eager.grad)


# -- fifty-eighth session: a probe of graph breaks and Dynamo's features -----------------------

def test_a_jitted_function_called_inside_a_traced_one_joins_its_trace():
    # Dynamo traced into fuser's call path and broke the graph there (os.sched_getaffinity):
    # two graphs, one kernel each, and a graph of fuser's own counters recompiled as they changed
    inner = fuser.jit(lambda x: torch.tanh(x * 2 + 1))
    outer = fuser.jit(lambda x: (inner(x).exp() * 2).sum(-1))
    for _ in range(3):
        x = make((8, 32))
        torch.testing.assert_close(outer(x), (torch.tanh(x * 2 + 1).exp() * 2).sum(-1))
    info = outer.cache_info()
    assert info.graphs == 1 and info.kernels == 1, info
    assert inner.cache_info().calls == 0


def test_torch_compiler_disable_of_a_jitted_function_runs_it_eagerly():
    def f(x):
        return torch.rand_like(x) * x + 1  # (fuser's random numbers are not eager's)

    jitted = fuser.jit(f)
    x = make((8, 32))
    torch.manual_seed(1)
    got = torch.compiler.disable(jitted)(x)
    torch.manual_seed(1)
    torch.testing.assert_close(got, f(x), rtol=0, atol=0)
    assert jitted.cache_info().graphs == 0


def test_a_misspelt_compile_mode_is_refused():
    with pytest.raises(Exception, match="no mode 'max-autotune-no-cudagrpahs'"):
        torch.compile(lambda x: torch.tanh(x + 1), backend="fuser", mode="max-autotune-no-cudagrpahs")(make((4, 8)))


def test_remembered_programs_leave_the_functions_globals_when_gone():
    # the direct path's names for Dynamo's compiled graphs stayed in the module's globals,
    # each keeping its program alive after torch._dynamo.reset() and the jitted function's end
    import gc

    def count():
        return sum(1 for name in globals() if name.startswith("__fuser_direct"))

    before = count()
    for _ in range(3):
        torch._dynamo.reset()
        jitted = fuser.jit(_leak_probe)
        for _ in range(3):
            jitted(make((4, 8)))
        assert count() > before
        del jitted
        gc.collect()
    assert count() == before


def _leak_probe(x):
    return torch.tanh(x * 3) + 1


def test_each_jitted_torch_module_has_its_own_recompile_budget():
    # torch.compile runs each of torch's own modules through one shared frame (wrap_inline's),
    # whose cache and recompile limit (8) every such module jitted in a process shared: the
    # ninth ran eagerly, unfused
    torch._dynamo.reset()
    modules = [torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.ReLU(), torch.nn.SiLU(), torch.nn.Tanh(),
               torch.nn.Softmax(-1), torch.nn.Sigmoid(), torch.nn.Hardswish(), torch.nn.Mish(), torch.nn.ELU()]
    for module in modules:
        jitted = fuser.jit(module)
        x = make((4, 16))
        torch.testing.assert_close(jitted(x), module(x))
        assert jitted.cache_info().graphs == 1, (module, jitted.cache_info())


def test_an_op_torch_cannot_differentiate_is_unsupported_not_internal():
    # AOTAutograd traces the backward with the forward and fails on unique's missing
    # derivative, where eager's forward runs: that was an InternalError, "a fuser bug"
    def f(x):
        return torch.unique((x * 2).floor()) + 1

    x = make((64,)).requires_grad_()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(fuser.UnsupportedError, match="op torch cannot differentiate"):
            fuser.jit(f)(x)
        with torch.no_grad():
            torch.testing.assert_close(fuser.jit(f)(x), f(x))


def test_batched_gradients_on_a_trace_s_first_call():
    # AOTAutograd's own backward (a training graph's first calls) handed the batched gradients
    # to the kernels: "Cannot access storage of BatchedTensorImpl"
    def f(x, w):
        return (x * w).sin() + x.cos() * 2

    jitted = fuser.jit(f)
    for n in (6, 9):
        x, w = make((n,)).requires_grad_(), make((n,)).requires_grad_()
        got = torch.autograd.grad(jitted(x, w), (x, w), torch.eye(n), is_grads_batched=True)
        expected = torch.autograd.grad(f(x, w), (x, w), torch.eye(n), is_grads_batched=True)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b)


def test_static_sizes_retrace_after_an_inference_trace():
    def f(x):
        return torch.nn.functional.interpolate(x, size=(3, 4), mode="bicubic", antialias=True)

    jitted = fuser.jit(f)
    with torch.no_grad():
        x = make((2, 3, 8, 9))
        torch.testing.assert_close(jitted(x), f(x))
    x = make((2, 3, 8, 9)).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    jitted(x).sum().backward()
    f(x_eager).sum().backward()
    torch.testing.assert_close(x.grad, x_eager.grad)

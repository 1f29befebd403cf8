"""Eager's checks that torch's decompositions lack, and rrelu out of training fused (sixty-fourth
session), each against eager PyTorch. Fuser computed where eager refuses: celu with alpha 0,
smooth_l1_loss with a negative beta, an interpolation to an empty size, and the backward of
elu_/leaky_relu_ with a negative slope (a wrong gradient: the branch chosen by the overwritten
result's sign); and rrelu(training=False), which is leaky_relu, ran as two ATen calls between
four fusions (backend.py `decompositions`, `_interpolates_empty`)."""
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from tests.helpers import COMPILERS, assert_eager, fresh_jit, make

SHAPE = (4, 33)


def _eager_error(fn, *args):
    with pytest.raises(Exception) as eager:
        fn(*args)
    return eager.value


def _assert_raises_as_eager(compiler, fn, *args, backward=False):
    """`fn` compiled raises eager's error (type and message). torch.compile wraps an error
    raised while its backend compiles in its BackendCompilerFailed, a RuntimeError."""
    def call(f):
        def run(*inputs):
            out = f(*inputs)
            if backward:
                out.sum().backward()
            return out
        return run
    eager = _eager_error(call(fn), *[a.detach().clone().requires_grad_(a.requires_grad) for a in args])
    with pytest.raises(Exception) as ours:
        call(COMPILERS[compiler](fn))(*args)
    assert str(eager).splitlines()[0] in str(ours.value)
    assert isinstance(ours.value, type(eager))
    if compiler == "jit":
        assert type(ours.value) is type(eager)


# -- in-place elu_ / leaky_relu_ with a negative slope: eager's backward refuses -------------


_IN_PLACE_NEGATIVE = {
    "elu_alpha_-1": lambda a: F.elu(a * 1.0, -1.0, inplace=True),
    "leaky_relu_slope_-0.2": lambda a: F.leaky_relu(a * 1.0, -0.2, inplace=True),
    "elu_method_alpha_-0.5": lambda a: torch.nn.functional.elu_(a * 2.0, -0.5),
}


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("case", list(_IN_PLACE_NEGATIVE))
def test_in_place_negative_slope_backward_raises_as_eager(compiler, case):
    x = make(SHAPE).requires_grad_()
    _assert_raises_as_eager(compiler, _IN_PLACE_NEGATIVE[case], x, backward=True)


@pytest.mark.parametrize("case", list(_IN_PLACE_NEGATIVE))
def test_in_place_negative_slope_forward_computes_as_eager(case):
    # eager refuses the backward only: the forward of an input that requires grad computes
    fn = _IN_PLACE_NEGATIVE[case]
    x = make(SHAPE).requires_grad_()
    assert_eager(fresh_jit(fn)(x), fn(x))


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("fn", [lambda a: F.elu(a * 1.0, 0.7, inplace=True),
                                lambda a: F.leaky_relu(a * 1.0, 0.2, inplace=True),
                                lambda a: F.elu(a, -1.0), lambda a: F.leaky_relu(a, -0.2)],
                         ids=["elu_inplace_0.7", "leaky_relu_inplace_0.2", "elu_-1", "leaky_relu_-0.2"])
def test_elu_and_leaky_relu_gradients_as_eager(compiler, fn):
    x = make(SHAPE)
    xe, xf = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = make(SHAPE)
    ye, yf = fn(xe), COMPILERS[compiler](fn)(xf)
    ye.backward(g)
    yf.backward(g)
    assert_eager(yf, ye)
    assert_eager(xf.grad, xe.grad)


# -- celu with alpha 0 --------------------------------------------------------------------------


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("fn", [lambda a: F.celu(a, 0.0), lambda a: F.celu(a * 1.0, 0.0, inplace=True),
                                lambda a: torch.celu(a.sin(), alpha=0)],
                         ids=["celu", "celu_", "torch.celu_int_alpha"])
def test_celu_alpha_zero_raises_as_eager(compiler, fn):
    _assert_raises_as_eager(compiler, fn, make(SHAPE))


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("alpha", [1.0, -0.5, 1e-3])
def test_celu_other_alphas_compute_as_eager(compiler, alpha):
    fn = lambda a: F.celu(a, alpha)  # noqa: E731
    x = make(SHAPE)
    assert_eager(COMPILERS[compiler](fn)(x), fn(x))


# -- smooth_l1_loss with a negative beta --------------------------------------------------------


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_smooth_l1_negative_beta_raises_as_eager(compiler, reduction):
    fn = lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=-1.0)  # noqa: E731
    _assert_raises_as_eager(compiler, fn, make(SHAPE), make(SHAPE))


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_smooth_l1_other_betas_compute_as_eager(compiler, beta):
    fn = lambda a, b: F.smooth_l1_loss(a, b, beta=beta)  # noqa: E731
    x, t = make(SHAPE), make(SHAPE)
    xe, xf = x.clone().requires_grad_(), x.clone().requires_grad_()
    ye, yf = fn(xe, t), COMPILERS[compiler](fn)(xf, t)
    ye.backward()
    yf.backward()
    assert_eager(yf, ye)
    assert_eager(xf.grad, xe.grad)


# -- interpolation from or to an empty size -----------------------------------------------------


_EMPTY_INTERPOLATIONS = {
    "nearest": (lambda a: F.interpolate(a, scale_factor=0.1), (2, 3, 6)),
    "nearest-exact": (lambda a: F.interpolate(a, scale_factor=0.1, mode="nearest-exact"), (2, 3, 6)),
    "linear": (lambda a: F.interpolate(a, scale_factor=0.1, mode="linear"), (2, 3, 6)),
    "bilinear": (lambda a: F.interpolate(a, scale_factor=0.1, mode="bilinear"), (1, 2, 6, 6)),
    "bicubic": (lambda a: F.interpolate(a, scale_factor=0.1, mode="bicubic"), (1, 2, 6, 6)),
    "trilinear": (lambda a: F.interpolate(a, scale_factor=0.1, mode="trilinear"), (1, 2, 4, 4, 4)),
    "bilinear_one_extent": (lambda a: F.interpolate(a, scale_factor=(1.0, 0.1), mode="bilinear"), (1, 2, 6, 6)),
    "nearest_from_empty": (lambda a: F.interpolate(a, size=(3, 4)), (1, 2, 0, 6)),
    "upsample_module": (torch.nn.Upsample(scale_factor=0.1, mode="bilinear"), (1, 2, 6, 6)),
}


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("case", list(_EMPTY_INTERPOLATIONS))
def test_interpolate_to_empty_raises_as_eager(compiler, case):
    fn, shape = _EMPTY_INTERPOLATIONS[case]
    _assert_raises_as_eager(compiler, fn, make(shape))


@pytest.mark.parametrize("compiler", list(COMPILERS))
def test_interpolate_area_to_empty_computes_as_eager(compiler):
    fn = lambda a: F.interpolate(a, scale_factor=0.1, mode="area")  # noqa: E731
    x = make((1, 2, 6, 6))
    assert_eager(COMPILERS[compiler](fn)(x), fn(x))


def test_interpolate_to_non_empty_still_fuses():
    fn = lambda a: F.interpolate(a.sin(), scale_factor=2.0, mode="nearest") * 2  # noqa: E731
    x = make((1, 2, 5, 6))
    jitted = fresh_jit(fn)
    assert_eager(jitted(x), fn(x))
    assert jitted.cache_info().fusions > 0  # (compiled, not run as traced)


# -- rrelu out of training: leaky_relu with the mean slope, fused -------------------------------


def _rrelu_functional(a):
    return F.rrelu(a * 2, 0.1, 0.3, training=False).sin()


def _rrelu_in_place(a):
    return F.rrelu(a * 2, 0.05, 0.45, training=False, inplace=True).cos()


def _rrelu_module():
    module = torch.nn.RReLU(0.2, 0.25).eval()
    return lambda a: module(a.exp() - 1.5) * 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("make_fn", [lambda: _rrelu_functional, lambda: _rrelu_in_place, _rrelu_module],
                         ids=["functional", "in_place", "module"])
def test_rrelu_in_evaluation_fuses_as_eager(dtype, make_fn):
    fn = make_fn()
    x = make((6, 40), dtype)
    g = make((6, 40), dtype)
    xe, xf = x.clone().requires_grad_(), x.clone().requires_grad_()
    jitted = fresh_jit(fn)
    ye, yf = fn(xe), jitted(xf)
    ye.backward(g)
    yf.backward(g)
    assert_eager(yf, ye)
    assert_eager(xf.grad, xe.grad)
    assert jitted.cache_info().fallback_ops == 0


@pytest.mark.parametrize("compiler", list(COMPILERS))
def test_rrelu_in_evaluation_inference_fuses_as_eager(compiler):
    x = make((6, 40))
    compiled = COMPILERS[compiler](_rrelu_functional)
    with torch.no_grad():
        assert_eager(compiled(x), _rrelu_functional(x))
    if compiler == "jit":
        assert compiled.cache_info().fallback_ops == 0


def test_rrelu_in_training_draws_eager_slopes():
    # training's random slopes stay ATen's: the same draws as eager's from the same seed
    fn = lambda a: F.rrelu(a * 2, 0.1, 0.3, training=True).sin()  # noqa: E731
    x = make((6, 40))
    xe, xf = x.clone().requires_grad_(), x.clone().requires_grad_()
    jitted = fresh_jit(fn)
    torch.manual_seed(7)
    ye = fn(xe)
    torch.manual_seed(7)
    yf = jitted(xf)
    ye.sum().backward()
    yf.sum().backward()
    assert_eager(yf, ye)
    assert_eager(xf.grad, xe.grad)
    assert not torch.equal(ye, fn(x))  # (random: another draw differs)

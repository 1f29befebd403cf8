"""Eager's refusals and gradients where fuser's random lowerings and torch's decompositions
differed (sixty-sixth session), each against eager PyTorch: a random draw of a float8 type fused
where eager has no kernel for it (rules/random.py `_floating_dtype`); a dropout probability of
NaN (or outside [0, 1] through torch.dropout) copied the input out of training and raised
bernoulli_'s error in training (backend.py `_drops_out_outside_unit_range`); and group norm's
backward over an empty spatial extent divided by zero (backend.py
`_empty_safe_group_norm_backward`)."""
import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from tests.helpers import COMPILERS, assert_eager, assert_raises_as_eager, make

SHAPE = (4, 33)
_F8 = torch.float8_e4m3fn


# -- random draws of a float8 type: eager has no kernel -----------------------------------------


_FLOAT8_DRAWS = {
    "rand_like": lambda a: torch.rand_like(a, dtype=_F8).float() * a,
    "randn_like": lambda a: torch.randn_like(a, dtype=_F8).float() * a,
    "rand": lambda a: torch.rand(a.shape, dtype=_F8).float() * a,
    "randn": lambda a: torch.randn(a.shape, dtype=torch.float8_e5m2).float() * a,
    "bernoulli_p": lambda a: torch.bernoulli(a.to(_F8), 0.5).float() * a,
    "bernoulli_tensor": lambda a: torch.bernoulli(a.sigmoid().to(_F8)).float() * a,
}


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("case", list(_FLOAT8_DRAWS))
def test_float8_random_draw_raises_as_eager(compiler, case):
    assert_raises_as_eager(compiler, _FLOAT8_DRAWS[case], make(SHAPE))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_two_byte_random_draws_still_fuse(dtype):
    fn = lambda a: torch.rand_like(a, dtype=dtype).float() + a  # noqa: E731
    x = make(SHAPE)
    draw = COMPILERS["jit"](fn)(x) - x
    assert ((draw >= 0) & (draw < 1)).all() and draw.std() > 0.1


# -- dropout with a probability outside [0, 1] --------------------------------------------------


_BAD_DROPOUTS = {
    "F.dropout_nan_eval": lambda a: F.dropout(a, float("nan"), training=False) * 2,
    "F.dropout_nan_train": lambda a: F.dropout(a, float("nan"), training=True) * 2,
    "F.dropout_nan_keyword": lambda a: F.dropout(a, p=float("nan"), training=False) + 1,
    "torch.dropout_1.5_eval": lambda a: torch.dropout(a, 1.5, False) * 2,
    "torch.dropout_-0.5_train": lambda a: torch.dropout(a, -0.5, True) * 2,
    "module_nan_eval": torch.nn.Sequential(torch.nn.Dropout(float("nan")), torch.nn.Tanh()).eval(),
}


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("case", list(_BAD_DROPOUTS))
def test_dropout_probability_outside_unit_range_raises_as_eager(compiler, case):
    assert_raises_as_eager(compiler, _BAD_DROPOUTS[case], make(SHAPE))


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("p, training", [(0.0, True), (1.0, True), (1.0, False), (0.3, False)])
def test_dropout_probability_at_its_bounds_computes_as_eager(compiler, p, training):
    fn = lambda a: F.dropout(a, p, training=training) * 2  # noqa: E731
    x = make(SHAPE)
    assert_eager(COMPILERS[compiler](fn)(x), fn(x))


# -- group norm's backward over an empty spatial extent -----------------------------------------


def _group_norm_grads(fn, x, w, b, grad_of):
    """fn's output and the gradients of the inputs named in `grad_of` (fresh leaves)."""
    leaves = {name: t.detach().clone().requires_grad_(name in grad_of) for name, t in
              (("x", x), ("w", w), ("b", b))}
    y = fn(leaves["x"], leaves["w"], leaves["b"])
    y.sum().backward()
    return y, [leaves[name].grad for name in grad_of]


@pytest.mark.parametrize("compiler", list(COMPILERS))
@pytest.mark.parametrize("shape", [(2, 4, 0), (3, 6, 2, 0)])
@pytest.mark.parametrize("grad_of", [("x",), ("x", "w", "b"), ("x", "b"), ("w", "b")])
def test_group_norm_backward_of_empty_extent_as_eager(compiler, shape, grad_of):
    fn = lambda x, w, b: F.group_norm(x, 2, w, b)  # noqa: E731
    x, w, b = make(shape), make(shape[1:2]), make(shape[1:2])
    y_eager, grads_eager = _group_norm_grads(fn, x, w, b, grad_of)
    y, grads = _group_norm_grads(COMPILERS[compiler](fn), x, w, b, grad_of)
    assert_eager(y, y_eager)
    for name, grad, grad_eager in zip(grad_of, grads, grads_eager):
        assert grad is not None, f"no gradient of {name}"
        assert_eager(grad, grad_eager)  # (the weight's: NaN, eager's 1/std of an empty group)


def test_group_norm_backward_nonempty_after_empty_as_eager():
    # the empty call's program must not serve a non-empty one (0 is a specialized size)
    fn = lambda x, w, b: F.group_norm(x * 1.5, 2, w, b)  # noqa: E731
    jitted = COMPILERS["jit"](fn)
    for shape in [(2, 4, 0), (2, 4, 5)]:
        x, w, b = make(shape), make((4,)), make((4,))
        y_eager, grads_eager = _group_norm_grads(fn, x, w, b, ("x", "w", "b"))
        y, grads = _group_norm_grads(jitted, x, w, b, ("x", "w", "b"))
        assert_eager(y, y_eager)
        for grad, grad_eager in zip(grads, grads_eager):
            assert_eager(grad, grad_eager)

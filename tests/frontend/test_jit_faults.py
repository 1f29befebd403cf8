"""Faults of fuser.jit found by probing it as a PyTorch user would (forty-seventh session), each
checked against eager PyTorch."""
import copy

import pytest
import torch
import torch._dynamo

import fuser
from fuser.evaluate.philox import random_tensor
from tests.helpers import assert_eager, make


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = 1.0
        self.shift = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return self.lin(x) * self.scale + self.shift


class _Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = fuser.jit(torch.nn.Linear(4, 4))
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x))


def test_state_dict_of_a_model_holding_a_jitted_module_round_trips():
    m, m2 = _Holder(), _Holder()
    sd = m.state_dict()
    assert list(sd) == ["block.weight", "block.bias", "head.weight", "head.bias"]
    m2.load_state_dict(sd)  # strict: every key matched
    assert torch.equal(m2.block.weight, m.block.weight)
    # the same keys as the eager model's, both ways
    eager = torch.nn.Module()
    eager.block, eager.head = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
    eager.load_state_dict(sd)
    m2.load_state_dict(eager.state_dict())
    assert torch.equal(m2.head.bias, eager.head.bias)
    x = make((3, 4))
    assert_eager(m2(x), eager.head(eager.block(x)))


def test_state_dict_of_a_jitted_module_has_the_module_keys():
    lin = torch.nn.Linear(4, 4)
    jm = fuser.jit(lin)
    assert list(jm.state_dict()) == ["weight", "bias"]
    other = torch.nn.Linear(4, 4)
    jm.load_state_dict(other.state_dict())
    assert torch.equal(lin.weight, other.weight)


def test_attributes_set_through_a_jitted_module_reach_its_forward():
    m = _Scaled()
    jm = fuser.jit(m)
    x = make((4, 8))
    jm(x)
    jm.scale = 3.0
    jm.shift = torch.nn.Parameter(torch.randn(8))
    assert m.scale == 3.0 and m.shift is jm.shift
    with torch.no_grad():
        assert_eager(jm(x), m.lin(x) * 3.0 + m.shift)
    jm.eval()
    assert not jm.training and not m.training
    jm.train()
    assert jm.training and m.training


def test_enable_grad_inside_a_jitted_function_called_under_no_grad():
    def f(x):
        with torch.enable_grad():
            y = (x * 2).sin()
        return y

    jf = fuser.jit(f)
    for _ in range(2):  # the second call runs the planned backward
        x = make((4, 8)).requires_grad_()
        with torch.no_grad():
            out = jf(x)
        assert out.requires_grad
        out.sum().backward()
        assert_eager(x.grad, 2 * torch.cos(2 * x.detach()))


def test_complex_tensor_with_a_python_int():
    a = make((4, 8), torch.complex64)
    assert_eager(fuser.jit(lambda a: a * 2 + 1)(a), a * 2 + 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_uniform_draws_stay_below_one(dtype):
    # 1 - u > 0 for a draw u in [0, 1): a draw rounded up to 1 becomes 0, as on eager's GPU
    out = fuser.jit(lambda x: 1 - torch.rand_like(x))(make((256, 256), dtype))
    assert out.dtype == dtype and out.min() > 0 and out.max() <= 1
    aten = random_tensor("uniform", (256, 256), (0.0, 1.0, True), 1234, 0, dtype, "cpu")
    assert aten.max() < 1 and aten.min() >= 0


def test_uniform_between_bounds_stays_below_the_upper_one():
    out = random_tensor("uniform", (512, 512), (1.0, 1.0 + 2.0 ** -20, False), 7, 0, torch.float32, "cpu")
    assert out.max() < 1.0 + 2.0 ** -20 and out.min() >= 1.0


def test_pow_special_cases():
    x = torch.tensor([0., -0., -0., 2., float("inf"), -1., -1., float("nan"), 1., -8., -2., 1.5])
    y = torch.tensor([0., -1., -3., float("inf"), 0., float("inf"), float("-inf"), 0., float("nan"), 1 / 3, 3., -2.])
    assert_eager(fuser.jit(lambda x, y: torch.pow(x, y))(x, y), torch.pow(x, y))


def test_double_tanh_is_double_accurate():
    x = torch.cat([torch.linspace(-0.07, 0.07, 301, dtype=torch.float64), make((64,), torch.float64)])
    out = fuser.jit(torch.tanh)(x)
    torch.testing.assert_close(out, torch.tanh(x), rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("fn,x", [
    (lambda x: x - True, lambda: make((2, 3))),
    (lambda x: x - 0.5, lambda: make((2, 3)) > 0),
    (lambda x: x ** -1, lambda: make((2, 3), torch.int64, nonzero=True)),
])
def test_ops_eager_refuses_raise_as_in_eager(fn, x):
    with pytest.raises(RuntimeError) as eager:
        fn(x())
    with pytest.raises(RuntimeError) as jitted:
        fuser.jit(fn)(x())
    assert str(eager.value).splitlines()[0] in str(jitted.value)


def test_backward_inside_a_jitted_training_step():
    # loss.backward() in a compiled frame runs fuser's backward with Dynamo's hook on: from the
    # second step (the direct backward), Dynamo traced fuser's runtime and failed
    def step(model, x):
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    torch.manual_seed(0)
    eager_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model = copy.deepcopy(eager_model)
    jstep = fuser.jit(step)
    for _ in range(3):
        x = make((8, 16))
        assert_eager(jstep(model, x), step(eager_model, x))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_eager(p.grad, q.grad)


def test_gradients_through_a_buffer_the_forward_updates():
    # `self.count += 1` then a use of it: the backward must see the count the forward used, not
    # recompute count + 1 from the buffer the forward has already written back
    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x):
            y = self.lin(x)
            self.count += 1
            return y * self.count

    eager = Counted()
    model = copy.deepcopy(eager)
    jitted = fuser.jit(model)
    for _ in range(2):
        x = make((4, 8))
        out, ref = jitted(x), eager(x)
        assert_eager(out, ref)
        out.sum().backward()
        ref.sum().backward()
        assert_eager(model.lin.weight.grad, eager.lin.weight.grad)
        assert_eager(model.lin.bias.grad, eager.lin.bias.grad)
    assert model.count.item() == eager.count.item() == 2


def test_writing_in_place_to_an_expanded_input_names_it():
    @fuser.jit
    def bump(x):
        x.add_(1)
        return x * 2

    x = make((1, 4)).expand(3, 4)
    with pytest.raises(RuntimeError, match="single memory location"):
        make((1, 4)).expand(3, 4).add_(1)  # eager refuses it too
    with pytest.raises(fuser.FusionInputError, match=r"input x \(shape \[3, 4\], strides \[0, 1\]\).*clone\(\)"):
        bump(x)
    y = make((3, 4))  # a tensor of its own is written as eager writes it
    ref = y.clone()
    out = bump(y)
    ref.add_(1)
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(out, ref * 2)


@pytest.mark.parametrize("dtype, value", [(torch.float16, -3e4), (torch.float16, float("-inf")),
                                          (torch.bfloat16, -1e30), (torch.int32, 7)])
def test_masked_fill_fuses_and_matches_eager(dtype, value):
    torch._dynamo.reset()
    f = fuser.jit(lambda x, m, v: x.masked_fill(m, v) * 2)
    x, m = (make((3, 4)) * 5).to(dtype), make((3, 4)) > 0
    assert torch.equal(f(x, m, value), x.masked_fill(m, value) * 2)
    # (an int argument into an int32 result fuses, its range checked at each call as eager's)
    assert f.cache_info().fallback_ops == 0
    if dtype is torch.int32:
        assert torch.equal(f(x, m, -9), x.masked_fill(m, -9) * 2)
        with pytest.raises(fuser.FusionInputError, match="masked_fill: a number bound at execution.*int32 holds"):
            f(x, m, 2**40)  # (eager: "value cannot be converted to type int without overflow")


@pytest.mark.parametrize("fn", [lambda x, m: x.masked_fill(m, -1e9), lambda x, m: torch.full_like(x, 7e4) + x],
                         ids=["masked_fill", "full_like"])
def test_a_fill_value_out_of_the_dtype_raises_as_in_eager(fn):
    # the decomposition to where(mask, scalar_tensor(value), x) stored -inf where eager raises
    torch._dynamo.reset()
    x, m = make((3, 4)).half(), make((3, 4)) > 0
    with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half without overflow"):
        fn(x, m)
    with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half without overflow"):
        fuser.jit(fn)(x, m)


def test_a_jitted_modules_training_flag_is_the_modules():
    """`jm.training` read and set the wrapper's own flag: after `m.eval()` it still said True,
    and `jm.training = False` left the module training."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    jm = fuser.jit(m)
    m.eval()
    assert jm.training is False
    jm.training = True
    assert m.training is True and m[1].training is False  # (as eager: the flag, not train())
    jm.eval()
    assert not m.training and not m[1].training and jm.training is False


class _SavesItsOutput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        y = self.lin(x)  # 3-D: a view of the 2-D matmul result, which grad(w) reads
        return y, (y * self.w).sum()


def test_an_in_place_change_of_an_output_the_backward_reads_raises_as_in_eager():
    """A linear's 3-D output is returned as an `_unsafe_view` of the matmul result the backward
    saves, with a version counter of its own: `y.add_(1)` then went unseen and grad(w) read the
    changed values. Eager raises autograd's in-place error; so does fuser, on every call, and
    without the change the gradients match eager's."""
    torch.manual_seed(0)
    m = _SavesItsOutput()
    ref = copy.deepcopy(m)
    jm = fuser.jit(m)
    for _ in range(3):
        x = torch.randn(2, 3, 8)
        y, s = jm(x)
        y.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            s.backward()
        y2, s2 = ref(x)
        y2.add_(1.0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            s2.backward()
    m.zero_grad()
    ref.zero_grad()
    x = torch.randn(2, 3, 8)
    for mod in (jm, ref):
        y, s = mod(x)
        (s + y.square().sum()).backward()
    for name, p in m.named_parameters():
        torch.testing.assert_close(p.grad, dict(ref.named_parameters())[name].grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("f", [lambda x: x.exp().unbind(1), lambda x: x.exp().unbind(0),
                               lambda x: torch.sigmoid(x).chunk(2, 0), lambda x: x.softmax(-1).split([2, 4], 1)],
                         ids=["unbind1", "unbind0", "chunk", "split"])
def test_pieces_of_a_value_the_backward_saves(f):
    """Each piece was saved through in turn, the saved value rebuilt as the last piece: the
    backward's fusion got a tensor of the wrong shape (fifty-fifth session). A write to any
    piece before the backward raises autograd's error, as eager refuses it."""
    jitted = fuser.jit(f)
    for _ in range(2):
        x = make((4, 6)).requires_grad_()
        outs, want = jitted(x), f(x)
        dys = [torch.randn_like(w) for w in want]
        torch.testing.assert_close(outs, want)
        torch.testing.assert_close(torch.autograd.grad(outs, x, dys), torch.autograd.grad(want, x, dys))
    x = make((4, 6)).requires_grad_()
    outs = jitted(x)
    with torch.no_grad():
        outs[-1].mul_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        sum(o.sum() for o in outs).backward()


@pytest.mark.parametrize("split", [lambda t: t.chunk(2, -1), lambda t: t.split([2, 2], 1)], ids=["chunk", "split"])
def test_pieces_of_a_computed_tensor_keep_eagers_layout(split):
    # the pieces were ATen views of a row-major kernel output: strides (60, 15, 5, 1) where
    # eager's are (1, 2, 8, 24), and piece.permute(3, 2, 1, 0).view(-1) failed
    def f(x):
        return split(x * 2)
    x = torch.randn(5, 3, 4, 2).permute(3, 2, 1, 0)
    got, expected = fuser.jit(f)(x), f(x)
    for g, e in zip(got, expected):
        assert_eager(g, e)
        strides = lambda t: [st for st, n in zip(t.stride(), t.shape) if n != 1]  # noqa: E731
        assert strides(g) == strides(e), (g.stride(), e.stride())
        if e.permute(3, 2, 1, 0).is_contiguous():  # (the chunk along the outermost axis)
            g.permute(3, 2, 1, 0).view(-1)  # (a view, as eager's)


def _scale_then_add(x, y):
    x.mul_(2)
    return x + y


@pytest.mark.parametrize("views", [
    lambda b: (b[0], b[0]),                 # two view objects of one memory
    lambda b: (b[0, :, :3], b[0, :, 2:5]),  # overlapping in part
    lambda b: (b[0], b[1]),                 # one storage, no overlap: the compiled path
], ids=["same", "partial", "disjoint"])
def test_an_argument_written_in_place_overlapping_another_reads_it_as_eager(views):
    # traced for separate tensors, the functional graph read y before x's write: out was
    # 2x + y_old where eager's is 2x + y_new (PyTorch issue 139789; torch.compile alike)
    jf = fuser.jit(_scale_then_add)
    x0, y0 = views(torch.randn(2, 4, 5))[0], views(torch.randn(2, 4, 5))[1]  # (same strides, two storages)
    expected = _scale_then_add(x0.clone(), y0.clone())
    assert_eager(jf(x0, y0), expected)  # separate tensors: traced as such
    b1 = torch.randn(2, 4, 5)
    b2 = b1.clone()
    out = jf(*views(b1))
    expected = _scale_then_add(*views(b2))
    assert_eager(out, expected)
    assert torch.equal(b1, b2)  # the writes landed as eager's
    assert jf.cache_info().graphs == 1


class _TwoTensors:
    def __init__(self, a, b):
        self.a, self.b = a, b


def _scale_first(*xs):
    xs[0].mul_(2)
    return xs[1] + 1


@pytest.mark.parametrize("how", ["varargs", "list", "dict", "attributes"])
def test_arguments_written_in_place_through_a_container_overlapping_read_as_eager(how):
    # the overlap check took only top-level arguments (Dynamo's LocalSource): a write through
    # *args, a list, a dict or an object's attribute to memory another such argument reads
    # read the value from before the write, silently (rows 0-1 written, rows 1-2 read)
    fns = {
        "varargs": (_scale_first, lambda f, a, b: f(a, b)),
        "list": (lambda xs: _scale_first(*xs), lambda f, a, b: f([a, b])),
        "dict": (lambda d: _scale_first(d["a"], d["b"]), lambda f, a, b: f({"a": a, "b": b})),
        "attributes": (lambda o: _scale_first(o.a, o.b), lambda f, a, b: f(_TwoTensors(a, b))),
    }
    fn, call = fns[how]
    jf = fuser.jit(fn)
    call(jf, torch.randn(2, 6), torch.randn(2, 6))  # traced for separate tensors
    b1 = torch.randn(4, 6)
    b2 = b1.clone()
    got = call(jf, b1[0:2], b1[1:3])
    expected = call(fn, b2[0:2], b2[1:3])
    assert_eager(got, expected)
    assert torch.equal(b1, b2)


def test_an_eager_step_whose_cpu_kernel_gives_another_dtype_than_its_trace():
    # native batch norm of bf16 on the CPU returns bf16 statistics where its meta function
    # (the trace) says fp32: the fusion after it refused its input (FusionInputError naming
    # an internal T1); the step's outputs are cast to the traced dtypes
    g = torch.Generator().manual_seed(7)
    eager = torch.nn.BatchNorm1d(12).to(torch.bfloat16).train()
    mine = copy.deepcopy(eager)
    x = torch.randn(16, 12, generator=g).to(torch.bfloat16)
    want = eager(x.clone().requires_grad_())
    xj = x.clone().requires_grad_()
    got = fuser.jit(mine)(xj)
    assert_eager(got, want.detach())
    for name in ("running_mean", "running_var"):
        assert_eager(getattr(mine, name), getattr(eager, name))
    dy = torch.randn(16, 12, generator=g).to(torch.bfloat16)
    (gx,) = torch.autograd.grad(got, xj, dy)
    xe = x.clone().requires_grad_()
    (ge,) = torch.autograd.grad(copy.deepcopy(eager).train()(xe), xe, dy)
    assert_eager(gx, ge)


def test_an_empty_batch_through_a_layer_norm_warns_nothing():
    """ATen's var_mean warned about degrees of freedom for the empty batch of a layer norm the
    user called, which eager's own layer norm does not (fifty-fifth session)."""
    import warnings

    def f(x, w, b):
        return torch.nn.functional.layer_norm(x, (8,), w, b)

    jitted, w, b = fuser.jit(f), make((8,)), make((8,))
    x = make((3, 8))
    torch.testing.assert_close(jitted(x, w, b), f(x, w, b))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = jitted(torch.randn(0, 8), w, b)
    assert out.shape == (0, 8)


_INT32 = torch.tensor([7, -3, 0, 5, 1, -1], dtype=torch.int32)


@pytest.mark.parametrize("f, args", [
    (lambda x, p: x ** p, (_INT32, -1)),                                  # an int argument: a symbol
    (lambda x, p: x.pow(p) + 1, (_INT32, -2)),
    (lambda x, lo, hi: x.clamp(lo, hi), (_INT32, 2**40, 2**41)),
    (lambda x: x.clamp(2**40), (_INT32,)),
    (lambda x: torch.clamp_min(x.half(), 1e5), (_INT32,)),
    (lambda x, v: torch.where(x > 0, x, v), (_INT32, 2**40)),
    (lambda x: torch.where(x > 0, x, 2**40), (_INT32,)),
    (lambda x, v: x.half().masked_fill(x > 0, v), (_INT32, 100000)),
], ids=["pow-arg", "pow-arg-2", "clamp-args", "clamp-literal", "clamp-min-half", "where-arg", "where-literal",
        "masked-fill-arg"])
def test_numbers_eager_refuses_are_refused_as_eager_does(f, args):
    """An integer tensor to a negative power given as an argument, and numbers out of the
    result's range in clamp, where and masked_fill (as arguments, known only at execution, or
    literals): a kernel returned wrapped values or inf where eager raises (fifty-fifth session)."""
    with pytest.raises(RuntimeError) as eager:
        f(*args)
    with pytest.raises(RuntimeError) as got:
        fuser.jit(f)(*args)
    assert str(eager.value).split("\n")[0] in str(got.value)


def test_in_range_numbers_still_fuse_and_match():
    def f(x, p, lo, v):
        return (x ** p).clamp(lo, 40) + torch.where(x > 2, x, v) + x.float().masked_fill(x < 0, v)

    jitted = fuser.jit(f)
    for p, lo, v in ((2, -3, 4), (3, 0, -1)):
        torch.testing.assert_close(jitted(_INT32, p, lo, v), f(_INT32, p, lo, v))


def test_the_gradient_through_an_int_argument_power_is_named():
    """torch's AOTAutograd cannot differentiate `x ** p` with p an int argument traced as a
    symbol (as torch.compile(dynamic=True)): an InternalError naming none of it before; with
    dynamic=False the number is a constant and the gradient is eager's."""
    def f(x, p):
        return (x ** p).sum()

    x = make((5,)).requires_grad_()
    try:
        fuser.jit(f)(x, 3).backward()
    except fuser.UnsupportedError as e:  # (a torch that lifts the limit takes the else branch)
        assert "p an int argument" in str(e) and "dynamic=False" in str(e)
    else:
        torch.testing.assert_close(x.grad, 3 * x.detach() ** 2)
        x.grad = None
    fuser.jit(f, dynamic=False)(x, 3).backward()
    torch.testing.assert_close(x.grad, 3 * x.detach() ** 2)


@pytest.mark.parametrize("f, args", [
    (lambda a, b: a + b, (make((3,)), make((4,)))),
    (lambda a, b: (a @ b).relu(), (make((3, 4)), make((5, 6)))),
    (lambda x: x.view(3, 7) * 2, (make((4, 5)),)),
    (lambda x: x.sum(dim=(0, 0)), (make((4, 5)),)),
    (lambda x: x.mean(), (torch.arange(6),)),
], ids=["broadcast", "matmul", "view", "repeated-dim", "mean-of-int"])
def test_an_op_failing_on_the_inputs_raises_eagers_error(f, args, capfd):
    """An op that raises for these inputs raised Dynamo's TorchRuntimeError, its message about
    fake tensors with the sizes as symbols (`input of size 5*s77`), after torch's log had
    printed the meta function's traceback: now eager's own error, sizes and all, and no log."""
    with pytest.raises(RuntimeError) as eager:
        f(*args)
    capfd.readouterr()
    with pytest.raises(type(eager.value)) as got:
        fuser.jit(f)(*args)
    assert str(got.value) == str(eager.value)
    assert got.value.__suppress_context__
    assert "fake" not in capfd.readouterr().err


def test_a_trace_that_fails_where_eager_runs_is_named_or_falls_back():
    """A custom op without a fake implementation runs in eager but cannot be traced: an
    UnsupportedError naming the op, or with fallback="eager" a warning and eager's result."""
    @torch.library.custom_op("fuser_tests::twice_no_fake", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def f(x):
        return twice(x).relu() + 1

    x = make((4, 5))
    with pytest.raises(fuser.UnsupportedError, match="twice_no_fake"):
        fuser.jit(f)(x)
    jitted = fuser.jit(f, fallback="eager")
    with pytest.warns(UserWarning, match="running it eagerly"):
        torch.testing.assert_close(jitted(x), f(x))
    torch.testing.assert_close(jitted(x), f(x))


_I32 = torch.tensor([[3, -4, 5], [1, 2, -6]], dtype=torch.int32)
_H = torch.tensor([[0.5, -1.25, 2.0], [0.75, 3.0, -0.5]], dtype=torch.float16)


@pytest.mark.parametrize("f, args", [
    (lambda a: a * 2 + torch.full((2, 3), 1e12, dtype=torch.int32), (_I32,)),
    (lambda a: a.masked_fill(a > 0, 1e12), (_I32,)),
    (lambda a: torch.nn.functional.pad(a * 2, (1, 1), value=2**40), (_I32,)),
    (lambda a: torch.nn.functional.pad(a * 2, (1, 1), value=float("nan")), (_I32,)),
    (lambda h: torch.nn.functional.pad(h * 2, (1, 1), value=1e6), (_H,)),
    (lambda h: torch.zeros_like(h).scatter(1, torch.tensor([[0], [2]]), 1e6), (_H,)),
    (lambda h: h.index_fill(1, torch.tensor([0, 2]), 1e6), (_H,)),
    (lambda h: torch.nn.functional.threshold(h, 0.1, 1e6), (_H,)),
    (lambda h: torch.add(h, h, alpha=1e6), (_H,)),
], ids=["full-float-into-int", "masked-fill-float-into-int", "pad-int", "pad-nan-int", "pad-half", "one-hot-half",
        "index-fill-half", "threshold-half", "add-alpha-half"])
def test_fill_values_the_result_cannot_hold_raise_as_in_eager(f, args):
    """A float value into an integer result (1e12, NaN), or a value past a half result's range,
    in full, masked_fill, pad, a one-hot scatter, index_fill, threshold and add's alpha: fuser
    wrapped it, stored inf, or raised the interpreter's OverflowError, where eager raises."""
    with pytest.raises(RuntimeError) as eager:
        f(*args)
    with pytest.raises(RuntimeError) as got:
        fuser.jit(f)(*args)
    assert str(eager.value).split("\n")[0] in str(got.value)


@pytest.mark.parametrize("f", [
    lambda c, p, v: c.index_copy(1, p, v),
    lambda c, p, v: c.index_add(1, p, v),
    lambda c, p, v: c.clone().index_copy_(1, p, v) * 2,
], ids=["index-copy", "index-add", "index-copy-in-place"])
def test_a_negative_index_into_index_copy_or_add_raises_as_in_eager(f):
    """Their decomposition (index_put) wrapped -1 to the last position: a KV-cache write to
    position -1 wrote the last row where eager raises."""
    cache, kv = make((2, 6, 4)), make((2, 1, 4))
    good, bad = torch.tensor([2]), torch.tensor([-1])
    jitted = fuser.jit(f)
    torch.testing.assert_close(jitted(cache, good, kv), f(cache, good, kv))
    with pytest.raises(IndexError) as eager:
        f(cache, bad, kv)
    with pytest.raises(IndexError) as got:
        jitted(cache, bad, kv)
    assert str(got.value) == str(eager.value)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_threshold_of_an_integer_tensor_keeps_its_integers(dtype):
    """The decomposition's where against a float took the integers through fp32
    (123456789 became 123456792, INT64_MAX became INT64_MIN)."""
    big = torch.iinfo(dtype).max
    x = torch.tensor([big, 2**24 + 1, 123456789, -1, 3], dtype=dtype)
    f = lambda x: torch.nn.functional.threshold(x, 0.5, -1.0)  # noqa: E731
    torch.testing.assert_close(fuser.jit(f)(x), f(x), rtol=0, atol=0)


_FLOATING_ONLY = {
    "gelu": torch.nn.functional.gelu, "softplus": torch.nn.functional.softplus,
    "logsigmoid": torch.nn.functional.logsigmoid, "logaddexp": lambda t: torch.logaddexp(t, t),
    "logaddexp2": lambda t: torch.logaddexp2(t, t), "hardswish": torch.nn.functional.hardswish,
    "hardsigmoid": torch.nn.functional.hardsigmoid, "mish": torch.nn.functional.mish,
    "hardshrink": torch.nn.functional.hardshrink, "softshrink": torch.nn.functional.softshrink,
    "frac": torch.frac, "lerp": lambda t: torch.lerp(t, t * 2, 0.5), "addcdiv": lambda t: torch.addcdiv(t, t, t),
    "elu": torch.nn.functional.elu, "celu": torch.nn.functional.celu, "selu": torch.nn.functional.selu,
    "silu": torch.nn.functional.silu, "leaky_relu": torch.nn.functional.leaky_relu,
    "mse_loss": lambda t: torch.nn.functional.mse_loss(t, t * 2),
    "smooth_l1_loss": lambda t: torch.nn.functional.smooth_l1_loss(t, t * 2),
    "huber_loss": lambda t: torch.nn.functional.huber_loss(t, t * 2),
    "hardtanh-of-bool": lambda t: torch.nn.functional.hardtanh(t > 0),
    "threshold-of-bool": lambda t: torch.nn.functional.threshold(t > 0, 0.5, 0.0),
}


@pytest.mark.parametrize("name", sorted(_FLOATING_ONLY))
def test_ops_eager_computes_for_floats_only_raise_for_integers(name):
    """gelu, softplus, logaddexp ... of an int64 tensor: eager raises NotImplementedError (or
    addcdiv's RuntimeError); fuser returned integers (gelu([-3, -1, 0, 2, 5]) = [0, 0, 0, 1, 4]).
    A float tensor still fuses."""
    # a frame of its own (Dynamo traces no frame for a builtin jitted directly, and one code
    # object shared by every case would meet Dynamo's recompile limit)
    f = eval("lambda t: op(t)", {"op": _FLOATING_ONLY[name]})
    x = torch.tensor([-3, -1, 0, 2, 5])
    if name.endswith("of-bool"):  # (an integer or float tensor is fine: refused for bool only)
        with pytest.raises((NotImplementedError, RuntimeError)) as eager:
            f(x)
        with pytest.raises(type(eager.value)) as got:
            fuser.jit(f)(x)
        assert str(got.value) == str(eager.value)
        return
    with pytest.raises((NotImplementedError, RuntimeError)) as eager:
        f(x)
    with pytest.raises(type(eager.value)) as got:
        fuser.jit(f)(x)
    assert str(got.value) == str(eager.value)
    floats = make((4, 6))
    jitted = fuser.jit(f)
    torch.testing.assert_close(jitted(floats), f(floats))
    assert jitted.cache_info().graphs == 1
    assert jitted.cache_info().fallback_ops == 0


def test_addcmul_of_integer_tensors_truncates_a_float_value_as_eager():
    """Eager converts value=0.5 to the integers' type (0); the core decomposition refused it,
    an InternalError."""
    f = lambda x, y: torch.addcmul(x, x, y, value=0.5) + torch.addcmul(x, x, y, value=2.7)  # noqa: E731
    a, b = torch.tensor([1, 2, 3]), torch.tensor([4, -5, 6])
    torch.testing.assert_close(fuser.jit(f)(a, b), f(a, b), rtol=0, atol=0)


def test_a_shape_eagers_forward_refuses_but_its_trace_passes_raises_eagers_error():
    """diagonal_scatter with a src of the wrong size: the fake tensors let the forward through,
    and AOTAutograd failed on the backward's gradient shape, an InternalError naming none of
    it; eager refuses the forward, and now so does the call, with eager's error."""
    def f(a, s):
        return torch.diagonal_scatter(a * 2, s.exp(), -1)

    a, s = make((4, 5)).requires_grad_(), make((5,)).requires_grad_()
    with pytest.raises(RuntimeError) as eager:
        f(a, s)
    with pytest.raises(RuntimeError) as got:
        fuser.jit(f)(a, s)
    assert str(got.value) == str(eager.value)


def test_an_integer_operand_eager_promotes_keeps_the_graph_fused():
    """A loss of a float prediction against int labels (mse_loss, smooth_l1_loss), logaddexp
    of a float and an int, addcdiv with one int operand: eager computes them in float. A review
    found the first check sent such a whole graph to eager; an integer quotient of addcdiv
    still raises as eager does."""
    pred, labels = make((4, 6)), torch.randint(0, 3, (4, 6))
    for f in (lambda p, t: torch.nn.functional.mse_loss(p * 2, t),
              lambda p, t: torch.nn.functional.smooth_l1_loss(p * 2, t),
              lambda p, t: torch.logaddexp(p * 2, t),
              lambda p, t: torch.addcdiv(p * 2, t, p)):
        jitted = fuser.jit(f)
        torch.testing.assert_close(jitted(pred, labels), f(pred, labels))
        assert (jitted.cache_info().graphs, jitted.cache_info().fallback_ops) == (1, 0)

    def g(p, t):
        return torch.addcdiv(p * 2, t, t + 1)

    with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
        fuser.jit(g)(pred, labels)


def test_a_failed_call_changes_no_argument_with_fallback_error():
    """To tell the function's error from the tracer's, the call runs it eagerly once: with
    fallback="error" on copies of the tensors, the random state put back, so that an update
    in place does not apply twice where the caller then runs the function itself."""
    @torch.library.custom_op("fuser_tests::scaled_no_fake", mutates_args=())
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * 0.5

    def step(w, g):
        w.sub_(0.5 * g)
        torch.rand(1)
        return scaled(w)

    w, g = torch.ones(4), torch.ones(4)
    state = torch.random.get_rng_state()
    with pytest.raises(fuser.UnsupportedError, match="scaled_no_fake"):
        fuser.jit(step)(w, g)
    assert torch.equal(w, torch.ones(4)) and torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize("fn,x", [
    (torch.special.softmax, lambda: make((3, 5), torch.int64)),
    (torch.special.log_softmax, lambda: make((3, 5), torch.int32)),
    (lambda x: torch._softmax(x, 1, False), lambda: make((3, 5), torch.int64)),
    (lambda x: torch._log_softmax(x, 1, False), lambda: make((3, 5), torch.int64)),
    (torch.nn.functional.softmin, lambda: make((3, 5), torch.int64)),
    (torch.special.log_ndtr, lambda: make((3, 5), torch.float16)),
    (torch.special.log_ndtr, lambda: make((3, 5), torch.bfloat16)),
    (lambda x: torch.mvlgamma(x, 1), lambda: make((3, 5)) > 0),
    (lambda x: torch.special.multigammaln(x, 1), lambda: make((3, 5)) > 0),
])
def test_functions_eager_has_no_kernel_of_for_the_type_raise_as_in_eager(fn, x):
    # softmax's other names (its first lists held softmax and log_softmax only) computed
    # integers, log_ndtr half floats and mvlgamma bools, each of which eager refuses
    softmax_dim = {"dim": 1} if fn in (torch.special.softmax, torch.special.log_softmax,
                                       torch.nn.functional.softmin) else {}
    call = (lambda t: fn(t, **softmax_dim))
    with pytest.raises((RuntimeError, NotImplementedError)) as eager:
        call(x())
    with pytest.raises((RuntimeError, NotImplementedError)) as jitted:
        fuser.jit(call)(x())
    assert str(eager.value).splitlines()[0] in str(jitted.value)


def test_the_logit_gradient_with_eps_is_nan_at_a_nan_input_as_eager_gives():
    # torch's decomposition, where(eps <= x <= 1 - eps, ...), gave 0 at NaN
    x = torch.tensor([float("nan"), 0.01, 0.5, 0.99, 0.3], requires_grad=True)
    jitted = torch.tensor(x.detach().tolist(), requires_grad=True)
    torch.logit(x, eps=0.05).sum().backward()
    fuser.jit(lambda t: torch.logit(t, eps=0.05))(jitted).sum().backward()
    assert_eager(jitted.grad, x.grad)
    y, y_jitted = (torch.tensor([float("nan"), -0.5, 0.25, 1.5], requires_grad=True) for _ in range(2))
    torch.logit(y).sum().backward()
    fuser.jit(torch.logit)(y_jitted).sum().backward()
    assert_eager(y_jitted.grad, y.grad)


def test_an_op_whose_own_backward_fails_is_unsupported_not_internal():
    """scatter of a src longer than its index, src needing grad: torch's ScatterBackward
    returns a gradient of the wrong shape, which AOTAutograd's trace of the backward meets
    at the forward (eager's forward runs; its backward() raises). Not a fuser bug: an
    UnsupportedError that says what to do, not an InternalError."""
    def f(x, i, s):
        return torch.scatter(x * 2, 1, i, s)

    x, s = make((3, 6)).requires_grad_(), make((3, 6)).requires_grad_()
    i = torch.stack([torch.randperm(6)[:3] for _ in range(3)])
    with pytest.raises(fuser.UnsupportedError, match="torch.no_grad"):
        fuser.jit(f)(x, i, s)
    with torch.no_grad():
        assert_eager(fuser.jit(f)(x, i, s), f(x, i, s))


def test_an_integer_dampening_in_a_half_sgd_step_fuses():
    """SGD's default dampening=0 is an int, traced as a symbol: `1 - dampening` into a half
    add went to ATen (two fallbacks, three fusions); its range is now checked each call."""
    params = [make((8, 4)).half().requires_grad_() for _ in range(2)]
    twins = [p.detach().clone().requires_grad_() for p in params]
    for p, t in zip(params, twins):
        p.grad = make(p.shape).half()
        t.grad = p.grad.clone()
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=False)
    ref = torch.optim.SGD(twins, lr=0.1, momentum=0.9, foreach=False)
    step = fuser.jit(lambda: opt.step())
    for _ in range(3):
        step()
        ref.step()
    for p, t in zip(params, twins):
        torch.testing.assert_close(p, t, rtol=2e-3, atol=2e-3)
    assert step.cache_info().fallback_ops == 0

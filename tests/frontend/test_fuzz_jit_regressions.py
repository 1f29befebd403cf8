"""Cases found by the random-program fuzzer (tests/frontend/fuzz_jit.py) that once failed under
fuser.jit, minimized."""
import pytest
import torch
import torch.nn.functional as F

import fuser


@pytest.mark.parametrize("reduce", [
    lambda t: t.sum(-1), lambda t: t.exp().sum(-1, keepdim=True), lambda t: t.amax(0),
    lambda t: t.mean(-1), lambda t: t.softmax(-1), lambda t: t.log_softmax(0), lambda t: t.prod(0),
    lambda t: t.var(0, correction=0), lambda t: torch.logsumexp(t, 0)])
def test_reduction_over_dim_0_of_a_0d_tensor(reduce):
    """`t.sum(-1)` of a 0-d tensor reduces nothing; it was lowered as a reduction over axis 0 of
    a 0-d tensor, and the segmenter failed with an IndexError (fuzz seed 80)."""
    def f(x):
        return reduce(x.sum())

    x = torch.randn(5, 7)
    torch.testing.assert_close(fuser.jit(f)(x), f(x))


@pytest.mark.parametrize("take", [lambda x: x[::2][:-1], lambda x: x[:-2], lambda x: x[-4:-1],
                                  lambda x: x[1:-1], lambda x: x[-3:]])
def test_gradient_of_a_slice_with_a_negative_end(take):
    """The backward of `x[:-2]` is `slice_scatter(zeros, dy, end=-2)`; its lowering sized the
    zeros after `dy` as `size - (-2)` instead of `2`, giving a gradient of the wrong size
    (fuzz seed 147)."""
    check_slice_gradient(take, [(n, 3) for n in (7, 8, 6)])


@pytest.mark.parametrize("take", [lambda x: x[:, -10:], lambda x: x[:, -10:-1], lambda x: x[:, 5:7],
                                  lambda x: x[:, 6:], lambda x: x[:, -2:100]],
                         ids=["before_start", "before_start_neg_end", "past_end", "past_end_open", "big_end"])
def test_gradient_of_a_slice_with_a_clamped_start(take):
    """ATen clamps a slice's start into [0, size]: x[:, -10:] of 4 columns starts at 0 (the
    zeros before the gradient had size 4 - 10, a FusionInputError for a valid program),
    x[:, 6:] at 4 (6 zeros made a gradient of 6 columns for 4), and x[:, 5:7] had -1 zeros
    after (found by review)."""
    check_slice_gradient(take, [(3, n) for n in (4, 5, 6)])


def check_slice_gradient(take, shapes):
    """fuser.jit of tanh(take(x)) * 2 against eager, outputs and gradients, for each shape."""
    def f(x):
        return torch.tanh(take(x)) * 2

    jitted = fuser.jit(f)
    for shape in shapes:
        x = torch.randn(*shape, requires_grad=True)
        out = jitted(x)
        dy = torch.randn_like(out)
        got, = torch.autograd.grad(out, x, dy)
        want, = torch.autograd.grad(f(x), x, dy)
        torch.testing.assert_close(out, f(x))
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("f", [lambda y: (y @ y.t()).sum(),
                               lambda y: torch.nn.functional.linear(y, y[:3]).mean().expand(2)])
def test_gradient_of_the_sum_of_a_matmul(f):
    """The backward multiplies the expanded gradient of the sum (a broadcast expanded to
    [n, n]) by y; the matmul builder unified the contraction axis with the broadcast's extent 1
    instead of its expanded size, so y was declared with 1 row and binding it failed with
    FusionInputError (fuzz seed 1492)."""
    jitted = fuser.jit(f)
    for shape in ((5, 7), (9, 13)):
        y = torch.randn(*shape, requires_grad=True)
        out = jitted(y)
        torch.testing.assert_close(out, f(y))
        dy = torch.randn_like(out)
        got, = torch.autograd.grad(out, y, dy)
        want, = torch.autograd.grad(f(y), y, dy)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduce", ["amin", "amax"])
def test_amin_amax_gradient_of_a_computed_half_value(dtype, reduce):
    """The backward of `amin(0.1 * y)` is `dy * (v == amin) / count(v == amin)` with `v`
    recomputed and the amin saved. Fused kernels kept `v` in fp32 while the saved amin was
    rounded to fp16, so no element matched and the gradient was 0/0 = NaN (fuzz seed 1139);
    comparisons now see half values rounded, as eager does."""
    def f(y):
        v = torch.where(y > 0, y, 0.1 * y)
        return torch.nn.functional.softplus(getattr(v, reduce)(0)).sum(0, keepdim=True)

    jitted = fuser.jit(f)
    for shape in ((5, 7), (9, 13)):
        y = -(torch.randn(*shape).abs() + 0.1)  # negative: every amin/amax is a rounded 0.1 * y
        y = y.to(dtype).requires_grad_()
        out = jitted(y)
        dy = torch.randn_like(out)
        got, = torch.autograd.grad(out, y, dy)
        want, = torch.autograd.grad(f(y), y, dy)
        assert not got.isnan().any()
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("stat", [lambda t: t.sum(), lambda t: t.var(-1, correction=0)])
def test_reduction_of_a_selected_row_used_as_a_0d_value(stat):
    """`x[1]` is a slice then a squeeze of its size-1 axis; the kernel reducing it kept that axis
    as a loop axis on its rows, so the 0-d statistic came out row-shaped and storing it failed
    with a Triton InterpreterError (fuzz seed 2037)."""
    def f(x, w):
        t1 = stat(x[1])
        return (torch.minimum(t1, w) + w).sum(0, keepdim=True) * t1

    jitted = fuser.jit(f)
    for shape in ((5, 8), (9, 13), (5, 8)):
        x = torch.randn(*shape, requires_grad=True)
        w = torch.randn(shape[1], requires_grad=True)
        out = jitted(x, w)
        torch.testing.assert_close(out, f(x, w))
        dy = torch.randn_like(out)
        got = torch.autograd.grad(out, (x, w), dy)
        want = torch.autograd.grad(f(x, w), (x, w), dy)
        torch.testing.assert_close(got, want)


def test_a_keepdim_value_scaling_a_row_and_its_flattened_tensor():
    """`y.amax(1, keepdim=True)` [b, 1] multiplies both `x.reshape(-1)` [b * n] and `x` [b, n]
    in one kernel; its broadcast axis joined the n and b * n axes into one loop axis, so x was
    read and x * sigmoid(t1) written past their rows (wrong values and a corrupted heap; fuzz
    seed 2682)."""
    def f(x, y):
        t1 = y.amax(1, keepdim=True)
        return F.elu(x.reshape(-1) * t1), (x * torch.sigmoid(t1)).view(x.shape[0], 1, -1)

    jitted = fuser.jit(f)
    for b, n in ((5, 7), (9, 13), (5, 7)):
        x = torch.randn(b, n, requires_grad=True)
        y = torch.randn(1, b).t().requires_grad_()
        out = jitted(x, y)
        want = f(x, y)
        torch.testing.assert_close(out, want)
        dys = [torch.randn_like(o) for o in want]
        got = torch.autograd.grad(out, (x, y), dys)
        expected = torch.autograd.grad(want, (x, y), dys)
        torch.testing.assert_close(got, expected)


def test_an_output_that_is_a_view_of_an_input_and_feeds_a_fusion():
    """`t0 = y.expand(2, ...)` is both an output (an alias of y, which AOTAutograd rebuilds from
    y with the strides the graph returned) and an operand of `t0 * 2`. The fusion returned t0
    as a new dense tensor: the rebuilt view read out of bounds (contiguous y) or the wrong
    elements (y a column of a wider tensor) without an error (fuzz seed 2549)."""
    def f(y):
        t0 = y.expand(2, *y.shape)
        return t0 * 2, t0

    jitted = fuser.jit(f)
    for y in (torch.randn(5, 1), torch.randn(5, 20)[:, :1], torch.randn(7, 3).t(), torch.randn(5, 1)):
        y = y.detach().requires_grad_()
        got, want = jitted(y), f(y)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        assert got[1].stride() == want[1].stride()  # the alias is y's own view
        dys = [torch.randn_like(w) for w in want]
        torch.testing.assert_close(torch.autograd.grad(got, y, dys), torch.autograd.grad(want, y, dys))
    with torch.no_grad():
        y = torch.randn(6, 4)[:, 1:2]
        for g, w in zip(jitted(y), f(y)):
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("backend", ["jit", "compile"])
@pytest.mark.parametrize("take", [lambda m: m.chunk(2, 0)[-1], lambda m: m.split(1, 0)[1],
                                  lambda m: m.unbind(0)[2]])
def test_an_output_that_is_a_piece_of_a_split_input_and_feeds_a_fusion(take, backend):
    """`t0 = m.chunk(2, 0)[-1]` with dynamic sizes traces to a getitem of `split_with_sizes`,
    which the search for an output's chain of views from an input did not follow: the fusion
    returned t0 as a new tensor, and AOTAutograd rebuilt the alias from m at that tensor's
    storage offset, 0, so the output read m's first rows (fuzz seed 71107, under no_grad)."""
    def f(m):
        t0 = take(m)
        return torch.square(t0), t0

    jitted = torch.compile(f, backend="fuser", dynamic=True) if backend == "compile" else fuser.jit(f)
    for rows, cols in ((4, 6), (4, 9), (6, 5)):
        m = torch.randn(rows, cols)
        with torch.no_grad():
            got, want = jitted(m), f(m)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        assert got[1].storage_offset() == want[1].storage_offset()
        m.requires_grad_()
        got, want = jitted(m), f(m)
        dys = [torch.randn_like(w) for w in want]
        torch.testing.assert_close(torch.autograd.grad(got, m, dys), torch.autograd.grad(want, m, dys))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_tensor_compared_with_a_python_number(dtype):
    """Eager compares a half or bf16 tensor with a Python number in the tensor's dtype, so
    `x <= 0.3` holds for the bf16 value nearest 0.3 (0.30078125); the kernel compared with the
    fp32 0.3 (fuzz seed 3131)."""
    def f(x):
        return (x <= 0.3).float() + (x > 0.3) * 2 + (x == 0.3) * 4 + (x != 1001) * 8

    near = torch.tensor([0.3, 1001.0], dtype=dtype)  # each rounded to the dtype
    x = torch.cat([near, torch.randn(6, dtype=dtype), torch.tensor([0.29, 0.31, 1000.0, 1002.0], dtype=dtype)])
    jitted = fuser.jit(f)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), f(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("f", [lambda x: torch.fmod(x, 0.1), lambda x: torch.remainder(x, 0.1),
                               lambda x: x % -0.3, lambda x: 2.5 % (x.abs() + 1)])
def test_a_half_remainder_by_a_python_number(dtype, f):
    """Eager's fmod and remainder take a Python number in the tensor's dtype (half(0.1) is
    0.0999756); by the fp32 0.1 the remainder of 10.0 was 0.09998 where eager's is 0.00244."""
    x = torch.cat([torch.tensor([10.0, 1.0, 3.0, -7.0], dtype=dtype), torch.randn(60, dtype=dtype) * 10])
    torch.testing.assert_close(fuser.jit(f)(x), f(x), rtol=0, atol=0)


@pytest.mark.parametrize("take", [lambda t: t[:, 2:5], lambda t: t[:, 1:100], lambda t: t[:, :9],
                                  lambda t: t[2:7]])
def test_gradient_of_a_slice_whose_end_is_past_the_size(take):
    """`t[:, 2:5]` of 4 columns has 2; its backward `slice_scatter(zeros, dy, start=2, end=5)`
    sized the zeros after `dy` as `size - end` = -1, and the matmul whose gradient it fed saw
    a contraction axis of 3 against 4: an ExtentConflictError on a valid program (fuzz seed
    3559). The zeros after `dy` are what the slice leaves of the size, from dy's length."""
    def f(m):
        return take(F.linear(torch.exp(m.clamp(-4, 4)), m))

    m = torch.randn(4, 6, requires_grad=True)
    (ours,) = torch.autograd.grad(fuser.jit(f)(m).sum(), m)
    (theirs,) = torch.autograd.grad(f(m).sum(), m)
    torch.testing.assert_close(ours, theirs)


def test_a_half_gradient_of_rounding_noise_gets_an_absolute_floor():
    """The gradient of F.normalize over one element is 0 in exact arithmetic; through
    `x.float()` it is fp32 rounding noise of about 1e-7 in eager and in the float64 reference
    alike (the program casts the reference's input to fp32 too), and fuser's kernels left other
    noise (0, where both left -2.4e-7). The comparison allowed 1% of the largest reference value,
    below fp16's resolution there (fuzz seed 900304); it now also allows torch.testing's default
    absolute tolerance for half types, 1e-5, and no more."""
    from tests.frontend.jit_helpers import assert_close_to_eager

    reference = torch.tensor([-2.384185791015625e-07, 1e-6], dtype=torch.float64)
    for dtype in (torch.float16, torch.bfloat16):
        eager = reference.to(dtype)
        assert_close_to_eager(torch.tensor([0.0, 1e-6], dtype=dtype), eager, reference)
        with pytest.raises(AssertionError):
            assert_close_to_eager(torch.tensor([2e-5, 1e-6], dtype=dtype), eager, reference)


def test_a_half_gradient_that_cancels_is_held_to_the_calls_scale():
    """d/dm of log_softmax(log_softmax(m.amin(1)) - y) is 0 in exact arithmetic (the row sums of
    a log_softmax's gradient cancel); in fp16 eager leaves rounding noise of about 0.01 there
    and fuser noise of the same size, now and then 2.5x eager's (fuzz seed 12095: 0.0102 against
    0.0040). Such an output, below eager's own error, is held to 1% of the call's largest
    reference value (the other gradient's, 6.4) instead of to 2.5x eager's noise alone; an
    output with a signal keeps its own scale, and noise past the call's 1% still fails."""
    from tests.frontend.jit_helpers import assert_close_to_eager

    reference = (torch.tensor([1e-15, -2e-15], dtype=torch.float64), torch.tensor([6.4, -3.0], dtype=torch.float64))
    eager = (torch.tensor([0.004, -0.002], dtype=torch.float16), reference[1].to(torch.float16))
    ours = (torch.tensor([0.0102, 0.001], dtype=torch.float16), reference[1].to(torch.float16))
    assert_close_to_eager(ours, eager, reference)
    with pytest.raises(AssertionError):  # past 2.5x eager's noise plus 1% of 6.4
        assert_close_to_eager((torch.tensor([0.08, 0.0], dtype=torch.float16), ours[1]), eager, reference)
    signal = (torch.tensor([0.5, -2e-15], dtype=torch.float64), reference[1])  # not noise: its own scale
    with pytest.raises(AssertionError):
        assert_close_to_eager((torch.tensor([0.53, 0.0], dtype=torch.float16), ours[1]),
                              (signal[0].to(torch.float16), eager[1]), signal)


@pytest.mark.parametrize("dynamic", [True, "rows"])
def test_gradient_of_a_stack_summed_over_its_new_axis(dynamic):
    """The backward of `stack([y, -y]).sum(0).mean()` expands the gradient over [2, n] and
    selects both rows of it: a select of an expanded axis is a size-1 broadcast, constant along
    rows, while the kernel still iterated the expanded axis as its rows and stored a [2, 512]
    value through a [1, 512] pointer (fuzz seed 41066, once the length was symbolic)."""
    def f(y):
        return torch.stack([y, -y]).sum(0).mean(-1)
    jitted = fuser.jit(f, dynamic=dynamic)
    for n in (100, 301):
        y = torch.randn(n, dtype=torch.float16, requires_grad=True)
        (got,) = torch.autograd.grad(jitted(y), y)
        (want,) = torch.autograd.grad(f(y), y)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("compile_with", ["backend", "jit"])
def test_a_size_the_guards_fix_to_one_broadcasts(compile_with):
    """`x.chunk(2, 0)[-1]` of 3 (or 2) rows is one row, a size `s0 - (s0 + 1)//2` that Dynamo
    guards equal to 1 and broadcasts against x's rows; fuser took it for x's own row count, and
    the binding table rejected the valid call with an ExtentConflictError (fuzz seed 24066)."""
    def f(x):
        t = x.to(torch.bfloat16)
        return t.chunk(2, 0)[-1] / (t.abs() + 1)

    compiled = (torch.compile(f, backend="fuser", dynamic=True) if compile_with == "backend"
                else fuser.jit(f, dynamic=True))
    for rows in (3, 2, 3):
        x = torch.randn(rows, 5, 16, requires_grad=True)
        out = compiled(x)
        (grad,) = torch.autograd.grad(out.float().sum(), x)
        xe = x.detach().clone().requires_grad_()
        want = f(xe)
        (want_grad,) = torch.autograd.grad(want.float().sum(), xe)
        torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(grad, want_grad, rtol=2e-2, atol=2e-2)

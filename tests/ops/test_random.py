"""Random ops (uniform, normal, rand_like, randn_like) and fuser.jit's random ATen ops.

Element i of a random output (i its row-major index) is philox of (seed, offset + i): the
generated kernel (Triton's interpreter here) and the ATen evaluator give the same bits, and
the numbers do not depend on the kernel's tiling or the launch's folding of axes."""
import math

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.errors import FusionDefinitionError, FusionInputError
from fuser.evaluate.philox import philox, row_major_counters, uniform_float
from tests.helpers import backend_env

BACKENDS = ("kernel", "aten")


def _seeded(shape, kind="uniform", a=0.0, b=1.0, dtype=DataType.Float):
    """A definition of one random output of `shape` (ints), seed and offset as scalar inputs."""
    with FusionDefinition() as fd:
        s, o = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        op = getattr(fd.ops, kind)
        fd.add_output(op(a, b, shape, rng_seed=s, rng_offset=o, dtype=dtype))
    return fd


def _draw(fd, args, backend):
    with backend_env(backend):
        return fd.execute(args)


def _kinds(fd):
    return [s.kind.value for s in fd.last_segments()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_statistics(backend):
    lo, hi, n = -2.0, 3.0, 20_000
    (u,) = _draw(_seeded([100, 200], a=lo, b=hi), [99, 0], backend)
    assert u.dtype == torch.float32 and u.shape == (100, 200)
    assert lo <= u.min().item() and u.max().item() < hi
    var = (hi - lo) ** 2 / 12
    assert abs(u.mean().item() - (lo + hi) / 2) < 5 * math.sqrt(var / n)
    assert abs(u.var().item() / var - 1) < 0.03  # (the sample variance's relative error: ~0.6%)


@pytest.mark.parametrize("backend", BACKENDS)
def test_normal_statistics(backend):
    mean, std, n = 1.5, 2.0, 20_000
    (x,) = _draw(_seeded([200, 100], kind="normal", a=mean, b=std), [5, 3], backend)
    assert torch.isfinite(x).all()
    assert abs(x.mean().item() - mean) < 5 * std / math.sqrt(n)
    assert abs(x.std().item() / std - 1) < 0.03
    # about 4.55% of N(0, 1) lies beyond 2 standard deviations
    assert abs(((x - mean).abs() > 2 * std).float().mean().item() - 0.0455) < 0.006


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_half_width_is_fp32_rounded_once(kind, backend):
    fp32 = _draw(_seeded([31, 45], kind, 0.5, 2.0), [11, 4], backend)[0]
    for dt, torch_dt in ((DataType.BFloat16, torch.bfloat16), (DataType.Half, torch.float16)):
        out = _draw(_seeded([31, 45], kind, 0.5, 2.0, dtype=dt), [11, 4], backend)[0]
        assert out.dtype == torch_dt
        expected = fp32.to(torch_dt)
        if kind == "uniform":  # a draw rounded up to the upper bound is the lower one (eager's GPU rule)
            expected = torch.where(expected == 2.0, torch.tensor(0.5, dtype=torch_dt), expected)
        assert torch.equal(out, expected)


@pytest.mark.parametrize("kind, a, b", [("uniform", 0.0, 1.0), ("uniform", -1.0, 3.0), ("normal", 0.0, 1.0),
                                     ("normal", 2.0, 0.5)])
def test_double_output_has_doubles_bits(kind, a, b):
    """A double draws 53 random bits a uniform (two philox words), as eager's float64 rand and
    nvFuser's Double uniform do; every draw was an fp32 value before (fifty-fifth session)."""
    (x,) = _draw(_seeded([80, 50], kind, a, b, dtype=DataType.Double), [1, 2], "kernel")
    assert x.dtype == torch.float64
    reference = _draw(_seeded([80, 50], kind, a, b, dtype=DataType.Double), [1, 2], "aten")[0]
    if kind == "uniform":
        assert torch.equal(x, reference)
    else:  # (fp64 log, sqrt and cos of two libraries: within an ulp or so)
        torch.testing.assert_close(x, reference, rtol=1e-14, atol=1e-14)
    assert (x.float().double() != x).float().mean() > 0.99  # (not fp32 values)
    n = x.numel()
    if kind == "uniform":
        assert a <= x.min().item() and x.max().item() < b
        assert abs(x.mean().item() - (a + b) / 2) < 5 * (b - a) / math.sqrt(12 * n)
    else:
        assert torch.isfinite(x).all() and abs(x.mean().item() - a) < 5 * b / math.sqrt(n)
        assert abs(x.std().item() / b - 1) < 0.05


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_seed_and_offset_give_the_same_numbers(backend):
    fd = _seeded([37, 53])
    first, again = _draw(fd, [42, 10], backend)[0], _draw(fd, [42, 10], backend)[0]
    assert torch.equal(first, again)
    other_offset, other_seed = _draw(fd, [42, 11], backend)[0], _draw(fd, [43, 10], backend)[0]
    assert (first != other_offset).float().mean() > 0.99 and (first != other_seed).float().mean() > 0.99
    # element i is drawn from counter offset + i: a larger offset shifts the stream
    flat, shifted = first.flatten(), other_offset.flatten()
    assert torch.equal(flat[1:], shifted[:-1])


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_kernel_and_evaluator_agree_bit_for_bit(kind):
    # a 2-D non-power-of-two shape, a negative seed, an offset past 2^32 (the counter's high word)
    fd = _seeded([37, 53], kind, 0.3, 1.7)
    args = [-(2**40) - 3, 2**33 + 5]
    kernel, aten = _draw(fd, args, "kernel")[0], _draw(fd, args, "aten")[0]
    assert _kinds(fd) == ["kernel"]
    assert torch.equal(kernel, aten)
    if kind == "uniform":  # Triton's tl.rand itself, spelled in ATen (evaluate/philox.py)
        words = philox(args[0], row_major_counters([37, 53], args[1], "cpu"))
        assert torch.equal(kernel, 0.3 + (1.7 - torch.tensor(0.3)) * uniform_float(words[0]))


def test_numbers_do_not_depend_on_tiling_or_layout():
    """The same logical elements, through kernels of other shapes and iteration orders: a 1-D
    output of the same count, and a 2-D one multiplied into a transposed input (the launch
    walks the axes in the input's memory order)."""
    rows, cols = 37, 53
    flat = _draw(_seeded([rows * cols]), [5, 9], "kernel")[0]
    square = _draw(_seeded([rows, cols]), [5, 9], "kernel")[0]
    assert torch.equal(flat.reshape(rows, cols), square)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float, stride_order=[0, 1])
        u = fd.ops.uniform(0.0, 1.0, x.shape(), rng_seed=5, rng_offset=9)
        fd.add_output(fd.ops.mul(x, u))
    x = torch.randn(cols, rows).t()
    (out,) = _draw(fd, [x], "kernel")
    assert _kinds(fd) == ["kernel"]
    assert torch.equal(out, x * square)


def test_aligned_row_kernel_and_a_size_one_axis():
    """A pointwise kernel over long rows taking one aligned chunk of a row a program (a weight
    along the columns keeps the axes apart; codegen/kernel.py `write_aligned_pointwise`), and
    a draw of [rows, 1] (a broadcast axis, as nvFuser makes a size 1) across the columns."""
    def build():
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
            w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
            u = fd.ops.uniform(0.0, 1.0, x.shape(), rng_seed=3, rng_offset=5)
            n = fd.ops.normal(0.0, 1.0, [x.size(0), 1], rng_seed=4, rng_offset=0)
            fd.add_output(fd.ops.mul(fd.ops.mul(x, w), u))
            fd.add_output(fd.ops.add(x, n))
        return fd
    x, w = torch.randn(2, 8201, dtype=torch.bfloat16), torch.randn(8201, dtype=torch.bfloat16)
    fd = build()
    kernel = _draw(fd, [x, w], "kernel")
    assert "c_aligned" in fd.last_triton_code() and set(_kinds(fd)) == {"kernel"}
    aten = _draw(build(), [x, w], "aten")
    assert all(torch.equal(k, a) for k, a in zip(kernel, aten))
    n = (kernel[1].float() - x.float())
    assert (n.std(dim=1) < 0.05).all()  # (one draw a row, rounded to bf16 with x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unseeded_ops_follow_torch_manual_seed(backend):
    def build():
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
            fd.add_output(fd.ops.rand_like(x))
            fd.add_output(fd.ops.randn_like(x))
            fd.add_output(fd.ops.rand_like(x))  # a second draw: other numbers
        return fd
    x = torch.randn(24, 40, dtype=torch.bfloat16)
    fd = build()
    torch.manual_seed(3)
    first = _draw(fd, [x], backend)
    second = _draw(fd, [x], backend)
    torch.manual_seed(3)
    again = _draw(build(), [x], backend)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert all((a != b).float().mean() > 0.9 for a, b in zip(first, second))
    assert (first[0] != first[2]).float().mean() > 0.9
    assert [t.dtype for t in first] == [torch.bfloat16] * 3 and first[0].shape == x.shape
    assert 0 <= first[0].min() and first[0].max() <= 1  # (bf16 rounds the largest up to 1)
    with pytest.raises(FusionInputError, match="the fusion has 1 inputs but execute got 2"):
        fd.execute([x, x])  # (counted without the seed it draws)


def test_unseeded_kernel_and_evaluator_agree():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(x, fd.ops.randn_like(x)))
    x = torch.randn(17, 29)
    torch.manual_seed(8)
    kernel = _draw(fd, [x], "kernel")[0]
    assert _kinds(fd) == ["kernel"]
    torch.manual_seed(8)
    with FusionDefinition() as fd2:
        y = fd2.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd2.add_output(fd2.ops.mul(y, fd2.ops.randn_like(y)))
    assert torch.equal(kernel, _draw(fd2, [x], "aten")[0])


def test_symbolic_shape_from_another_tensor():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        n = fd.ops.normal(0.0, 2.0, [x.size(1), x.size(0)], rng_seed=1, rng_offset=0)
        fd.add_output(fd.ops.add(fd.ops.permute(x, [1, 0]), n))
    for rows, cols in ((6, 10), (9, 5)):
        x = torch.randn(rows, cols)
        (out,) = fd.execute([x])
        n = _draw(_seeded([cols, rows], "normal", 0.0, 2.0), [1, 0], "aten")[0]
        assert torch.equal(out, x.t() + n)
    assert fd.cache.num_runtimes == 1


def test_rand_like_of_an_expanded_tensor_draws_along_the_expanded_axis():
    """As torch.rand_like's fresh tensor: numbers of their own along an expanded axis."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        fd.add_output(fd.ops.rand_like(fd.ops.expand(x, [x.size(0), 6]), rng_seed=1, rng_offset=0))
    (out,) = fd.execute([torch.randn(4, 1)])
    assert out.shape == (4, 6) and torch.equal(out, _draw(_seeded([4, 6]), [1, 0], "aten")[0])


def test_repr_round_trip():
    fd = _seeded([8, 12], "normal", 1.0, 0.5, dtype=DataType.BFloat16)
    text = repr(fd)
    assert "fd.ops.normal(1.0, 0.5, [8, 12], rng_seed=s0, rng_offset=s1, dtype=DataType.BFloat16)" in text
    ns = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, ns)
    with FusionDefinition() as again:
        ns["nvfuser_fusion"](again)
    assert torch.equal(again.execute([3, 4])[0], fd.execute([3, 4])[0])
    assert "rng_normal" in str(fd.fusion)


def test_random_values_into_a_reduction_are_cut_before_it():
    """Reduction kernels do not draw random numbers: the segmenter cuts, and the sum reads
    the numbers the pointwise kernel drew."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        u = fd.ops.uniform(0.0, 1.0, x.shape(), rng_seed=2, rng_offset=0)
        fd.add_output(fd.ops.sum(fd.ops.mul(x, u), [1]))
    x = torch.randn(12, 70)
    (out,) = _draw(fd, [x], "kernel")
    segments = fd.last_segments()
    assert len(segments) == 2 and any("pointwise kernels only" in s.describe() for s in segments)
    u = _draw(_seeded([12, 70]), [2, 0], "aten")[0]
    torch.testing.assert_close(out, (x * u).sum(1))


@pytest.mark.parametrize("build, message", [
    (lambda fd, x: fd.ops.uniform(0.0, 1.0, [4], dtype=DataType.Int), "uniform: dtype must be a floating-point"),
    (lambda fd, x: fd.ops.normal(0.0, 1.0, [4], dtype=DataType.Bool), "normal: dtype must be a floating-point"),
    (lambda fd, x: fd.ops.uniform(0.0, 1.0, [4], rng_seed=1), "rng_seed and rng_offset must be given together"),
    (lambda fd, x: fd.ops.normal(0.0, 1.0, [4], rng_seed=1.5, rng_offset=0), "rng_seed must be an int"),
    (lambda fd, x: fd.ops.uniform(0.0, 1.0, [4, -2]), "shape entry -2 must be non-negative"),
    (lambda fd, x: fd.ops.uniform(0.0, 1.0, [2.5]), "shape entry 2.5 must be an int"),
    (lambda fd, x: fd.ops.uniform(0.0, 1.0, 4), "shape must be a list or tuple"),
    (lambda fd, x: fd.ops.normal(x, 1.0, [4]), "mean must be a number or a scalar"),
    (lambda fd, x: fd.ops.rand_like(fd.ops.cast(x, DataType.Int)), "rand_like: the input"),
    (lambda fd, x: fd.ops.randn_like(1.0), "randn_like: input must be a TensorView"),
])
def test_errors(build, message):
    with pytest.raises(FusionDefinitionError, match=message):
        with FusionDefinition() as fd:
            x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
            fd.add_output(build(fd, x))


def test_negative_std_is_taken_as_nvfuser_takes_it():
    """nvFuser does not check the sign of std: mean + std * n, a mirrored draw."""
    plus = _draw(_seeded([100], "normal", 0.0, 2.0), [1, 1], "kernel")[0]
    minus = _draw(_seeded([100], "normal", 0.0, -2.0), [1, 1], "kernel")[0]
    assert torch.equal(minus, -plus)


# -- fuser.jit ----------------------------------------------------------------------------------


def test_jit_dropout_is_one_kernel_and_its_backward_reads_the_forward_mask():
    p = 0.3

    def f(x):
        return F.dropout(x, p, training=True) * 2

    jitted = fuser.jit(f)
    x = torch.randn(64, 96, requires_grad=True)
    y = jitted(x)
    info = jitted.cache_info()
    assert info.fallback_ops == 0 and info.kernels == 1  # the forward: draw, mask and scale in one
    kept = y != 0  # (x has no zeros)
    assert abs(kept.float().mean().item() - (1 - p)) < 0.02
    torch.testing.assert_close(y, torch.where(kept, x * 2 / (1 - p), 0.0))
    dy = torch.randn_like(y)
    y.backward(dy)
    torch.testing.assert_close(x.grad, torch.where(kept, dy * 2 / (1 - p), 0.0))
    assert jitted.cache_info().fallback_ops == 0
    assert not torch.equal(jitted(x) != 0, kept)  # a fresh mask per call


def test_jit_random_ops_lower_without_fallback():
    def f(x):
        keep = torch.rand_like(x) < 0.5
        noise = torch.randn_like(x) * 0.1 + torch.bernoulli(x.sigmoid())
        return x * keep + noise + torch.bernoulli(x, 0.25), torch.rand(x.shape) + torch.randn(x.shape)

    jitted = fuser.jit(f)
    x = torch.randn(64, 80)
    torch.manual_seed(1)
    out, fresh = jitted(x)
    assert jitted.cache_info().fallback_ops == 0
    torch.manual_seed(1)
    assert torch.equal(jitted(x)[0], out)
    assert torch.isfinite(out).all() and not torch.equal(jitted(x)[0], out)
    fresh = fresh.flatten()  # U[0, 1) + N(0, 1): mean 1/2, variance 1 + 1/12
    assert abs(fresh.mean().item() - 0.5) < 0.06 and abs(fresh.var().item() - (1 + 1 / 12)) < 0.09


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind", ["uniform", "normal"])
@pytest.mark.parametrize("dtype", [DataType.Float, DataType.Double])
def test_gpu_kernel_and_evaluator_agree(kind, dtype):
    """On the GPU the kernel's fp32 may fuse a multiply-add (uniform in [a, b)), and its fp64
    cos and log are libdevice's: equal to the ATen evaluator's numbers within an ulp or two.
    A double's are drawn from two words each (53 bits), the same on the GPU."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dtype)
        fd.add_output(fd.ops.mul(x, getattr(fd.ops, kind)(0.0, 1.0, x.shape(), rng_seed=3, rng_offset=1,
                                                          dtype=dtype)))
    x = torch.ones(513, 1031, device="cuda", dtype=dtype.to_torch())
    (kernel,) = fd.execute([x])
    aten = _draw(_seeded([513, 1031], kind, dtype=dtype), [3, 1], "aten")[0]
    tolerance = 1e-6 if dtype is DataType.Float else 1e-14
    torch.testing.assert_close(kernel.cpu(), aten, rtol=tolerance, atol=tolerance)
    if dtype is DataType.Double:
        x = torch.ones(513, 1031, device="cuda")
    with FusionDefinition() as fd2:
        y = fd2.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd2.add_output(fd2.ops.mul(y, fd2.ops.rand_like(y)))
    torch.manual_seed(4)
    first = fd2.execute([x])[0]
    torch.manual_seed(4)
    assert torch.equal(fd2.execute([x])[0], first)


@pytest.mark.parametrize("build", [
    lambda fd: fd.ops.uniform(0.0, float("inf"), [4]),
    lambda fd: fd.ops.uniform(0.0, 1e39, [4]),
    lambda fd: fd.ops.uniform(-3e38, 3e38, [4]),
    lambda fd: fd.ops.uniform(0.0, 70000.0, [4], dtype=DataType.Half),
    lambda fd: fd.ops.normal(float("nan"), 1.0, [4]),
    lambda fd: fd.ops.normal(0.0, float("inf"), [4]),
], ids=["inf", "past-float", "range-past-float", "past-half", "nan-mean", "inf-std"])
def test_parameters_a_draw_cannot_hold_are_refused(build):
    """uniform(0, inf) drew all zeros (inf, which the step keeping draws off maxval made
    minval), (-3e38, 3e38) all inf: refused by name, as eager refuses them."""
    with pytest.raises(FusionDefinitionError, match="expects"):
        with FusionDefinition() as fd:
            fd.add_output(build(fd))


def test_parameters_from_scalar_inputs_are_checked_each_execution():
    with FusionDefinition() as fd:
        lo, hi, mean, std = (fd.define_scalar(dtype=DataType.Double) for _ in range(4))
        fd.add_output(fd.ops.uniform(lo, hi, [64], dtype=DataType.Half))
        fd.add_output(fd.ops.normal(mean, std, [64]))
    u, n = fd.execute([-1.0, 2.0, 0.0, 1.0])
    assert -1 <= u.min() and u.max() < 2 and n.isfinite().all()
    for args, named in (([0.0, 70000.0, 0.0, 1.0], "Half's largest"), ([0.0, float("inf"), 0.0, 1.0], "minval"),
                        ([0.0, 1.0, float("nan"), 1.0], "normal: mean"), ([0.0, 1.0, 0.0, float("inf")], "normal: std")):
        with pytest.raises(FusionInputError, match=named):
            fd.execute(args)
    fd.execute([2.0, 1.0, 0.0, -1.0])  # a reversed range and a negative std: as written, as in nvFuser


@pytest.mark.parametrize("f", [
    lambda x: F.dropout(x, float("nan")),
    lambda x: torch.dropout(x, 1.5, True),
    lambda x: torch.dropout(x, -0.5, True),
    lambda x: torch.native_dropout(x, 1.5, True)[0],
    lambda x: torch.bernoulli(x, 1.5),
    lambda x: torch.bernoulli(x, float("nan")),
], ids=["dropout-nan", "dropout-1.5", "dropout-neg", "native-dropout", "bernoulli-1.5", "bernoulli-nan"])
def test_jit_probability_outside_zero_one_raises_as_eager(f):
    """A dropout or bernoulli probability outside [0, 1] (or NaN) gave all NaN, all -0.0, a
    scaled copy, all ones or all zeros: the node now runs through ATen, which raises."""
    x = torch.rand(4, 8)
    with pytest.raises(RuntimeError):
        f(x)
    with pytest.raises(RuntimeError, match="p"):
        fuser.jit(f)(x)


def test_jit_bernoulli_of_probabilities_outside_zero_one_gives_nan_there():
    """A kernel cannot raise: a probability tensor's entries outside [0, 1] (or NaN) give NaN
    (the decomposition's `rand < p` gave 1 or 0), where eager raises; the others draw as before."""
    def f(p):
        return torch.bernoulli(p)

    p = torch.rand(64, 32)
    p[0, :4] = torch.tensor([1.5, -0.25, float("nan"), 1.0])
    out = fuser.jit(f)(p)
    assert out[0, :3].isnan().all() and out[0, 3] == 1
    rest = out.flatten()[3:]
    assert not rest.isnan().any() and set(rest.unique().tolist()) <= {0.0, 1.0}
    assert abs(rest.mean().item() - p.flatten()[3:].mean().item()) < 0.05


@pytest.mark.parametrize("dtype", [DataType.Float8_e4m3fn, DataType.Float8_e5m2])
def test_fp8_uniform_defines_and_draws(dtype):
    """The parameter checks looked the dtype's largest value up in a table without fp8: a raw
    KeyError at definition (a review's find)."""
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.uniform(0.0, 1.0, [64], dtype=dtype))
    out = fd.execute([])[0].float()
    assert 0 <= out.min() and out.max() <= 1

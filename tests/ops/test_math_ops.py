"""nvFuser's math ops beyond the basic set (ops/math.py's group) against eager PyTorch: inverse
trigonometric and hyperbolic functions, special functions, float classes, nextafter, div
(nvFuser's: truncating for integers) and truediv, mod, gcd, shifts, addcmul, threshold, real
and imag. Each case runs through the ATen evaluator and through generated kernels (the
interpreter; ops without an interpreter lowering run as ATen segments there, checked too).

Tolerances: the interpreter's formulas are within 4 ulp of the fp32 result (see
codegen/math.py), well inside the default fp32 tolerance (1e-5 relative, about 80 ulp); the
half types compute in fp32 and round once, as eager does, so they get their usual tolerance."""
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition, FusionDefinitionError, FusionInputError
from fuser.segment.segments import SegmentKind
from tests.frontend.jit_helpers import assert_close_to_eager
from tests.helpers import assert_eager, backend_env, cases, dtype_name, make, run, run_and_check

f32, f64, bf16, f16, i64, i32, b8 = (torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                    torch.int64, torch.int32, torch.bool)
NAN, INF = float("nan"), float("inf")


def _erfcinv(x):
    return torch.erfinv(1 - x.double()).to(x.dtype)  # (no erfcinv in eager)


def _uniform(lo, hi):
    return lambda shape: torch.rand(shape) * (hi - lo) + lo


# name: (eager, random values in the op's domain, special values the first row holds)
# (sinh and cosh at 88.5, past exp's fp32 range: ATen's vectorized CPU kernels (torch 2.13) give
# inf from 88.7, though the value stays finite up to 89.4)
UNARY = {
    "asin": (torch.asin, _uniform(-1, 1), [1.0, -1.0, 1.5, -0.0, NAN, INF]),
    "acos": (torch.acos, _uniform(-1, 1), [1.0, -1.0, -1.5, 0.0, NAN, -INF]),
    "atan": (torch.atan, lambda s: torch.randn(s) * 4, [INF, -INF, -0.0, 1e-30, NAN, 1e30]),
    "asinh": (torch.asinh, lambda s: torch.randn(s) * 4, [INF, -INF, -0.0, 1e-30, NAN, -1e30]),
    "acosh": (torch.acosh, lambda s: 1 + torch.randn(s).exp(), [1.0, 0.5, INF, NAN, 1e30, 1.0000001]),
    "atanh": (torch.atanh, _uniform(-1, 1), [1.0, -1.0, 1.5, -0.0, NAN, 1e-30]),
    "sinh": (torch.sinh, lambda s: torch.randn(s) * 4, [88.5, -88.5, 100.0, -0.0, NAN, -INF]),
    "cosh": (torch.cosh, lambda s: torch.randn(s) * 4, [88.5, -88.5, 100.0, -0.0, NAN, INF]),
    "erfc": (torch.erfc, lambda s: torch.randn(s) * 3, [INF, -INF, 9.0, -0.0, NAN, 26.0]),
    "erfinv": (torch.erfinv, _uniform(-1, 1), [1.0, -1.0, 1.5, -0.0, NAN, 0.999999]),
    "erfcinv": (_erfcinv, _uniform(0.01, 1.99), [0.0, 2.0, 1.0, 2.5, NAN, 1e-6]),
    "lgamma": (torch.lgamma, lambda s: torch.randn(s) * 5, [0.0, -1.0, -2.0, -0.5, NAN, -INF]),
    "frac": (torch.frac, lambda s: torch.randn(s) * 5, [INF, -INF, -0.0, -2.5, NAN, 1e30]),
    "signbit": (torch.signbit, torch.randn, [-0.0, 0.0, -INF, INF, NAN, -NAN]),
    "isneginf": (torch.isneginf, torch.randn, [-INF, INF, NAN, -0.0, 3.0e38, -3.0e38]),
    "isposinf": (torch.isposinf, torch.randn, [-INF, INF, NAN, -0.0, 3.0e38, -3.0e38]),
    "isreal": (torch.isreal, torch.randn, [-INF, INF, NAN, -0.0, 1.0, 2.0]),
}
# no interpreter formula: an ATen segment on CPU, libdevice on CUDA (test_libdevice_lowerings)
ATEN_ON_CPU = {"erfc", "erfinv", "erfcinv", "lgamma"}
INT_INPUT = set(UNARY) - {"frac", "erfcinv"}  # eager takes integers (frac does not)


def _unary_input(name, dtype, shape=(3, 8)):
    _, draw, special = UNARY[name]
    if not dtype.is_floating_point:
        return make(shape, dtype)
    x = draw(shape)
    x[0, :len(special)] = torch.tensor(special)
    return x.to(dtype)


def _kinds(fd):
    return [s.kind for s in fd.cache.last_runtime.segments]


UNARY_CASES = [pytest.param(n, d, id=f"{n}-{dtype_name(d)}") for n in UNARY
               for d in ((f32, bf16, f16, f64, i64) if n in INT_INPUT else (f32, bf16, f16, f64))]


@pytest.mark.parametrize("name,dtype,backend", cases(UNARY_CASES, backends=("aten",)) + cases(
    [p for p in UNARY_CASES if p.values[1] in (f32, bf16, i32, i64)], backends=("kernel",)))
def test_unary(name, dtype, backend):
    x = _unary_input(name, dtype)
    ref = UNARY[name][0]
    fd, _ = run_and_check(lambda fd, a: getattr(fd.ops, name)(a), ref, [x], backend=backend)
    if backend == "kernel":
        want = SegmentKind.evaluator if name in ATEN_ON_CPU else SegmentKind.kernel
        assert _kinds(fd) == [want]


@pytest.mark.parametrize("backend", ["kernel"])
def test_fp64_asin_stays_in_aten_on_the_interpreter(backend):
    """The interpreter's atan polynomial is for fp32: fp64 asin runs as an ATen segment there,
    fp64 sinh (precision-independent formula) in the kernel."""
    x = _unary_input("asin", f64)
    fd, _ = run_and_check(lambda fd, a: [fd.ops.asin(a), fd.ops.sinh(a)], lambda a: [torch.asin(a), torch.sinh(a)],
                          [x], backend=backend)
    assert sorted(k.value for k in _kinds(fd)) == ["evaluator", "kernel"]


def test_erfcinv_inverts_erfc():
    """erfcinv has no eager counterpart: erfc(erfcinv(y)) gives y back, into the tail."""
    y = torch.tensor([[1e-12, 1e-6, 0.01, 0.5, 1.0, 1.5, 1.99, 2.0 - 1e-6]], dtype=f64)
    (out,) = run(lambda fd, a: fd.ops.erfcinv(a), [y])[1]
    torch.testing.assert_close(torch.erfc(out), y, rtol=1e-9, atol=0)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_fused_with_neighbours(backend):
    """The new ops fuse with each other and with neighbours into one kernel; an op with no
    interpreter lowering (lgamma) cuts it into kernel, ATen, kernel on CPU."""
    x = make((4, 6), f32) * 0.5

    def build(fd, a):
        y = fd.ops.add(fd.ops.asin(fd.ops.mul(a, 0.5)), fd.ops.sinh(a))
        return fd.ops.mul(fd.ops.atan(y), fd.ops.cast(fd.ops.signbit(a), DataType.Float))

    fd, _ = run_and_check(build, lambda a: torch.atan(torch.asin(a * 0.5) + torch.sinh(a)) * torch.signbit(a).float(),
                          [x], backend=backend)
    if backend == "kernel":
        assert _kinds(fd) == [SegmentKind.kernel]

    def with_lgamma(fd, a):
        return fd.ops.exp(fd.ops.lgamma(fd.ops.cosh(a)))

    fd, _ = run_and_check(with_lgamma, lambda a: torch.exp(torch.lgamma(torch.cosh(a))), [x], backend=backend)
    if backend == "kernel":
        assert [k.value for k in _kinds(fd)] == ["kernel", "evaluator", "kernel"]


@pytest.mark.parametrize("name,backend", cases([pytest.param(n, id=n) for n in ("asinh", "erfinv", "isposinf")]))
def test_unary_symbolic_sizes_reuse_the_cache(name, backend):
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(getattr(fd.ops, name)(x))
    with backend_env(backend):
        for shape in ((3, 8), (5, 7)):
            x = _unary_input(name, f32, shape)
            assert_eager(fd.execute([x])[0], UNARY[name][0](x))
    assert len(fd.cache.runtimes()) == 1


# -- binary ops ---------------------------------------------------------------------------------


def _shift_amounts(shape, dtype):
    """Shifts in range and past it on both sides (eager: everything shifted out)."""
    bits = torch.iinfo(dtype).bits
    s = torch.randint(0, bits, shape)
    s.view(-1)[:4] = torch.tensor([-1, bits, bits + 5, 0])
    return s.to(dtype)


def _bits_as_unsigned(a, bits):
    return a % (1 << bits)  # (Python integers: the two's complement bits read as unsigned)


def logical_right_shift(a, s):
    """A reference in Python integers (jax.lax.shift_right_logical's semantics)."""
    bits = torch.iinfo(a.dtype).bits
    out = [0 if not 0 <= k < bits else _bits_as_unsigned(v, bits) >> k for v, k in zip(a.view(-1).tolist(), s.view(-1).tolist())]
    out = [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in out]
    return torch.tensor(out, dtype=a.dtype).view(a.shape)


def _signed_divisors(shape, dtype):
    return make(shape, dtype, nonzero=True)


def trunc_div(a, b):
    return torch.div(a, b, rounding_mode="trunc")


# name: (eager, first operand, second operand)
BINARY = {
    "div": (trunc_div, lambda s, d: make(s, d) * 7, _signed_divisors),
    "truediv": (torch.true_divide, lambda s, d: make(s, d) * 7, _signed_divisors),
    "mod": (torch.fmod, lambda s, d: make(s, d) * 7, _signed_divisors),
    "gcd": (torch.gcd, lambda s, d: make(s, d) * 6, lambda s, d: make(s, d) * 4),
    "bitwise_left_shift": (torch.bitwise_left_shift, lambda s, d: make(s, d) * 1000, _shift_amounts),
    "bitwise_right_shift": (torch.bitwise_right_shift, lambda s, d: make(s, d) * 1000, _shift_amounts),
    "logical_right_shift": (logical_right_shift, lambda s, d: make(s, d) * 1000, _shift_amounts),
}
BINARY_CASES = [pytest.param(n, d, id=f"{n}-{dtype_name(d)}") for n in BINARY for d in (i64, i32)]


@pytest.mark.parametrize("name,dtype,backend", cases(BINARY_CASES))
def test_integer_binary(name, dtype, backend):
    ref, first, second = BINARY[name]
    a, b = first((4, 8), dtype), second((4, 8), dtype)
    fd, _ = run_and_check(lambda fd, x, y: getattr(fd.ops, name)(x, y), ref, [a, b], backend=backend)
    if backend == "kernel":
        assert _kinds(fd) == [SegmentKind.kernel]


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_integer_binary_with_python_scalars(backend):
    """A Python int on either side, broadcasting, int32 with an int64 operand (promoted)."""
    a = make((3, 5), i32) * 9
    b = make((1, 5), i64, nonzero=True)

    def build(fd, x, y):
        return [fd.ops.div(x, 2), fd.ops.div(-17, y), fd.ops.mod(x, -3), fd.ops.gcd(x, y),
                fd.ops.bitwise_left_shift(x, 3), fd.ops.bitwise_right_shift(-100, y),
                fd.ops.logical_right_shift(x, 1), fd.ops.truediv(x, 4)]

    def ref(x, y):
        return [trunc_div(x, 2), trunc_div(torch.tensor(-17), y), torch.fmod(x, -3), torch.gcd(x.long(), y),
                torch.bitwise_left_shift(x, 3), torch.bitwise_right_shift(torch.tensor(-100), y),
                logical_right_shift(x, torch.ones_like(x)), x / 4]

    run_and_check(build, ref, [a, b], backend=backend)


@pytest.mark.parametrize("name", ["div", "mod"])
def test_integer_division_by_zero_is_an_input_error(name):
    """Through ATen (which refuses it on the CPU); a kernel's result there is undefined, as in
    nvFuser and in eager on CUDA."""
    a, b = make((2, 3), i64), make((2, 3), i64, nonzero=True)
    b[1, 2] = 0
    with pytest.raises(FusionInputError, match=f"{name}: an integer divisor is zero in this execution"):
        run(lambda fd, x, y: getattr(fd.ops, name)(x, y), [a, b], backend="aten")


@pytest.mark.parametrize("da,db,backend", cases([(f32, f32), (bf16, bf16), (f16, f32), (i64, f32), (f32, f64)]))
def test_div_and_truediv_of_floats(da, db, backend):
    """With a floating operand, div and truediv are both true division."""
    a, b = make((3, 5), da), make((3, 5), db, nonzero=True)
    run_and_check(lambda fd, x, y: [fd.ops.div(x, y), fd.ops.truediv(x, y)],
                  lambda x, y: [torch.true_divide(x, y)] * 2, [a, b], backend=backend)


@pytest.mark.parametrize("da,db,backend", cases([(f32, f32), (f64, f64), (f32, f64), (bf16, bf16), (f16, f16)]))
def test_nextafter(da, db, backend):
    """fp32 and fp64 in kernels (bit steps), half types in ATen (they step in their own type)."""
    a, b = make((3, 8), da), make((3, 8), db)
    a[0, :7] = torch.tensor([0.0, -0.0, 1.0, INF, NAN, 3.4e38 if da is not f16 else 65504.0, 1.0])
    b[0, :7] = torch.tensor([-1.0, 1.0, 1.0, 0.0, 1.0, INF, NAN])
    b[1, :3] = a[1, :3]  # equal operands give the second one
    fd, _ = run_and_check(lambda fd, x, y: fd.ops.nextafter(x, y), torch.nextafter, [a, b], backend=backend)
    if backend == "kernel":
        assert _kinds(fd) == [SegmentKind.evaluator if da in (bf16, f16) else SegmentKind.kernel]


def test_nextafter_of_integers_is_float_as_in_nvfuser():
    a, b = make((2, 3), i64), make((2, 3), i64)
    (out,) = run(lambda fd, x, y: fd.ops.nextafter(x, y), [a, b])[1]
    assert_eager(out, torch.nextafter(a.float(), b.float()))


# -- addcmul, threshold, real and imag ----------------------------------------------------------------


@pytest.mark.parametrize("dtypes,value,backend", cases([
    ((f32, f32, f32), 0.5), ((bf16, bf16, bf16), -1.5), ((f16, f32, bf16), 2.0), ((i64, i64, i32), 3),
    ((i64, i64, i64), 0.5)]))
def test_addcmul(dtypes, value, backend):
    """input + value * t1 * t2 in the three tensors' promoted type (an integer one truncates
    value, as eager does); half types in fp32, rounded once."""
    x, t1, t2 = (make((3, 5), d) for d in dtypes)
    t1 = t1[:1]  # broadcast
    fd, _ = run_and_check(lambda fd, a, b, c: fd.ops.addcmul(a, b, c, value),
                          lambda a, b, c: torch.addcmul(a, b, c, value=value), [x, t1, t2], backend=backend)
    if backend == "kernel":
        assert _kinds(fd) == [SegmentKind.kernel]


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_addcmul_with_a_defined_scalar_value(backend):
    x, t1, t2 = (make((3, 5), f32) for _ in range(3))
    fd, (out,) = run(lambda fd, a, b, c, s: fd.ops.addcmul(a, b, c, s), [x, t1, t2, 0.25],
                     decl=[None, None, None, {"dtype": DataType.Double}], backend=backend)
    assert_eager(out, torch.addcmul(x, t1, t2, value=0.25))


@pytest.mark.parametrize("dtype,thresh,value,backend", cases([
    (f32, 0.3, -2.0), (bf16, 0.3, 0.1), (f16, -0.25, 7.0), (i64, 0.5, 7), (i64, -0.5, -3), (i32, 2, 9)]))
def test_threshold(dtype, thresh, value, backend):
    """value where x <= threshold, as torch.nn.functional.threshold: half types compare in fp32
    (the bf16 0.30078125 is above 0.3), integers with the threshold truncated (0 <= -0.5 then)."""
    x = make((3, 8), dtype) if not dtype.is_floating_point else make((3, 8), dtype) * 0.5
    x[0, :4] = torch.tensor([0.30078125, 0.298828125, -0.25, 0.0]).to(dtype)
    if dtype.is_floating_point:
        x[0, 4] = NAN
    fd, _ = run_and_check(lambda fd, a: fd.ops.threshold(a, thresh, value),
                          lambda a: F.threshold(a, thresh, value), [x], backend=backend)
    if backend == "kernel":
        assert _kinds(fd) == [SegmentKind.kernel]


def test_real_and_imag():
    """Complex tensors run through ATen segments; real of a real tensor is a copy (nvFuser's)."""
    z = torch.randn(3, 4, dtype=torch.complex64)
    x = make((3, 4), f32)
    with FusionDefinition() as fd:
        tz = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.ComplexFloat)
        tx = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        for out in (fd.ops.real(tz), fd.ops.imag(tz), fd.ops.real(tx), fd.ops.isreal(tz)):
            fd.add_output(out)
    got = fd.execute([z, x])
    for g, want in zip(got, (torch.real(z), torch.imag(z), x, torch.isreal(z))):
        assert_eager(g, want)


# -- definition errors --------------------------------------------------------------------------


@pytest.mark.parametrize("build,message", [
    (lambda fd, f, i, b: fd.ops.bitwise_left_shift(f, i), "bitwise_left_shift: needs integer operands, got DataType.Float tensor"),
    (lambda fd, f, i, b: fd.ops.logical_right_shift(i, 1.5), "logical_right_shift: needs integer operands"),
    (lambda fd, f, i, b: fd.ops.gcd(b, b), "gcd: needs integer operands, got DataType.Bool tensor and DataType.Bool tensor"),
    (lambda fd, f, i, b: fd.ops.mod(f, i), "mod: needs integer operands, got DataType.Float tensor and DataType.Int tensor; for floating"),
    (lambda fd, f, i, b: fd.ops.div(b, b), "div: truncating division of two bool operands"),
    (lambda fd, f, i, b: fd.ops.frac(i), "frac: needs a floating tensor, got DataType.Int tensor"),
    (lambda fd, f, i, b: fd.ops.imag(f), "imag: needs a complex tensor, got DataType.Float tensor"),
    (lambda fd, f, i, b: fd.ops.threshold(f, i, 1.0), "threshold: threshold must be a scalar, got tensor"),
    (lambda fd, f, i, b: fd.ops.threshold(b, 0, 1), "threshold: needs an integer or floating tensor, got DataType.Bool tensor"),
    (lambda fd, f, i, b: fd.ops.addcmul(f, f, f, i), "addcmul: value must be a scalar, got tensor"),
    (lambda fd, f, i, b: fd.ops.addcmul(b, b, b), "addcmul: not defined for bool operands"),
])
def test_definition_errors(build, message):
    with pytest.raises(FusionDefinitionError, match=message.replace("(", r"\(")):
        with FusionDefinition() as fd:
            f = fd.define_tensor(shape=[-1], dtype=DataType.Float)
            i = fd.define_tensor(shape=[-1], dtype=DataType.Int)
            b = fd.define_tensor(shape=[-1], dtype=DataType.Bool)
            build(fd, f, i, b)


def test_repr_roundtrip():
    from tests.frontend.test_repr import check_roundtrip

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        n = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Int)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.addcmul(fd.ops.asinh(x), x, x, s))
        fd.add_output(fd.ops.threshold(fd.ops.erfinv(fd.ops.mul(x, 0.1)), 0.0, -1.0))
        fd.add_output(fd.ops.logical_right_shift(fd.ops.gcd(n, 6), fd.ops.mod(n, 3)))
        fd.add_output(fd.ops.nextafter(fd.ops.div(n, 2), fd.ops.truediv(x, n)))
    check_roundtrip(fd, [make((3, 4)), make((3, 4), i64, nonzero=True), 0.75])


# -- fuser.jit ------------------------------------------------------------------------------------


def _jit_check(fn, *args, fallbacks=0):
    jitted = fuser.jit(fn)
    got, want = jitted(*args), fn(*args)
    assert_close_to_eager(got, want)
    info = jitted.cache_info()
    assert (info.fusions, info.fallback_ops) == (1, fallbacks), info
    return jitted


def _unit(*shape):
    return torch.rand(*shape) * 1.8 - 0.9


def test_jit_unary_forward_fuses():
    def fn(x):
        return (torch.asin(x) + torch.acos(x) * torch.atan(x) + torch.sinh(x) - torch.cosh(x) + torch.asinh(x)
                + torch.atanh(x) + torch.acosh(x.abs() + 1) + torch.frac(x * 3)
                + torch.signbit(x) + torch.isneginf(x) + torch.isposinf(x) + torch.isreal(x))

    _jit_check(fn, _unit(4, 6))


@pytest.mark.parametrize("fn,fallbacks", [
    (lambda x: torch.asin(x) * torch.sinh(x) + torch.atanh(x) - torch.frac(x * 3), 0),
    (lambda x: torch.erfinv(x) * torch.erfc(x) + torch.acos(x) + torch.atan(x) * torch.cosh(x), 0),
    # lgamma's gradient is digamma, which nvFuser has not (and neither has fuser): it runs eagerly
    (lambda x: torch.lgamma(x + 2) * torch.asinh(x), 1),
], ids=["asin-sinh-atanh-frac", "erfinv-erfc-acos-atan-cosh", "lgamma-asinh"])
def test_jit_forward_and_backward(fn, fallbacks):
    x = _unit(4, 6)
    xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    jitted = fuser.jit(fn)
    yj, ye = jitted(xj), fn(xe)
    assert_close_to_eager(yj, ye)
    dy = torch.randn_like(ye)
    (gj,), (ge,) = torch.autograd.grad(yj, [xj], dy), torch.autograd.grad(ye, [xe], dy)
    assert_close_to_eager(gj, ge)
    assert jitted.cache_info().fallback_ops == fallbacks


def test_jit_integer_ops_fuse():
    """Integer //, trunc division, / (true division: aten.div is truediv), %, gcd and shifts in
    one fusion with eager's results."""
    def fn(a, b):
        return ((a // b) + torch.div(a, b, rounding_mode="trunc") + torch.fmod(a, b) + torch.gcd(a, b)
                + (a << 3) + (a >> b.abs()) + torch.bitwise_left_shift(a, b.abs()), a / b)

    a = make((4, 6), i64) * 13
    b = make((4, 6), i64, nonzero=True)
    _jit_check(fn, a, b)


def test_jit_nextafter_addcmul_threshold():
    def fn(x, y, z):
        return F.threshold(torch.addcmul(x, y, z, value=0.5), 0.1, -1.0) + torch.nextafter(x, y)

    _jit_check(fn, *(torch.randn(4, 6) for _ in range(3)))


# -- CUDA: libdevice lowerings ---------------------------------------------------------------------


def _cuda_kernel_sources(monkeypatch, build, inputs):
    """The sources of the kernels a definition gets on CUDA, generated on the CPU: the runtime
    and its launchers take the "cuda" target (libdevice), and the launch, which needs a GPU
    driver, fails after the kernel's source is made."""
    import fuser.codegen.launch as launch
    import fuser.runtime.cache as cache

    for module in (cache, launch):
        monkeypatch.setattr(module, "target_for", lambda device: "cuda")
    with FusionDefinition() as fd:
        build(fd)
    with pytest.raises(RuntimeError):
        fd.execute(inputs)
    runtime = fd.cache.last_runtime
    assert _kinds(fd) == [SegmentKind.kernel] * len(runtime.segments)
    return [ks for launcher in runtime.launchers.values() for ks, _ in launcher.variants.values()]


def test_cuda_lowerings_compile_for_sm90(monkeypatch, tmp_path):
    """Every op of the group in CUDA kernels (libdevice, the bit-level helpers, gcd's loop),
    fp32, bf16 and fp64 operands, compiles for an H100/H200 (no GPU needed)."""
    from tests.helpers import sm90_ptx

    float_types = (DataType.Float, DataType.BFloat16, DataType.Double)

    def build(fd):
        x, h, d = (fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt) for dt in float_types)
        n, m = (fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=dt) for dt in (DataType.Int, DataType.Int32))
        terms = [getattr(fd.ops, name)(t) for name in UNARY for t in (x, h, d)]
        terms += [fd.ops.nextafter(x, x), fd.ops.nextafter(d, d), fd.ops.addcmul(h, h, h, 0.5),
                  fd.ops.threshold(h, 0.3, 0.1), fd.ops.truediv(n, m)]
        terms += [getattr(fd.ops, name)(a, a) for name in BINARY for a in (n, m)]
        total = fd.ops.cast(terms[0], DataType.Double)
        for t in terms[1:]:
            total = fd.ops.add(total, fd.ops.cast(t, DataType.Double))
        fd.add_output(total)

    inputs = [make((4, 8), dt) for dt in (f32, bf16, f64, i64, i32)]
    (ks,) = _cuda_kernel_sources(monkeypatch, build, inputs)
    for name in ("erfinv", "erfcinv", "lgamma", "asin", "nextafter"):
        assert f"libdevice.{name}(" in ks.source
    params = [p.split(":")[0].strip() for p in re.search(r"^def fuser_\w+\((.*?)\):", ks.source, re.M)[1].split(",")]
    constexprs = {k: v for k, v in {"BLOCK0": 4, "BLOCK1": 8, "INT64": False, "EVEN0": False, "EVEN1": False}.items()
                  if k in params}
    pointer = {"Float": "*fp32", "BFloat16": "*bf16", "Double": "*fp64", "Int": "*i64", "Int32": "*i32"}
    pointers = {p: pointer[a.val.dtype.name] for p, a in zip(ks.params, ks.args) if a.kind == "tensor"}
    assert ".entry" in sm90_ptx(ks.source, constexprs, pointers, tmp_path, num_warps=4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [f32, bf16, f64], ids=dtype_name)
def test_libdevice_lowerings(name, dtype):
    x = _unary_input(name, dtype, (64, 33)).cuda()
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.from_torch(dtype))
        fd.add_output(getattr(fd.ops, name)(t))
    (out,) = fd.execute([x])
    assert _kinds(fd) == [SegmentKind.kernel]
    assert_eager(out, UNARY[name][0](x))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", [i64, i32], ids=dtype_name)
def test_integer_binary_on_cuda(name, dtype):
    ref, first, second = BINARY[name]
    a, b = first((64, 33), dtype), second((64, 33), dtype)
    with FusionDefinition() as fd:
        x, y = (fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.from_torch(dtype)) for _ in range(2))
        fd.add_output(getattr(fd.ops, name)(x, y))
    (out,) = fd.execute([a.cuda(), b.cuda()])
    assert_eager(out.cpu(), ref(a, b))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [f32, f64], ids=dtype_name)
def test_nextafter_on_cuda(dtype):
    a, b = make((64, 33), dtype).cuda(), make((64, 33), dtype).cuda()
    a[0, :4] = torch.tensor([0.0, -0.0, INF, NAN])
    with FusionDefinition() as fd:
        x, y = (fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.from_torch(dtype)) for _ in range(2))
        fd.add_output(fd.ops.nextafter(x, y))
    (out,) = fd.execute([a, b])
    assert_eager(out, torch.nextafter(a, b))


@pytest.mark.parametrize("dtype", [f32, bf16])
@pytest.mark.parametrize("act", ["elu", "selu", "celu"])
def test_jit_elu_family_fuses_forward_and_backward(act, dtype):
    """aten.elu had no lowering: ELU, SELU and CELU ran through ATen between fusions."""
    f = {"elu": lambda x: F.elu(x * 2, alpha=0.7), "selu": lambda x: F.selu(x * 2),
         "celu": lambda x: F.celu(x * 2, alpha=1.3)}[act]
    x = make((8, 33), dtype)
    # (zeros of both signs; not NaN: eager's CPU gradient there is NaN from its vectorized loop
    # and finite from its scalar one, as on CUDA and in fuser)
    x[0, :2] = torch.tensor([0.0, -0.0], dtype=dtype)
    xj, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    jitted = fuser.jit(f)
    y = jitted(xj)
    want = f(xe)
    tol = dict(rtol=1.6e-2, atol=1e-2) if dtype == bf16 else {}
    torch.testing.assert_close(y, want, equal_nan=True, **tol)
    g = make((8, 33), dtype)
    y.backward(g)
    want.backward(g)
    torch.testing.assert_close(xj.grad, xe.grad, equal_nan=True, **tol)
    assert jitted.cache_info().fallback_ops == 0

"""nvFuser's data types beyond the common ones: fp8 (e4m3fn, e5m2, e8m0fnu), Null ("no dtype
given"), UInt64, Index and packed fp4.

fp8 outputs are compared with eager byte for byte (`.view(torch.uint8)`) on data that reaches
past the fp8 ranges, into their subnormals, and holds inf and NaN of both signs: the kernels'
conversions (codegen/math.py: the hardware's on CUDA with fix-ups, integer steps on the
interpreter) must round, saturate and overflow as torch's do.
"""
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.errors import FusionDefinitionError, FusionInputError, UnsupportedError

from tests.helpers import backend_env, sm90_ptx

FP8 = {"e4m3fn": (DataType.Float8_e4m3fn, torch.float8_e4m3fn),
       "e5m2": (DataType.Float8_e5m2, torch.float8_e5m2)}
BACKENDS = ("aten", "kernel")


def stressing(shape, dtype=torch.float32) -> torch.Tensor:
    """Random values over 2^-26 .. 2^20 (both fp8 formats' subnormals and overflow), with inf,
    NaN of both signs and the formats' rounding boundaries planted at random places."""
    n = 1
    for s in shape:
        n *= s
    x = torch.randn(n) * torch.exp2(torch.randint(-26, 20, (n,)).float())
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), -float("nan"), 448.0, 464.0,
                            -465.0, 480.0, 57344.0, -61440.0, 61439.0, 65536.0, 2.0 ** -10, 3 * 2.0 ** -11,
                            2.0 ** -17, -(2.0 ** -16)])
    x[torch.randperm(n)[:len(special)]] = special
    return x.reshape(shape).to(dtype)


def assert_same_bytes(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    a, e = actual.view(torch.uint8), expected.view(torch.uint8)
    bad = a != e
    assert not bad.any(), f"{int(bad.sum())} codes differ: {a[bad][:8].tolist()} vs eager {e[bad][:8].tolist()}"


def assert_same_floats(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Bit-exact but for the NaNs' encodings."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    nan = expected.isnan()
    assert torch.equal(actual.isnan(), nan)
    assert torch.equal(actual[~nan], expected[~nan])


def execute(fd, inputs, backend):
    with backend_env(backend):
        return fd.execute(inputs)


# -- fp8 casts and quantization ------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fp8", FP8)
def test_cast_to_fp8_and_back_matches_eager_bytes(fp8, src, backend):
    dt, tdt = FP8[fp8]
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.from_torch(src))
        y = fd.ops.cast(x, dt)
        fd.add_output(y)
        fd.add_output(fd.ops.cast(y, DataType.Float))  # (read back in the same kernel)
    x = stressing((24, 40), src)
    y, back = execute(fd, [x], backend)
    assert_same_bytes(y, x.to(tdt))
    assert_same_floats(back, x.to(tdt).float())
    if backend == "kernel":
        assert all(s.kind.value == "kernel" for s in fd.last_segments())


def quantize_fd(fp8: DataType, with_scale: bool = False) -> FusionDefinition:
    """Row-wise quantization: scale each bf16 row so that its largest magnitude maps to the
    format's largest finite value, cast to fp8; the inverse scales come out too (and the
    scales, `with_scale`)."""
    fp8_max = {DataType.Float8_e4m3fn: 448.0, DataType.Float8_e5m2: 57344.0}[fp8]
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        amax = fd.ops.max(fd.ops.abs(xf), [1], keepdim=True, dtype=DataType.Null)
        scale = fd.ops.div(fp8_max, fd.ops.clamp(amax, 1e-12, float("inf")))
        fd.add_output(fd.ops.cast(fd.ops.mul(xf, scale), fp8))
        fd.add_output(fd.ops.reciprocal(scale))
        if with_scale:
            fd.add_output(scale)
    return fd


def quantize_eager(x: torch.Tensor, fp8: torch.dtype):
    fp8_max = torch.finfo(fp8).max
    xf = x.float()
    amax = xf.abs().amax(1, keepdim=True).clamp(1e-12, float("inf"))
    scale = torch.full_like(amax, fp8_max) / amax  # (eager's `448.0 / amax` multiplies by 1 / amax)
    return (xf * scale).to(fp8), scale.reciprocal()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8)
def test_rowwise_quantize_matches_eager_bytes(fp8, backend):
    dt, tdt = FP8[fp8]
    fd = quantize_fd(dt)
    for shape in [(6, 100), (9, 37)]:  # symbolic sizes: the second reuses the cache
        x = torch.randn(shape).mul(torch.exp2(torch.randint(-30, 30, (shape[0], 1)).float())).bfloat16()
        x[0, 3] = 0.0
        x[1, :] = 0.0  # an all-zero row: the clamped amax keeps its scale finite
        y, inv = execute(fd, [x], backend)
        want_y, want_inv = quantize_eager(x, tdt)
        assert_same_bytes(y, want_y)
        torch.testing.assert_close(inv, want_inv, rtol=1e-6, atol=0)
    assert fd.cache.num_runtimes == 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fp8", FP8)
def test_fp8_inputs_cast_up_and_scaled(fp8, backend):
    dt, tdt = FP8[fp8]
    with FusionDefinition() as fd:
        q = fd.define_tensor([-1, -1], contiguity=True, dtype=dt)
        s = fd.define_tensor([-1, 1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.cast(q, DataType.Float), s))
    codes = torch.cat([torch.arange(256, dtype=torch.uint8), torch.randint(0, 256, (64,), dtype=torch.uint8)])
    q = codes[torch.randperm(codes.numel())].view(tdt).reshape(16, 20)
    s = torch.rand(16, 1) + 0.5
    (out,) = execute(fd, [q, s], backend)
    assert_same_floats(out, q.float() * s)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp8_data_movement_keeps_values(backend):
    """set, permute and where between tensors of one fp8 type move fp8 values unchanged (NaN
    encodings aside: a kernel holds them in fp32)."""
    tdt = torch.float8_e4m3fn
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float8_e4m3fn)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float8_e4m3fn)
        c = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Bool)
        fd.add_output(fd.ops.where(c, a, b))
        fd.add_output(fd.ops.permute(fd.ops.set(a), [1, 0]))
    a, b = (stressing((8, 12)).to(tdt) for _ in range(2))
    c = torch.rand(8, 12) < 0.5
    w, p = execute(fd, [a, b, c], backend)
    assert w.dtype == tdt and p.dtype == tdt
    assert_same_floats(w.float(), torch.where(c, a, b).float())
    assert_same_floats(p.float(), a.t().float())


def test_fp8_arithmetic_computes_in_float():
    """PyTorch has no fp8 arithmetic; nvFuser's rule casts fp8 operands to Float first, so
    add(fp8, fp8) gives Float (and with a Double, Double)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float8_e4m3fn)
        b = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float8_e5m2)
        h = fd.define_tensor([-1], contiguity=True, dtype=DataType.BFloat16)
        d = fd.define_tensor([-1], contiguity=True, dtype=DataType.Double)
        outs = [fd.ops.add(a, a), fd.ops.mul(a, b), fd.ops.sub(a, h), fd.ops.add(b, d), fd.ops.neg(a),
                fd.ops.sum(a, [0]), fd.ops.lt(a, b), fd.ops.cat([a, b], 0)]
        for o in outs:
            fd.add_output(o)
    assert [o.dtype for o in outs] == [DataType.Float, DataType.Float, DataType.Float, DataType.Double,
                                       DataType.Float, DataType.Float, DataType.Bool, DataType.Float]
    a, b = (torch.randn(10).mul(30).to(t) for t in (torch.float8_e4m3fn, torch.float8_e5m2))
    h, d = torch.randn(10).bfloat16(), torch.randn(10, dtype=torch.float64)
    got = fd.execute([a, b, h, d])
    af, bf = a.float(), b.float()
    want = [af + af, af * bf, af - h.float(), bf.double() + d, -af, af.sum(), af < bf, torch.cat([af, bf])]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_fp8_from_pytorch_printing_and_repr_round_trip():
    x = torch.randn(4, 6).to(torch.float8_e5m2)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        y = fd.ops.cast(fd.ops.mul(t, 2.0), DataType.Float8_e4m3fn)
        fd.add_output(y)
    assert t.dtype is DataType.Float8_e5m2
    text = str(fd.fusion)
    assert "___e5m2[" in text and "___e4m3[" in text
    (want,) = fd.execute([x])
    code = repr(fd)
    assert "dtype=DataType.Float8_e5m2" in code and "DataType.Float8_e4m3fn" in code
    scope = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(code, scope)  # noqa: S102 - the printed definition is the thing under test
    with FusionDefinition() as again:
        scope["nvfuser_fusion"](again)
    assert again.fusion.structural_hash() == fd.fusion.structural_hash()
    assert_same_bytes(again.execute([x])[0], want)


def test_fp8_jit_quantize():
    def quantize(x, scale):
        return (x.float() * scale).to(torch.float8_e4m3fn)

    x = stressing((8, 32), torch.bfloat16)
    scale = torch.rand(8, 1) + 0.5
    with backend_env("kernel"):
        got = fuser.jit(quantize)(x, scale)
    assert_same_bytes(got, quantize(x, scale))


def test_e8m0_casts_run_through_aten():
    """float8_e8m0fnu (powers of two, the MX formats' scales) has no Triton type: its casts stay
    in evaluator segments, as torch converts."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        e = fd.ops.cast(x, DataType.Float8_e8m0fnu)
        fd.add_output(e)
        fd.add_output(fd.ops.mul(fd.ops.cast(e, DataType.Float), x))
    x = stressing((50,)).abs()
    e, m = execute(fd, [x], "kernel")
    assert_same_bytes(e, x.to(torch.float8_e8m0fnu))
    assert_same_floats(m, x.to(torch.float8_e8m0fnu).float() * x)
    assert "___e8m0" in str(fd.fusion)


def test_fp8_errors():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1], dtype=DataType.Float8_e4m3fn)
        with pytest.raises(UnsupportedError, match="Float8_e4m3fn"):
            fd.define_scalar(1.0, dtype=DataType.Float8_e4m3fn)
        with pytest.raises(UnsupportedError, match="scalars of DataType.Float8_e5m2"):
            fd.ops.cast(fd.define_scalar(1.0), DataType.Float8_e5m2)
        fd.add_output(fd.ops.cast(a, DataType.Float))


@pytest.mark.parametrize("fp8", FP8)
def test_cuda_conversions_use_the_hardware_cvt(fp8, tmp_path):
    """The CUDA lowering compiles for sm_90 to cvt.rn.satfinite to fp8 and cvt.rn.f16x2 from it
    (its fix-ups for inf, overflow and NaN are checked on a GPU by the test below)."""
    from fuser.codegen.math import fp8_narrow, fp8_widen, helpers_for

    short, ptr = {"e4m3fn": ("e4m3", "*fp8e4nv"), "e5m2": ("e5m2", "*fp8e5")}[fp8]
    body = (f"def fuser_fp8_round_trip(X_ptr, Y_ptr, Z_ptr, N, BLOCK: tl.constexpr):\n"
            f"    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            f"    x = tl.load(X_ptr + o, mask=o < N, other=0.0)\n"
            f"    tl.store(Y_ptr + o, {fp8_narrow('x', short, 'cuda')}, mask=o < N)\n"
            f"    y = tl.load(Y_ptr + o, mask=o < N, other=0.0)\n"
            f"    tl.store(Z_ptr + o, {fp8_widen('y', short, 'cuda')}, mask=o < N)\n")
    source = "import triton\nimport triton.language as tl\n\n\n" + helpers_for(body) + "\n\n\n" + body
    ptx = sm90_ptx(source, {"BLOCK": 1024}, {"X_ptr": "*fp32", "Y_ptr": ptr, "Z_ptr": "*fp32"}, tmp_path,
                   num_warps=4)
    assert re.search(rf"cvt\.rn\.satfinite\.{short}x2\.f32", ptx)
    assert re.search(rf"cvt\.rn\.f16x2\.{short}x2", ptx)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("fp8", FP8)
def test_cuda_kernels_convert_fp8_as_torch(fp8):
    dt, tdt = FP8[fp8]
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.ops.cast(x, dt)
        fd.add_output(y)
        fd.add_output(fd.ops.cast(y, DataType.Float))
    x = stressing((64, 1000)).cuda()
    y, back = fd.execute([x])
    assert_same_bytes(y, x.to(tdt))
    assert_same_floats(back, x.to(tdt).float())
    q = quantize_fd(dt, with_scale=True)
    xb = torch.randn(300, 1000, device="cuda").bfloat16()
    got, inv, scale = q.execute([xb])
    want, want_inv = quantize_eager(xb, tdt)
    # a CUDA kernel's fp32 division is Triton's (div.full.f32, as Inductor's): within 2 ulp of
    # eager's IEEE quotient, and a scale an ulp off moves a code across a rounding boundary
    # (449 of 300,000 on the H200). The codes are eager's of x times the kernel's own scale.
    amax = xb.float().abs().amax(1, keepdim=True).clamp(1e-12, float("inf"))
    torch.testing.assert_close(scale, torch.full_like(amax, torch.finfo(tdt).max) / amax, rtol=2.5e-7, atol=0)
    assert_same_bytes(got, (xb.float() * scale).to(tdt))
    torch.testing.assert_close(inv, want_inv, rtol=1e-6, atol=0)


# -- Null ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_null_dtype_means_none_given(op):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        i = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int32)
        y = getattr(fd.ops, op)(x, [1], dtype=DataType.Null)
        z = getattr(fd.ops, op)(i, [0], False, DataType.Null)
        fd.add_output(y)
        fd.add_output(z)
    x, i = torch.randn(5, 7).bfloat16(), torch.randint(-3, 4, (5, 7), dtype=torch.int32)
    y, z = fd.execute([x, i])
    eager = {"sum": lambda t, d: t.sum(d), "prod": lambda t, d: t.prod(d),
             "max": lambda t, d: t.amax(d), "min": lambda t, d: t.amin(d)}[op]
    torch.testing.assert_close(y, eager(x, 1), rtol=2e-2, atol=1e-2)
    assert torch.equal(z, eager(i, 0))
    assert "dtype=DataType.Null" in repr(fd)


def test_null_define_scalar_and_errors():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=DataType.Float)
        s = fd.define_scalar(2, dtype=DataType.Null)  # the value's own type, as with no dtype
        assert s.dtype is DataType.Int
        with pytest.raises(FusionDefinitionError, match="cast: DataType.Null means no dtype"):
            fd.ops.cast(x, DataType.Null)
        with pytest.raises(FusionDefinitionError, match="define_tensor: DataType.Null"):
            fd.define_tensor([-1], dtype=DataType.Null)
        with pytest.raises(FusionDefinitionError, match="full: DataType.Null"):
            fd.ops.full([2], 1.0, DataType.Null)
        fd.add_output(fd.ops.mul(x, s))
    with pytest.raises(UnsupportedError, match="DataType.Null has no torch dtype"):
        DataType.Null.to_torch()


# -- UInt64 and Index ----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_uint64_inputs_outputs_and_the_ops_torch_has(backend):
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1], contiguity=True, dtype=DataType.UInt64)
        b = fd.define_tensor([-1], contiguity=True, dtype=DataType.UInt64)
        seed = fd.define_scalar(dtype=DataType.UInt64)
        c = fd.define_tensor([-1], contiguity=True, dtype=DataType.Bool)
        outs = [fd.ops.bitwise_xor(a, b), fd.ops.bitwise_and(a, seed), fd.ops.mul(a, b), fd.ops.eq(a, b),
                fd.ops.where(c, a, b), fd.ops.cast(a, DataType.Double), fd.ops.cast(c, DataType.UInt64),
                fd.ops.set(a)]
        for o in outs:
            fd.add_output(o)
    a, b = (torch.randint(-2 ** 63, 2 ** 63 - 1, (33,)).to(torch.uint64) for _ in range(2))
    seed = 2 ** 64 - 12345  # (beyond int64: a uint64 scalar holds it)
    c = torch.rand(33) < 0.5
    got = execute(fd, [a, b, seed, c], backend)
    seed_t = torch.tensor(seed, dtype=torch.uint64)
    want = [a ^ b, a & seed_t, a * b, a == b, torch.where(c, a, b), a.double(), c.to(torch.uint64), a]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)
    assert "T0_g_uint64_t[" in str(fd.fusion)


def test_uint64_errors():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1], dtype=DataType.UInt64)
        i = fd.define_tensor([-1], dtype=DataType.Int)
        with pytest.raises(FusionDefinitionError, match="UInt64 does not promote with DataType.Int"):
            fd.ops.bitwise_or(a, i)
        s = fd.define_scalar(dtype=DataType.UInt64)
        fd.add_output(fd.ops.bitwise_or(a, s))
    with pytest.raises(FusionInputError, match="unsigned 64-bit"):
        fd.execute([torch.zeros(3, dtype=torch.uint64), torch.zeros(3, dtype=torch.int64), -1])
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1], dtype=DataType.UInt64)
        fd.add_output(fd.ops.add(a, a))
    with pytest.raises(UnsupportedError, match="add: ATen has no kernel for it on DataType.UInt64"):
        fd.execute([torch.zeros(3, dtype=torch.uint64)])  # (PyTorch has no uint64 add on the CPU)


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_is_int64(backend):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Index)
        i = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        n = fd.define_scalar(dtype=DataType.Index)
        y = fd.ops.add(fd.ops.mul(x, n), i)
        fd.add_output(y)
        fd.add_output(fd.ops.cast(y, DataType.Float))
    assert y.dtype is DataType.Index  # (nvFuser: an index computation stays one)
    assert "T0_g_nvfuser_index_t[" in str(fd.fusion)
    x, i = (torch.randint(-100, 100, (4, 9)) for _ in range(2))
    y, f = execute(fd, [x, i, 7], backend)
    assert y.dtype == torch.int64 and torch.equal(y, x * 7 + i)
    assert torch.equal(f, (x * 7 + i).float())
    assert DataType.from_torch(torch.int64) is DataType.Int


# -- packed fp4 -----------------------------------------------------------------------------------

def test_fp4_x2_passes_through_data_movement():
    x = torch.randint(0, 256, (6, 4), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.segment_set(fd.ops.permute(fd.ops.set(t), [1, 0])))
    assert t.dtype is DataType.Float4_e2m1fn_x2 and "___e2m1_x2[" in str(fd.fusion)
    (y,) = execute(fd, [x], "kernel")
    assert y.dtype == torch.float4_e2m1fn_x2
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8).t())


def test_fp4_errors_name_the_dtype():
    with FusionDefinition() as fd:
        with pytest.raises(UnsupportedError, match="DataType.Float4_e2m1fn has no torch dtype"):
            fd.define_tensor([-1], dtype=DataType.Float4_e2m1fn)
        x = fd.define_tensor([-1], dtype=DataType.Float4_e2m1fn_x2)
        for build in (lambda: fd.ops.cast(x, DataType.Float), lambda: fd.ops.add(x, x),
                      lambda: fd.ops.sum(x), lambda: fd.ops.neg(x)):
            with pytest.raises(UnsupportedError, match="Float4_e2m1fn_x2 values, which can only be moved"):
                build()
        y = fd.define_tensor([-1], dtype=DataType.Float)
        with pytest.raises(UnsupportedError, match="cannot convert values to DataType.Float4_e2m1fn_x2"):
            fd.ops.cast(y, DataType.Float4_e2m1fn_x2)
        fd.add_output(fd.ops.set(x))


def test_from_torch_knows_every_torch_dtype_of_a_datatype():
    for dt in DataType:
        if dt.value[1] is None:
            continue
        back = DataType.from_torch(dt.to_torch())
        assert back is (DataType.Int if dt is DataType.Index else dt)

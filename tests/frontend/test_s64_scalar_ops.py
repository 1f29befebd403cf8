"""Scalar overloads of nvFuser's ops (nvfuser_direct binds one for every unary op, clamp, lerp,
threshold, addcmul, where and cast): a scalar operand gives a Scalar of the definition, usable
by tensor ops. Each value is checked against eager's op on a 0-dim float64 tensor, for scalars
bound at execution and for known ones (folded at definition), on fresh random values and on
nan, inf and signed zeros."""
import math

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition

NAN, INF = float("nan"), float("inf")
SPECIAL = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN]

def _erfcinv(x):
    return -torch.special.ndtri(x / 2) * math.sqrt(0.5)  # (eager has none; evaluate/aten.py's)


UNARY = {"relu": torch.relu, "sign": torch.sign, "frac": torch.frac, "silu": F.silu,
         "erfinv": torch.erfinv, "erfcinv": _erfcinv, "isreal": torch.isreal}


def _values(name):
    """Fresh random values over the op's interesting range, then the special ones."""
    x = torch.rand(6, dtype=torch.float64)
    x = x * 2 - 1 if name == "erfinv" else x * 2 if name == "erfcinv" else x * 8 - 4
    return x.tolist() + SPECIAL + ([1e-300, 2.0 - 1e-16, 1e-30] if name == "erfcinv" else [])


def _scalars_to_tensor(build, values, dtype=DataType.Double):
    """Each value as a scalar input and as a known constant, `build` of each, its result cast
    to Double and added to a tensor: (that tensor, the outputs less it, the results)."""
    t = torch.rand(2, dtype=torch.float64) + 0.5
    with FusionDefinition() as fd:
        tv = fd.from_pytorch(t)
        inputs = [fd.define_scalar(dtype=dtype) for _ in values]
        known = [fd.define_scalar(v, dtype=dtype) for v in values]
        results = [build(fd, s) for s in inputs + known]
        for s in results:
            fd.add_output(fd.ops.add(tv, fd.ops.cast(s, DataType.Double)))
    outs = fd.execute([t] + list(values))
    return [o - t for o in outs], results


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_of_a_double_scalar_is_eagers(name):
    values = _values(name)
    got, results = _scalars_to_tensor(lambda fd, s: getattr(fd.ops, name)(s), values)
    want = [UNARY[name](torch.tensor(v, dtype=torch.float64)).double() for v in values] * 2
    for g, w, v in zip(got, want, values * 2):
        # (t + r - t: r to within an ulp of t; erfcinv of a subnormal has few bits to invert)
        torch.testing.assert_close(g, w.expand(2), equal_nan=True, atol=1e-15, rtol=1e-13,
                                   msg=lambda m: f"{name}({v}): {m}")
    assert all(r.dtype is (DataType.Bool if name == "isreal" else DataType.Double) for r in results)
    assert all(r.is_constant for r in results[len(values):])  # (known operands fold)


def test_unary_of_int_and_bool_scalars_keeps_eagers_types():
    """relu and sign of an Int stay Int, sign of a Bool stays Bool, silu of an Int is a Double
    (nvFuser's float type of scalars: eager's silu refuses a Long, fuser's of an Int tensor is a
    Float); relu of a Bool and frac of an Int are refused, as eager."""
    values = torch.randint(-5, 6, (4,)).tolist()
    for name, want_dtype in (("relu", DataType.Int), ("sign", DataType.Int), ("silu", DataType.Double)):
        got, results = _scalars_to_tensor(lambda fd, s: getattr(fd.ops, name)(s), values, DataType.Int)
        for g, v in zip(got, values * 2):
            want = F.silu(torch.tensor(v, dtype=torch.float64)) if name == "silu" else \
                getattr(torch, name)(torch.tensor(v)).double()
            torch.testing.assert_close(g, want.expand(2))
        assert all(r.dtype is want_dtype for r in results)
    with FusionDefinition() as fd:
        b = fd.define_scalar(True, dtype=DataType.Bool)
        s = fd.ops.sign(b)
        assert (s.dtype, s.value) == (DataType.Bool, True)
        with pytest.raises(fuser.FusionDefinitionError, match="relu: not defined for bool scalar"):
            fd.ops.relu(b)
        with pytest.raises(fuser.FusionDefinitionError, match="frac: needs a floating scalar, got DataType.Int"):
            fd.ops.frac(fd.define_scalar(dtype=DataType.Int))
        fd.add_output(fd.from_pytorch(torch.ones(1)))


def test_complex_scalars_give_their_magnitude_and_classes():
    z = complex(*torch.randn(2).tolist())
    zs = [z, complex(1.5, 0.0), complex(NAN, 0.0), complex(INF, 1.0), complex(0.0, NAN)]
    t = torch.rand(2, dtype=torch.float64)
    with FusionDefinition() as fd:
        tv = fd.from_pytorch(t)
        results = []
        for v in zs:
            for s in (fd.define_scalar(dtype=DataType.ComplexDouble), fd.define_scalar(v, dtype=DataType.ComplexDouble)):
                results += [fd.ops.abs(s), fd.ops.isreal(s), fd.ops.isnan(s), fd.ops.isinf(s), fd.ops.isfinite(s)]
        for r in results:
            fd.add_output(fd.ops.add(tv, fd.ops.cast(r, DataType.Double)))
        with pytest.raises(fuser.UnsupportedError, match="exp of a DataType.ComplexDouble scalar"):
            fd.ops.exp(fd.define_scalar(z, dtype=DataType.ComplexDouble))
    got = fd.execute([t] + zs)
    assert [r.dtype for r in results[:5]] == [DataType.Double] + [DataType.Bool] * 4
    for k, v in enumerate(zs):
        c = torch.tensor(v, dtype=torch.complex128)
        want = [torch.abs(c), torch.isreal(c), torch.isnan(c), torch.isinf(c), torch.isfinite(c)] * 2
        for g, w in zip(got[10 * k:10 * k + 10], want):
            torch.testing.assert_close(g - t, w.double().expand(2), equal_nan=True)


def test_clamp_and_lerp_of_scalars_are_eagers():
    """Int beside Double promotes to Double (nvFuser's scalar types); nan in any operand of clamp
    gives nan, and bounds out of order give the upper one, as eager's."""
    r = torch.randn(9, dtype=torch.float64).tolist()
    clamps = [(r[0], r[1], r[1] + 1.0), (r[2], r[3] + 1.0, r[3]), (NAN, 0.0, 1.0), (2.0, NAN, 3.0), (-INF, -1.0, 1.0)]
    lerps = [(r[4], r[5], r[6]), (r[4], r[5], 0.75), (r[7], r[8], NAN), (1.0, INF, 0.25)]
    t = torch.rand(2, dtype=torch.float64)
    with FusionDefinition() as fd:
        tv = fd.from_pytorch(t)
        results = []
        for op, cases in (("clamp", clamps), ("lerp", lerps)):
            for case in cases:
                for known in (False, True):
                    ss = [fd.define_scalar(v if known else None, dtype=DataType.Double) for v in case]
                    results.append(getattr(fd.ops, op)(*ss))
        mixed = fd.ops.clamp(fd.define_scalar(dtype=DataType.Int), 0.5, 2)
        for s in results + [mixed]:
            fd.add_output(fd.ops.add(tv, s))
        with pytest.raises(fuser.FusionDefinitionError, match="lerp: needs floating operands"):
            fd.ops.lerp(fd.define_scalar(1), fd.define_scalar(2), fd.define_scalar(0))
    inputs = [v for cases in (clamps, lerps) for case in cases for v in case] + [3]
    got = fd.execute([t] + inputs)
    T = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    want = [torch.clamp(T(x), T(lo), T(hi)) for x, lo, hi in clamps for _ in (0, 1)]
    want += [torch.lerp(T(a), T(b), T(w)) for a, b, w in lerps for _ in (0, 1)] + [T(2.0)]
    for g, w in zip(got, want):
        torch.testing.assert_close(g - t, w.expand(2), equal_nan=True)
    assert mixed.dtype is DataType.Double


def test_ops_of_python_numbers_alone_are_constants_of_the_definition():
    """nvFuser's fd.ops.exp(0.5), cast(2.5, Int), add(1.5, 2), where(True, 1.0, 2.0): constants of
    the definition whose fd.ops was called."""
    x = torch.randn(3, dtype=torch.float64)
    with FusionDefinition() as fd:
        tv = fd.from_pytorch(x)
        e, i, a, w = fd.ops.exp(0.5), fd.ops.cast(2.5, DataType.Int), fd.ops.add(1.5, 2), fd.ops.where(True, 1.0, 2.0)
        for s in (e, i, a, w):
            fd.add_output(fd.ops.mul(tv, s))
    assert [(s.dtype, s.value) for s in (e, i, a, w)] == [
        (DataType.Double, math.exp(0.5)), (DataType.Int, 2), (DataType.Double, 3.5), (DataType.Double, 1.0)]
    for g, v in zip(fd.execute([x]), (math.exp(0.5), 2, 3.5, 1.0)):
        torch.testing.assert_close(g, x * v)
    with pytest.raises(fuser.FusionDefinitionError, match="exp: needs at least one tensor or defined scalar"):
        fuser.ops.OPS["exp"](0.5)  # (outside any definition's fd.ops: no fusion to hold it)


def test_threshold_addcmul_real_imag_and_set_of_scalars():
    v, th, fill, z = torch.randn(4, dtype=torch.float64).tolist()
    zc = complex(z, v)
    x = torch.rand(2, dtype=torch.float64)
    with FusionDefinition() as fd:
        tv = fd.from_pytorch(x)
        s, c = fd.define_scalar(dtype=DataType.Double), fd.define_scalar(dtype=DataType.ComplexDouble)
        results = [fd.ops.threshold(s, th, fill), fd.ops.threshold(s, NAN, fill), fd.ops.addcmul(s, s, z, 0.5),
                   fd.ops.real(c), fd.ops.imag(c), fd.ops.real(s), fd.ops.set(s)]
        for r in results:
            fd.add_output(fd.ops.add(tv, r))
    T = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    want = [F.threshold(T(v), th, fill), F.threshold(T(v), NAN, fill), torch.addcmul(T(v), T(v), T(z), value=0.5),
            T(zc.real), T(zc.imag), T(v), T(v)]
    for g, w in zip(fd.execute([x, v, zc]), want):
        torch.testing.assert_close(g - x, w.expand(2), equal_nan=True)


def test_set_of_a_python_number_is_a_constant_of_the_definition():
    x = torch.randn(3, dtype=torch.float64)
    with FusionDefinition() as fd:
        tv = fd.from_pytorch(x)
        s = fd.ops.set(2.5)
        fd.add_output(fd.ops.mul(tv, s))
    assert (s.dtype, s.value) == (DataType.Double, 2.5)
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x * 2.5)

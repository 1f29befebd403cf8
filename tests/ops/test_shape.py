"""Data-movement ops against eager PyTorch: broadcast_in_dim, broadcast, expand, squeeze,
reshape, permute, slice, pad, cat, set, segment_set, full, iota."""
import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from tests.helpers import assert_eager, cases, make, run, run_and_check

f32, bf16, i64, b8 = torch.float32, torch.bfloat16, torch.int64, torch.bool
BACKENDS = ["aten", "kernel"]

# -- broadcast_in_dim --------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_in_dim_shape_from_tv_shape(backend):
    """The canonical form: the output shape taken from another tensor's tv.shape()."""
    v, y = make((5,)), make((2, 3, 5))
    run_and_check(lambda fd, a, b: fd.ops.add(fd.ops.broadcast_in_dim(a, b.shape(), [2]), b),
                  lambda a, b: a.expand(2, 3, 5) + b, [v, y], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_in_dim_static_shape_middle_dim(backend):
    x = make((3, 5))
    run_and_check(lambda fd, a: fd.ops.broadcast_in_dim(a, [3, 4, 5], [0, 2]),
                  lambda a: a.unsqueeze(1).expand(3, 4, 5), [x], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_in_dim_expands_size1_input(backend):
    x = make((1, 5))  # declared [1, -1]: its broadcast dim expands to 4
    run_and_check(lambda fd, a: fd.ops.broadcast_in_dim(a, [4, 5], [0, 1]), lambda a: a.expand(4, 5), [x],
                  backend=backend)


def test_broadcast_in_dim_rejects_bad_dims():
    # whatever the shadowing bug above does, a wrong broadcast_dims is a FusionDefinitionError
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        with pytest.raises(fuser.FusionDefinitionError):
            fd.ops.broadcast_in_dim(x, [3, 4, 5], [0])
        fd.add_output(x)


# -- broadcast, expand, squeeze ----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_then_binary(backend):
    x, y = make((3, 5)), make((2, 3, 5))
    run_and_check(lambda fd, a, b: [fd.ops.broadcast(a, [False, True, False, True]),
                                    fd.ops.add(fd.ops.broadcast(a, [True, False, False]), b)],
                  lambda a, b: [a[:, None, :, None], a[None] + b], [x, y], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_static_and_from_shape(backend):
    o, x = make((1, 5)), make((3, 5))
    run_and_check(lambda fd, a, b: [fd.ops.expand(a, [3, 5]), fd.ops.add(fd.ops.expand(a, b.shape()), b)],
                  lambda a, b: [a.expand(3, 5), a.expand(3, 5) + b], [o, x], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_keeps_minus_one_dims(backend):
    o = make((4, 1))
    run_and_check(lambda fd, a: fd.ops.expand(a, [-1, 6]), lambda a: a.expand(-1, 6), [o], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_squeeze(backend):
    a, b = make((3, 1, 5)), make((1, 3, 1))
    run_and_check(lambda fd, x, y: [fd.ops.squeeze(x, [1]), fd.ops.squeeze(x, [-2]), fd.ops.squeeze(y, [0, 2])],
                  lambda x, y: [x.squeeze(1), x.squeeze(-2), y.squeeze((0, 2))], [a, b], backend=backend)


def test_squeeze_of_symbolic_dim_rejects_size_other_than_1():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.squeeze(x, [1]))
    (out,) = fd.execute([make((3, 1))])
    assert out.shape == (3,)
    with pytest.raises(fuser.FusionInputError, match="input 0"):
        fd.execute([make((3, 4))])


# -- reshape, permute --------------------------------------------------------------------------

RESHAPES = [  # (id, input shape, builder of new shape from the input tv, eager shape)
    ("merge", (2, 3, 5), lambda t: [6, 5], (6, 5)),
    ("minus1", (2, 3, 5), lambda t: [-1, 5], (-1, 5)),
    ("split", (6, 5), lambda t: [3, 2, 5], (3, 2, 5)),
    ("flatten", (2, 3, 5), lambda t: [-1], (-1,)),
    ("symbolic", (2, 3, 5), lambda t: [t.shape()[0], -1], (2, 15)),
    ("swap-symbolic", (3, 5), lambda t: [t.shape()[1], t.shape()[0]], (5, 3)),
    ("size0", (0, 5), lambda t: [5, 0], (5, 0)),
    ("to-size1", (3, 5), lambda t: [1, 15], (1, 15)),
]


@pytest.mark.parametrize("shape,new,eager,backend", cases([pytest.param(*r[1:], id=r[0]) for r in RESHAPES]))
def test_reshape(shape, new, eager, backend):
    x = make(shape)
    run_and_check(lambda fd, t: fd.ops.reshape(t, new(t)), lambda t: t.reshape(eager), [x], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_noncontiguous_input(backend):
    u = make((3, 4, 2)).permute(2, 0, 1)  # [2, 3, 4], strides (1, 8, 2)
    run_and_check(lambda fd, t: fd.ops.reshape(t, [6, 4]), lambda t: t.reshape(6, 4), [u],
                  decl=[{"stride_order": [0, 2, 1]}], backend=backend)


def test_reshape_of_symbolic_extents_is_exact_and_cheap(monkeypatch):
    """Attention's head split and merge on symbolic [b, s, h * d]: the element counts match as
    written (no constraint for binding to check), found without sympy.simplify (milliseconds a
    reshape, once most of a model's lowering time)."""
    import sympy

    def refuse(*_):
        raise AssertionError("sympy.simplify on the definition path")
    monkeypatch.setattr(sympy, "simplify", refuse)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True)
        b, s, hd = x.shape()
        heads = fd.ops.reshape(x, [b, s, 4, -1])          # [b, s, 4, hd / 4]
        merged = fd.ops.reshape(heads, [fd.ops.mul(b, s), -1])  # [b * s, hd]
        fd.add_output(fd.ops.add(merged, 1.0))
    assert fd.fusion.constraints == []
    x = make((2, 3, 8))
    torch.testing.assert_close(fd.execute([x])[0], x.reshape(6, 8) + 1.0)

def test_reshape_with_wrong_element_count_is_a_user_error():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.reshape(x, [-1, 2]))
    assert fd.execute([make((3, 4))])[0].shape == (6, 2)
    with pytest.raises(fuser.FusionInputError):
        fd.execute([make((3, 5))])


@pytest.mark.parametrize("dims,backend", cases([([2, 0, 1],), ([-1, 0, 1],), ([0, 1, 2],), ([1, 0, 2],)]))
def test_permute(dims, backend):
    x = make((2, 3, 4))
    run_and_check(lambda fd, t: fd.ops.permute(t, dims), lambda t: t.permute(dims), [x], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_permute_of_transposed_input_then_add(backend):
    a, b = make((5, 3)).t(), make((5, 3))
    run_and_check(lambda fd, x, y: fd.ops.add(fd.ops.permute(x, [1, 0]), y), lambda x, y: x.t() + y, [a, b],
                  decl=[{"stride_order": [0, 1]}, None], backend=backend)


# -- slice -----------------------------------------------------------------------------------

SLICES = [  # (id, input shape, start, end, strides or None, eager index)
    ("basic", (2, 3, 5), [0, 1, 0], [2, 3, 5], None, (slice(0, 2), slice(1, 3), slice(0, 5))),
    ("step", (2, 3, 5), [0, 1, 0], [2, 3, 5], [1, 1, 2], (slice(0, 2), slice(1, 3), slice(0, 5, 2))),
    ("negative", (3, 5), [-2, 1], [3, -1], None, (slice(-2, 3), slice(1, -1))),
    ("past-end", (3, 5), [0, 2], [10, 2], None, (slice(0, 10), slice(2, 2))),
    ("reversed-empty", (3, 5), [2, 0], [1, 5], None, (slice(2, 1), slice(0, 5))),
    ("step3-odd", (3, 7), [0, 1], [3, 7], [2, 3], (slice(0, 3, 2), slice(1, 7, 3))),
]


@pytest.mark.parametrize("shape,start,end,strides,index,backend",
                         cases([pytest.param(*s[1:], id=s[0]) for s in SLICES]))
def test_slice(shape, start, end, strides, index, backend):
    x = make(shape)
    run_and_check(lambda fd, t: fd.ops.slice(t, start, end, strides), lambda t: t[index], [x], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_with_symbolic_end(backend):
    x = make((4, 6))
    run_and_check(lambda fd, t: fd.ops.slice(t, [1, 0], [t.shape()[0], t.shape()[1]]), lambda t: t[1:, :], [x],
                  backend=backend)


@pytest.mark.parametrize("start,end", [(1, 3), (0, 4), (2, 10), (3, 1)])
def test_slice_with_defined_scalar_bounds(start, end):
    x = make((4, 6))

    def build(fd, t, a, b):
        return fd.ops.slice(t, [a, 0], [b, t.shape()[1]])

    fd, (out,) = run(build, [x, start, end], decl=[None, {"dtype": DataType.Int}, {"dtype": DataType.Int}])
    assert_eager(out, x[start:end])


def test_slice_with_negative_defined_scalar_start():
    x = make((4, 6))

    def build(fd, t, a, b):
        return fd.ops.slice(t, [a, 0], [b, t.shape()[1]])

    fd, (out,) = run(build, [x, -3, 3], decl=[None, {"dtype": DataType.Int}, {"dtype": DataType.Int}])
    assert_eager(out, x[-3:3])


# -- pad, cat --------------------------------------------------------------------------------

PADS = [  # (id, shape, dtype, widths, value)
    ("last", (3, 5), f32, [1, 2], None),
    ("two-dims-value", (3, 5), f32, [1, 2, 0, 3], 1.5),
    ("int", (3, 5), i64, [1, 1], 7),
    ("bf16", (3, 5), bf16, [2, 0], None),
    ("size0", (0, 5), f32, [1, 1, 2, 0], 0.5),
    ("bool", (2, 3), b8, [1, 0], True),
]


@pytest.mark.parametrize("shape,dtype,widths,value,backend", cases([pytest.param(*p[1:], id=p[0]) for p in PADS]))
def test_pad(shape, dtype, widths, value, backend):
    x = make(shape, dtype)
    build = (lambda fd, t: fd.ops.pad(t, widths)) if value is None else (lambda fd, t: fd.ops.pad(t, widths, value))
    run_and_check(build, lambda t: F.pad(t, widths, value=0 if value is None else value), [x], backend=backend)


CATS = [  # (id, shapes, dtypes, dim)
    ("dim0", [(3, 5), (2, 5)], [f32, f32], 0),
    ("dim-1", [(2, 3, 5), (2, 3, 2)], [f32, f32], -1),
    ("three", [(3, 1), (3, 4), (3, 2)], [f32, f32, f32], 1),
    ("mixed-dtypes", [(3, 5), (3, 2)], [f32, i64], 1),
    ("bf16-f16", [(2, 3), (1, 3)], [bf16, torch.float16], 0),
    ("with-size0", [(3, 5), (3, 0)], [f32, f32], 1),
]


@pytest.mark.parametrize("shapes,dtypes,dim,backend", cases([pytest.param(*c[1:], id=c[0]) for c in CATS]))
def test_cat(shapes, dtypes, dim, backend):
    xs = [make(s, d) for s, d in zip(shapes, dtypes)]
    run_and_check(lambda fd, *ts: fd.ops.cat(list(ts), dim), lambda *ts: torch.cat(ts, dim), xs,
                  decl=[{"size1_broadcast": False}] * len(xs), backend=backend)


# -- set, segment_set --------------------------------------------------------------------------

@pytest.mark.parametrize("op,backend", cases([("set",), ("segment_set",)]))
def test_set_copies(op, backend):
    x = make((3, 5))
    fd, (out,) = run_and_check(lambda fd, t: fd.ops.exp(getattr(fd.ops, op)(t)), torch.exp, [x], backend=backend)
    fd2, (copy,) = run(lambda fd, t: getattr(fd.ops, op)(t), [x], backend=backend)
    assert_eager(copy, x)
    copy.add_(1.0)  # the output is a copy: writing it leaves the input alone
    assert not torch.equal(copy, x)


# -- full, iota ------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_full(backend):
    x = make((3, 5))
    run_and_check(lambda fd, t: [fd.ops.full([2, 3], 7, DataType.Int), fd.ops.full([2, 3], 1.5, DataType.BFloat16),
                                 fd.ops.add(fd.ops.full(t.shape(), 2.5, DataType.Float), t),
                                 fd.ops.full([0, 3], True, DataType.Bool)],
                  lambda t: [torch.full((2, 3), 7), torch.full((2, 3), 1.5, dtype=bf16), torch.full((3, 5), 2.5) + t,
                             torch.full((0, 3), True)], [x], backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_iota(backend):
    x = make((3, 5))
    run_and_check(lambda fd, t: [fd.ops.iota(5), fd.ops.iota(5, 2, 3, DataType.Int),
                                 fd.ops.iota(4, 1.0, 0.5, DataType.Float),
                                 fd.ops.add(fd.ops.iota(t.shape()[1]), t)],
                  lambda t: [torch.arange(5), torch.arange(5) * 3 + 2, torch.arange(4, dtype=f32) * 0.5 + 1.0,
                             torch.arange(5) + t], [x], backend=backend)


def test_an_iota_of_one_element_beside_rows():
    """An iota over an axis of extent 1 (broadcast against [n, 1], and triu's column iota on a
    [n, 1] input) was numbered by the index of the run its axis merged into: 5, 6, 7, 8 where
    every element is 5, and triu kept every row."""
    x = torch.randint(0, 100, (4, 1))
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, 1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.add(t, fd.ops.broadcast(fd.ops.iota(1, 5, 1, DataType.Int), [True, False])))
    assert torch.equal(fd.execute([x])[0], x + 5)
    y = make((4, 1))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.triu(fd.define_tensor([-1, -1], contiguity=True)))
    assert_eager(fd.execute([y])[0], torch.triu(y))


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_and_iota_from_defined_scalars(backend):
    def build(fd, n, v):
        return [fd.ops.iota(n, 0, 1, DataType.Int), fd.ops.full([n, 2], v, DataType.Float)]

    for n, v in ((5, 1.5), (3, -2.0)):
        fd, (a, b) = run(build, [n, v], decl=[{"dtype": DataType.Int}, {"dtype": DataType.Double}], backend=backend)
        assert_eager(a, torch.arange(n))
        assert_eager(b, torch.full((n, 2), v))


def test_reshape_infers_minus_one_in_factored_form():
    """The -1 of a reshape is the exact quotient of the element counts, factored as the IR
    prints it (`b * (a + 1)`, not `a * b + b`)."""
    import sympy

    from fuser.ops.shape import _quotient

    a, b, c = sympy.symbols("a b c", integer=True, positive=True)
    assert _quotient(a * b * c, a * b) == c
    assert _quotient(2 * b * (a + 1), 2) == b * (a + 1)
    assert str(_quotient(2 * b * (a + 1), 2)) == "b*(a + 1)"
    assert _quotient(a * b * (a + 1) * (a + 2), (a + 1) * (a + 2)) == a * b


def test_pad_widths_from_scalars_of_known_value():
    """nvFuser's definitions compute pad widths from defined constants (`cast(mul(2.5, 7))`)."""
    x = make((1, 2, 3))
    with FusionDefinition() as fd:
        t0 = fd.from_pytorch(x)
        w = fd.ops.cast(fd.ops.mul(fd.define_scalar(2.5, dtype=DataType.Float),
                                   fd.define_scalar(7, dtype=DataType.Int)), dtype=DataType.Int)
        fd.add_output(fd.ops.pad(t0, [w, 1, w, 0]))
    assert torch.equal(fd.execute([x])[0], torch.nn.functional.pad(x, [17, 1, 17, 0]))
    with pytest.raises(fuser.FusionDefinitionError, match="known value"):
        with FusionDefinition() as fd:
            t0 = fd.from_pytorch(x)
            fd.add_output(fd.ops.pad(t0, [fd.define_scalar(dtype=DataType.Int), 0]))


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_reshape_to_a_size_one_axis_makes_a_broadcast(backend):
    """nvFuser's reshape makes a size-1 entry a broadcast axis, which broadcast_in_dim may then
    expand (a definition Thunder generates: reshape to [3, 4, 1], broadcast to [3, 4, 5])."""
    x, y = make((3, 4)), make((3, 4, 5))

    def build(fd, a, b):
        r = fd.ops.reshape(a, [3, 4, 1])
        return fd.ops.mul(fd.ops.broadcast_in_dim(r, [3, 4, 5], [0, 1, 2]), b)

    run_and_check(build, lambda a, b: a.unsqueeze(-1) * b, [x, y], backend=backend)


@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_squeeze_expanded(backend):
    """nvFuser's squeeze(t, dims, squeeze_expanded=True) squeezes an expanded broadcast (one
    value repeated along it); without it, that is a definition error."""
    x = make((3, 1, 5))

    def build(fd, a):
        e = fd.ops.expand(a, [3, 4, 5])
        return fd.ops.exp(fd.ops.squeeze(e, [1], squeeze_expanded=True))

    run_and_check(build, lambda a: a.squeeze(1).exp(), [x], backend=backend)
    with pytest.raises(fuser.FusionDefinitionError, match="squeeze_expanded"):
        with FusionDefinition() as fd:
            a = fd.from_pytorch(x)
            fd.add_output(fd.ops.squeeze(fd.ops.expand(a, [3, 4, 5]), [1]))


@pytest.mark.parametrize("widths", [[-1, -1, -1, -1, 0, 0, 0, 0], [2, -1], [-2, 3, 1, -1]])
@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_negative_pad_widths_crop(widths, backend):
    """A negative pad width removes elements from that side, as F.pad and nvFuser's pad do."""
    x = make((2, 3, 5, 6))
    run_and_check(lambda fd, t: fd.ops.pad(t, widths, 0.5), lambda t: F.pad(t, widths, value=0.5),
                  [x], backend=backend)


def test_crop_beyond_a_static_axis_is_a_definition_error():
    with pytest.raises(fuser.FusionDefinitionError, match="crop 7 elements"):
        with FusionDefinition() as fd:
            t = fd.define_tensor([2, 5], contiguity=True)
            fd.add_output(fd.ops.pad(t, [-3, -4]))


@pytest.mark.parametrize("value, dtype", [(2**40, DataType.Int32), (1e30, DataType.Int), (float("nan"), DataType.Int),
                                          (-2**31 - 1, DataType.Int32)])
@pytest.mark.parametrize("op", ["full", "pad"])
def test_a_known_fill_value_past_its_integer_type_is_refused(value, dtype, op):
    """As eager's torch.full and F.pad refuse it: a kernel wrapped 2**40 into an Int32 as 0, and
    a NaN or 1e30 raised the interpreter's raw error."""
    with pytest.raises(fuser.FusionDefinitionError, match=f"{op}: the fill value"):
        with FusionDefinition() as fd:
            if op == "full":
                fd.add_output(fd.ops.full([3], fd.define_scalar(value), dtype))
            else:
                t = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dtype)
                fd.add_output(fd.ops.pad(t, [1, 1], fd.define_scalar(value)))

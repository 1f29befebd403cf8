"""Bad inputs: each raises the right FusionInputError naming the input index with expected and
actual values, before any work, on a fresh definition and on one that already ran (a cached
runtime and a precompiled binder); the same definition still runs correctly afterwards."""
import re

import pytest
import torch

import fuser
from fuser import DataType, FusionDefinition
from fuser.evaluate import bind_inputs
from tests.helpers import assert_eager, make


def add_fd():
    """out = a + b * s with a: [-1, -1], b: [-1, 5], s an Int. The add makes a's extents i0 and
    5 (unified with b's), so b's first axis is a's i0."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, 5], contiguity=True)
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(a, fd.ops.mul(b, s)))
    return fd


def good():
    return [make((3, 5)), make((3, 5)), 3]


def check_still_works(fd):
    a, b, s = good()
    assert_eager(fd.execute([a, b, s])[0], a + b * s)


BAD = [  # (id, make the bad argument list, error class, regexes the message must match)
    ("too-few", lambda: good()[:2], fuser.FusionInputError, [r"3 inputs", r"got 2"]),
    ("too-many", lambda: good() + [1], fuser.FusionInputError, [r"3 inputs", r"got 4"]),
    ("not-a-list", lambda: make((3, 5)), fuser.FusionInputError, [r"list", r"Tensor"]),
    ("non-tensor", lambda: [make((3, 5)), 3.0, 3], fuser.FusionInputError,
     [r"input 1\b", r"expected a tensor", r"float"]),
    ("nested-list", lambda: [make((3, 5)), [[1.0] * 5] * 3, 3], fuser.FusionInputError,
     [r"input 1\b", r"expected a tensor", r"list"]),
    ("wrong-rank", lambda: [make((3, 5)), make((3, 5, 1)), 3], fuser.FusionInputError,
     [r"input 1\b", r"2-D", r"3-D"]),
    ("wrong-rank-0dim", lambda: [make(()), make((3, 5)), 3], fuser.FusionInputError,
     [r"input 0\b", r"2-D", r"0-D"]),
    ("wrong-dtype", lambda: [make((3, 5)), make((3, 5), torch.float64), 3], fuser.FusionInputError,
     [r"input 1\b", r"float32", r"float64"]),
    ("wrong-dtype-bf16", lambda: [make((3, 5), torch.bfloat16), make((3, 5)), 3], fuser.FusionInputError,
     [r"input 0\b", r"float32", r"bfloat16"]),
    ("static-extent", lambda: [make((3, 4)), make((3, 4)), 3], fuser.FusionInputError,
     [r"input 0\b", r"axis 1", r"size 4", r"declares 5"]),
    ("static-extent-second", lambda: [make((3, 5)), make((3, 6)), 3], fuser.FusionInputError,
     [r"input 1\b", r"axis 1", r"size 6", r"declares 5"]),
    ("extent-conflict", lambda: [make((3, 5)), make((4, 5)), 3], fuser.ExtentConflictError,
     [r"\bi0\b", r"\b3\b", r"\b4\b", r"input 0\b", r"input 1\b"]),
    # (a strided nested tensor: Dynamo's check of a ready call's layout ended the process)
    ("nested", lambda: [torch.nested.nested_tensor([make((3,)), make((5,))]), make((3, 5)), 3],
     fuser.FusionInputError, [r"input 0\b", r"nested tensor"]),
    ("meta-device", lambda: [make((3, 5)), torch.empty(3, 5, device="meta"), 3], fuser.FusionInputError,
     [r"input 1\b", r"meta", r"cpu"]),
    ("not-contiguous", lambda: [make((3, 5)), make((5, 3)).t(), 3], fuser.FusionInputError,
     [r"input 1\b", r"contiguous", r"stride 1", r"got 3"]),
    ("strided-slice", lambda: [make((3, 10))[:, ::2], make((3, 5)), 3], fuser.FusionInputError,
     [r"input 0\b", r"contiguous", r"got 2"]),
    ("scalar-type", lambda: [make((3, 5)), make((3, 5)), "x"], fuser.FusionInputError,
     [r"input 2\b", r"Int", r"str"]),
    ("tensor-for-scalar", lambda: [make((3, 5)), make((3, 5)), make((3,))], fuser.FusionInputError,
     [r"input 2\b", r"Int", r"Tensor"]),
]


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "after-a-run"])
@pytest.mark.parametrize("bad,error,patterns", [pytest.param(*b[1:], id=b[0]) for b in BAD])
def test_bad_input(bad, error, patterns, warm):
    fd = add_fd()
    if warm:
        check_still_works(fd)
    with pytest.raises(error) as info:
        fd.execute(bad())
    for p in patterns:
        assert re.search(p, str(info.value)), f"{p!r} not in: {info.value}"
    check_still_works(fd)


@pytest.mark.parametrize("sizes,symbol,first,second", [
    (((3, 5), (3, 5), (4, 5)), "i0", "input 0", "input 2"),
    (((3, 5), (3, 6), (3, 5)), "i1", "input 0", "input 1"),
    (((3, 5), (3, 5), (3, 4)), "i1", "input 0", "input 2"),
])
def test_extent_conflict_names_symbol_values_and_inputs(sizes, symbol, first, second):
    with FusionDefinition() as fd:
        ts = [fd.define_tensor([-1, -1], contiguity=True) for _ in range(3)]
        fd.add_output(fd.ops.add(fd.ops.mul(ts[0], ts[1]), ts[2]))
    args = [make(s) for s in sizes]
    with pytest.raises(fuser.ExtentConflictError) as info:
        fd.execute(args)
    msg = str(info.value)
    for p in (rf"\b{symbol}\b", rf"{first}\b", rf"{second}\b"):
        assert re.search(p, msg), f"{p!r} not in: {msg}"
    axis = 0 if symbol == "i0" else 1
    for v in {size[axis] for size in sizes}:
        assert re.search(rf"\b{v}\b", msg), f"value {v} not in: {msg}"
    good_args = [make((3, 5)) for _ in range(3)]
    torch.testing.assert_close(fd.execute(good_args)[0], good_args[0] * good_args[1] + good_args[2])


def test_extent_conflict_is_an_input_error():
    assert issubclass(fuser.ExtentConflictError, fuser.FusionInputError)
    assert issubclass(fuser.FusionInputError, fuser.FuserError)


def test_bad_input_raises_from_bind_inputs_too():
    fd = add_fd()
    with pytest.raises(fuser.ExtentConflictError, match="i0"):
        bind_inputs(fd.fusion, [make((3, 5)), make((4, 5)), 3])


def test_broadcast_declared_dim_must_be_size_1():
    with FusionDefinition() as fd:
        a = fd.define_tensor([1, -1], contiguity=True)
        fd.add_output(fd.ops.exp(a))
    with pytest.raises(fuser.FusionInputError, match=r"input 0.*axis 0.*broadcast.*size 3"):
        fd.execute([make((3, 5))])
    t = make((1, 5))
    assert_eager(fd.execute([t])[0], t.exp())


def test_conflict_with_derived_extent_names_both_inputs():
    """b's extent is i0 * i1 (a reshaped, then added to b): a wrong b names a's symbols."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.add(fd.ops.reshape(a, [-1]), b))
    x, y = make((3, 4)), make((12,))
    assert_eager(fd.execute([x, y])[0], x.reshape(-1) + y)
    with pytest.raises(fuser.ExtentConflictError) as info:
        fd.execute([x, make((11,))])
    msg = str(info.value)
    for p in (r"input 1\b", r"\b11\b", r"\b12\b", r"input 0\b", r"i0 \* i1"):
        assert re.search(p, msg), f"{p!r} not in: {msg}"


def test_conflict_between_two_derived_extents():
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.add(fd.ops.reshape(a, [-1]), fd.ops.reshape(b, [-1])))
    x, y = make((3, 4)), make((2, 6))
    assert_eager(fd.execute([x, y])[0], x.reshape(-1) + y.reshape(-1))
    with pytest.raises(fuser.ExtentConflictError) as info:
        fd.execute([x, make((2, 5))])
    msg = str(info.value)
    for p in (r"\b12\b", r"\b10\b", r"input 0\b", r"input 1\b"):
        assert re.search(p, msg), f"{p!r} not in: {msg}"


def test_size1_given_for_symbolic_extent_shared_with_a_larger_one():
    """-1 is a non-broadcast extent: a size-1 tensor against a size-3 one is a conflict (as in
    nvFuser), not an implicit broadcast."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.mul(a, b))
    with pytest.raises(fuser.ExtentConflictError, match=r"i0.*\b3\b.*\b1\b"):
        fd.execute([make((3, 5)), make((1, 5))])


def test_binding_table_is_immutable_values():
    fd = add_fd()
    table = bind_inputs(fd.fusion, good())
    assert dict(table.values) == {"i0": 3, fd.fusion.inputs()[2].expr.name: 3}  # i0, the scalar
    with pytest.raises(TypeError):
        table.values["i0"] = 7


def test_binding_table_is_immutable_sources():
    fd = add_fd()
    table = bind_inputs(fd.fusion, good())
    with pytest.raises(TypeError):
        table.sources["i0"] = "somewhere else"


# -- a scalar input whose symbol is also a tensor extent (iota(n) + x unifies n with x's size) --

def iota_plus_fd(scalar_first):
    with FusionDefinition() as fd:
        if scalar_first:
            n = fd.define_scalar(dtype=DataType.Int)
            x = fd.define_tensor([-1], contiguity=True)
        else:
            x = fd.define_tensor([-1], contiguity=True)
            n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(fd.ops.iota(n, 0, 1, DataType.Float), x))
    return fd




def _check_conflict(fd, args, backend):
    from tests.helpers import backend_env

    with backend_env(backend):
        with pytest.raises(fuser.ExtentConflictError) as info:
            fd.execute(args)
    msg = str(info.value)
    for p in (r"\bi[01]\b", r"\b4\b", r"\b5\b", r"input 0\b", r"input 1\b"):
        assert re.search(p, msg), f"{p!r} not in: {msg}"


@pytest.mark.parametrize("scalar_first", [
    pytest.param(True, id="scalar-first"),
    pytest.param(False, id="tensor-first"),
])
def test_scalar_and_tensor_disagree_when_binding(scalar_first):
    fd = iota_plus_fd(scalar_first)
    x = make((5,))
    args = [4, x] if scalar_first else [x, 4]
    with pytest.raises(fuser.ExtentConflictError) as info:
        bind_inputs(fd.fusion, args)
    for p in (r"\bi[01]\b", r"\b4\b", r"\b5\b", r"input 0\b", r"input 1\b"):
        assert re.search(p, str(info.value)), f"{p!r} not in: {info.value}"


@pytest.mark.parametrize("scalar_first", [True, False], ids=["scalar-first", "tensor-first"])
@pytest.mark.parametrize("backend", ["aten", "kernel"])
def test_scalar_and_tensor_disagree_on_execute(scalar_first, backend):
    from tests.helpers import backend_env

    fd = iota_plus_fd(scalar_first)
    x = make((5,))
    args = (lambda n: [n, x]) if scalar_first else (lambda n: [x, n])
    with backend_env(backend):
        assert_eager(fd.execute(args(5))[0], torch.arange(5.0) + x)
    _check_conflict(fd, args(4), backend)


def test_scalar_input_unified_with_a_derived_extent():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(fd.ops.iota(n, 0, 1, DataType.Float), fd.ops.reshape(x, [-1])))
    t = make((3, 4))
    assert_eager(fd.execute([t, 12])[0], torch.arange(12.0) + t.reshape(-1))
    with pytest.raises(fuser.ExtentConflictError):
        fd.execute([t, 11])


def test_a_meta_tensor_input_is_an_input_error():
    from fuser import DataType, FusionDefinition

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(x, [1]))
    with pytest.raises(fuser.FusionInputError, match="meta tensor"):
        fd.execute([torch.empty(2, 3, device="meta")])


def test_an_integer_scalar_beyond_int64_is_an_input_error():
    from fuser import DataType, FusionDefinition

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Int)
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(x, s))
    x = torch.tensor([1, 2])
    assert torch.equal(fd.execute([x, 2**62])[0], x + 2**62)
    with pytest.raises(fuser.FusionInputError, match="out of the range of a 64-bit integer"):
        fd.execute([x, 2**70])


def test_a_size_past_int64_from_a_scalar_is_an_input_error_on_every_path():
    # a Double size of 1e300 passed the fast binder (no range check) and a scalar's square
    # (non-negative, so never checked) reached torch.empty_strided: a raw TypeError
    with FusionDefinition() as fd:
        f = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.full([f], 1.0, DataType.Float))
    for _ in range(2):  # (the second call takes the fast binder)
        with pytest.raises(fuser.FusionInputError, match=r"full: size .* 64-bit integer"):
            fd.execute([1e300])
        assert fd.execute([3.0])[0].shape == (3,)
    with FusionDefinition() as fd2:
        n = fd2.define_scalar(dtype=DataType.Int)
        fd2.add_output(fd2.ops.full([fd2.ops.mul(n, n)], 1.0, DataType.Float))
    assert fd2.execute([3])[0].shape == (9,)
    with pytest.raises(fuser.FusionInputError, match=r"full: size \( i0 \* i0 \) = 1208925819614629174706176"):
        fd2.execute([2 ** 40])


def test_a_negative_reshape_size_beside_a_minus_one_names_the_reshape():
    # the divisibility check of the -1 evaluated the size first, as an unnamed "extent"
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.Float)
        n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.reshape(x, [fd.ops.sub(n, 5), -1]))
    with pytest.raises(fuser.FusionInputError, match=r"reshape: size \( i1 - 5 \) evaluates to -3"):
        fd.execute([torch.randn(6), 2])
    assert fd.execute([torch.randn(6), 7])[0].shape == (2, 3)

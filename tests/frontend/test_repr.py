"""repr(fd) is Python source that rebuilds the definition: exec'd with FusionDefinition and
DataType in scope and called on a fresh FusionDefinition, it gives the same structural hash and
the same results."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from tests.helpers import backend_env, make


def rebuild(fd):
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(repr(fd), namespace)  # noqa: S102 - the printed definition is the thing under test
    fd2 = FusionDefinition()
    with fd2:
        namespace["nvfuser_fusion"](fd2)
    return fd2


def check_roundtrip(fd, inputs):
    fd2 = rebuild(fd)
    assert fd2.fusion.structural_hash() == fd.fusion.structural_hash(), f"{fd.fusion}\n---\n{fd2.fusion}"
    assert repr(fd2) == repr(fd)
    with backend_env("aten"):  # the printed definition is under test here, not the code generator
        pairs = list(zip(fd.execute(inputs), fd2.execute(inputs)))
    assert len(pairs) == len(fd.fusion.outputs())
    for a, b in pairs:
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)


def def_pointwise():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        y = fd.define_tensor([1, -1], contiguity=True, dtype=DataType.BFloat16)
        s = fd.define_scalar(dtype=DataType.Double)
        xf, yf = fd.ops.cast(x, DataType.Float), fd.ops.cast(y, DataType.Float)
        z = fd.ops.mul(fd.ops.mul(fd.ops.add(xf, yf), s), 2.0)
        r = fd.ops.sum(z, [-1], False, DataType.Float)
        v, m = fd.ops.var_mean(xf, [1], 0, True)
        fd.add_output(fd.ops.cast(fd.ops.sub(z, fd.ops.broadcast(r, [False, True])), DataType.BFloat16))
        fd.add_output(v)
        fd.add_output(fd.ops.where(fd.ops.gt(xf, 0.0), xf, m))
    return fd, [make((3, 5), torch.bfloat16), make((1, 5), torch.bfloat16), 1.5]


def def_shapes():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True)
        r = fd.ops.reshape(x, [x.shape()[0], -1])
        p = fd.ops.permute(r, [1, 0])
        sl = fd.ops.slice(p, [1, 0], [3, 2])
        c = fd.ops.cat([fd.ops.pad(sl, [1, 1], 0.5), sl], 1)
        io = fd.ops.expand(fd.ops.broadcast(fd.ops.iota(2, 0, 1, DataType.Int), [True, False]), [2, 2])
        fd.add_output(fd.ops.add(c, fd.ops.full([2, 6], 1.0, DataType.Float)))
        fd.add_output(fd.ops.add(sl, io))
        fd.add_output(fd.ops.set(x))
        fd.add_output(fd.ops.segment_set(fd.ops.squeeze(fd.ops.sum(x, [1], True), [1])))
    return fd, [make((2, 3, 4))]


def def_attention_and_layouts():
    with FusionDefinition() as fd:
        q = fd.define_tensor([-1] * 4, contiguity=True)
        k = fd.define_tensor([-1] * 4, contiguity=True)
        v = fd.define_tensor([-1] * 4, contiguity=True)
        w = fd.define_tensor([-1, -1], contiguity=True, stride_order=[0, 1])
        b = fd.define_tensor([-1, -1], contiguity=[False, True])
        o, lse, _seed, _offset = fd.ops.sdpfa_fwd(q, k, v, None, None, 0.0, True, None)
        fd.add_output(fd.ops.linear(o, w))
        fd.add_output(lse)
        fd.add_output(fd.ops.matmul(o, fd.ops.permute(w, [1, 0])))
        fd.add_output(fd.ops.clamp(b, -0.5, 0.5))
        fd.add_output(fd.ops.lerp(b, b, 0.25))
    ins = [make((1, 2, 3, 4)), make((1, 2, 3, 4)), make((1, 2, 3, 4)), make((4, 5)).t(), make((3, 8))[:, :5]]
    return fd, ins


def def_expand_from_shape():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.define_tensor([-1], contiguity=True)
        fd.add_output(fd.ops.expand(fd.ops.broadcast(y, [True, False]), x.shape()))
        fd.add_output(fd.ops.reshape(x, [x.shape()[1], x.shape()[0]]))
    return fd, [make((3, 5)), make((5,))]


@pytest.mark.parametrize("definition", [def_pointwise, def_shapes, def_attention_and_layouts,
                                        def_expand_from_shape])
def test_repr_roundtrip(definition):
    fd, inputs = definition()
    assert repr(fd).startswith("def nvfuser_fusion(fd : FusionDefinition) -> None :\n")
    check_roundtrip(fd, inputs)


def test_repr_uses_shape_of_earlier_tensor():
    fd, _ = def_expand_from_shape()
    assert "tv0.shape()[0]" in repr(fd)


def test_repr_roundtrip_constant_defined_scalar():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        c = fd.define_scalar(2.0, dtype=DataType.Double)
        fd.add_output(fd.ops.mul(x, c))
    check_roundtrip(fd, [make((3, 5))])


def test_repr_roundtrip_derived_scalar():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True)
        n = fd.ops.mul(x.shape()[0], x.shape()[1])
        fd.add_output(fd.ops.reshape(x, [n, x.shape()[2]]))
    check_roundtrip(fd, [make((2, 3, 4))])


def test_repr_roundtrip_scheduled_definition():
    from tests.ir.test_printer import seed_definition

    fd = seed_definition()
    check_roundtrip(fd, [make((6, 8), torch.bfloat16), make((2, 8), torch.bfloat16)])


def test_repr_roundtrip_of_broadcast_in_dim():
    """broadcast_in_dim with `shape` from tv.shape() prints `tv1.shape()` and rebuilds."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True)
        y = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.add(fd.ops.broadcast_in_dim(x, y.shape(), [1]), y))
    assert "tv1.shape()" in repr(fd)
    check_roundtrip(fd, [make((5,)), make((3, 5))])


@pytest.mark.parametrize("constant", [complex(float("inf"), 1.0), complex(float("nan"), 0.0), complex(-0.0, 0.0),
                                      "numpy"])
def test_repr_roundtrip_of_complex_and_numpy_constants(constant):
    # complex's repr, `(inf+1j)`, names nothing, and `(-0+0j)` reads back as 0j; numpy's,
    # `np.float64(2.5)`, names a module the printed code lacks
    import numpy as np
    complex_input = constant != "numpy"
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True, dtype=DataType.ComplexFloat if complex_input else DataType.Float)
        fd.add_output(fd.ops.add(x, constant if complex_input else np.float64(2.5)))
    x = torch.full((2,), -0.0, dtype=torch.complex64 if complex_input else torch.float32)
    check_roundtrip(fd, [x])
    (out,) = fd.execute([x])
    (again,) = rebuild(fd).execute([x])
    real = (lambda t: torch.view_as_real(t)) if complex_input else (lambda t: t)
    assert torch.equal(torch.signbit(real(out)), torch.signbit(real(again)))


def test_an_extent_reached_twice_by_each_of_many_slices_prints_in_linear_work():
    # each slice by a scalar start holds the extent before it twice: printed as a tree, the
    # work doubled per slice (12 slices took seconds)
    from fuser.ir import symbolic
    with FusionDefinition() as fd:
        y = fd.define_tensor([-1], contiguity=True)
        for _ in range(12):
            y = fd.ops.slice(y, [fd.define_scalar(dtype=DataType.Int)], [y.size(0)])
        fd.add_output(fd.ops.exp(y))
    symbolic._fmt.cache_clear()
    str(fd.fusion)
    assert symbolic._fmt.cache_info().misses < 500


@pytest.mark.parametrize("transform", ["split", "merge"])
def test_an_axis_parallelized_then_transformed_away_from_the_loop_is_rebuilt(transform):
    """A logical axis parallelized, then split or merged out of the loop domain, keeps its
    parallel type in the rebuilt definition (found by a probe: the printed script set only the
    loop axes', so the rebuilt logical axis was serial and the structural hashes differed)."""
    from fuser import ParallelType

    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.relu(x)
        fd.add_output(y)
        y.axis(0).parallelize(ParallelType.stream)
        if transform == "split":
            y.outer_split(0, 3)
        else:
            y.merge(0, 1)
    fd2 = rebuild(fd)
    assert fd2.fusion.structural_hash() == fd.fusion.structural_hash(), f"{fd.fusion}\n---\n{fd2.fusion}"
    assert str(fd2.fusion) == str(fd.fusion)
    assert repr(fd2) == repr(fd)

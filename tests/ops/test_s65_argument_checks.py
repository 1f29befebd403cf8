"""Op arguments found by probing the definition API (sixty-fifth session): dims given as numpy
integers (refused as "out of range"), arguments of the wrong type that escaped as Python's or
sympy's raw errors, and values eager refuses that fuser took (repeated squeeze dims, a Bool
iota, broadcast flags read by their truth, sdpa's dropout_p and is_causal). Each is a
FusionDefinitionError naming the op and the argument, or runs as eager does."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fuser import DataType, FusionDefinition, FusionDefinitionError
from tests.helpers import assert_eager, make, run_and_check

ONE = np.int64(1)


# -- dims as numpy integers: taken as the ints they are ----------------------------------------

@pytest.mark.parametrize("build, reference", [
    (lambda fd, t: fd.ops.permute(t, [ONE, 0]), lambda x: x.permute(1, 0)),
    (lambda fd, t: fd.ops.cat([t, t], ONE), lambda x: torch.cat([x, x], 1)),
    (lambda fd, t: fd.ops.squeeze(fd.ops.broadcast(t, [True, False, False]), [np.int64(0)]), lambda x: x),
    (lambda fd, t: fd.ops.squeeze(fd.ops.broadcast(t, [False, np.True_, False]), np.int32(-2)), lambda x: x),
    (lambda fd, t: fd.ops.mul(t, fd.ops.size(t, ONE)), lambda x: x * 4),
    (lambda fd, t: fd.ops.cumsum(t, ONE), lambda x: x.cumsum(1)),
    (lambda fd, t: fd.ops.topk(t, 2, ONE)[0], lambda x: x.topk(2, 1)[0]),
    (lambda fd, t: fd.ops.index_select(t, fd.ops.iota(2, 0, 1, DataType.Int), ONE), lambda x: x[:, :2]),
    (lambda fd, t: fd.ops.broadcast_in_dim(t, [3, 4, 2], [np.int64(0), ONE]), lambda x: x[..., None].expand(3, 4, 2)),
    (lambda fd, t: fd.ops.stride_order(t, [np.int64(0), ONE]), lambda x: x),
], ids=["permute", "cat", "squeeze", "squeeze-int-and-np-bool", "size", "cumsum", "topk", "index_select",
        "broadcast_in_dim", "stride_order"])
def test_numpy_integer_dims_are_taken(build, reference):
    # each was refused with "dim 1 is out of range for ... with 2 dims", though it is in range
    run_and_check(build, reference, [make((3, 4))])


def test_stride_order_of_numpy_integers_lays_out_as_given():
    _, (out,) = run_and_check(lambda fd, t: fd.ops.stride_order(t, [np.int64(0), ONE]), lambda x: x,
                              [make((3, 4))])
    assert out.stride() == (1, 3)


# -- dims of other types: refused for their type ----------------------------------------------

NOT_INTS = {
    "Int scalar": lambda fd: fd.define_scalar(1, DataType.Int),
    "0-dim tensor": lambda fd: torch.tensor(1),
    "float": lambda fd: 1.0,
    "bool": lambda fd: True,
    "string": lambda fd: "1",
}
DIM_OPS = {
    "permute": lambda fd, t, d: fd.ops.permute(t, [d, 0]),
    "cat": lambda fd, t, d: fd.ops.cat([t, t], d),
    "squeeze": lambda fd, t, d: fd.ops.squeeze(fd.ops.broadcast(t, [False, True, False]), [d]),
    "size": lambda fd, t, d: fd.ops.size(t, d),
    "cumsum": lambda fd, t, d: fd.ops.cumsum(t, d),
    "topk": lambda fd, t, d: fd.ops.topk(t, 1, d),
    "index_select": lambda fd, t, d: fd.ops.index_select(t, fd.ops.iota(2, 0, 1, DataType.Int), d),
}


@pytest.mark.parametrize("what", list(NOT_INTS))
@pytest.mark.parametrize("op", list(DIM_OPS))
def test_a_dim_that_is_no_int_is_refused_for_its_type(op, what):
    # an Int scalar, a tensor or a float was reported as "dim 1 is out of range ... with 2 dims"
    with FusionDefinition() as fd:
        t = fd.define_tensor([3, 4], contiguity=True)
        with pytest.raises(FusionDefinitionError, match=rf"^{op}: dim .* must be an int, got a "):
            DIM_OPS[op](fd, t, NOT_INTS[what](fd))
        fd.add_output(fd.ops.neg(t))


def _int_scalar(fd, value):
    return fd.define_scalar(value, DataType.Int)


@pytest.mark.parametrize("build, match", [
    (lambda fd, t: fd.ops.stride_order(t, [_int_scalar(fd, 1), 0]),
     "stride_order entry 1 must be an int, got a Scalar"),
    (lambda fd, t: fd.ops.stride_order(t, [fd.define_tensor([3]), fd.define_tensor([3])]),
     "stride_order entry T1.* must be an int, got a TensorView"),
    (lambda fd, t: fd.ops.stride_order(t, [1.0, 0.0]), "stride_order entry 1.0 must be an int, got a float"),
    (lambda fd, t: fd.ops.broadcast_in_dim(t, [3, 4, 2], [None, 1]), "broadcast_dims entry None must be an int"),
    (lambda fd, t: fd.ops.broadcast_in_dim(t, [3, 4, 2], ["0", 1]), "broadcast_dims entry '0' must be an int"),
    (lambda fd, t: fd.ops.broadcast_in_dim(t, [3, 4, 2], [_int_scalar(fd, 0), 1]),
     "broadcast_dims entry 0 must be an int, got a Scalar"),
    (lambda fd, t: fd.ops.broadcast_in_dim(t, [3, 4, 2], [[0], 1]), r"broadcast_dims entry \[0\] must be an int"),
    (lambda fd, t: fd.ops.broadcast_in_dim(t, [3, 4, 2], [0.0, 1.0]), "broadcast_dims entry 0.0 must be an int"),
], ids=["stride_order-scalar", "stride_order-tensors", "stride_order-floats", "bid-None", "bid-str", "bid-scalar",
        "bid-list", "bid-floats"])
def test_order_and_broadcast_dims_of_other_types_are_refused(build, match):
    # TypeError from sorting or comparing them (or unhashable), or floats taken as ints
    with FusionDefinition() as fd:
        t = fd.define_tensor([3, 4], contiguity=True)
        with pytest.raises(FusionDefinitionError, match=match):
            build(fd, t)
        fd.add_output(fd.ops.neg(t))


# -- other arguments that escaped as raw errors -----------------------------------------------

@pytest.mark.parametrize("build, match", [
    (lambda fd: fd.ops.uniform(fd.define_scalar(True), fd.define_scalar(2, DataType.Int), [3]),
     "uniform: minval must be a real number or a real scalar, got True of DataType.Bool"),
    (lambda fd: fd.ops.normal(fd.define_scalar(True), 1.0, [3]), "normal: mean must be a real number"),
    (lambda fd: fd.ops.normal(0.0, fd.define_scalar(False), [3]), "normal: std must be a real number"),
], ids=["uniform-minval", "normal-mean", "normal-std"])
def test_a_bool_scalar_as_a_distribution_parameter_is_refused(build, match):
    # as a Python bool is: sympy's "BooleanAtom not allowed" or float()'s TypeError escaped
    with pytest.raises(FusionDefinitionError, match=match):
        build(FusionDefinition())


@pytest.mark.parametrize("index, given", [
    (lambda fd: fd.define_scalar(1.5), []), (lambda fd: fd.define_scalar(2.0), []),
    (lambda fd: fd.define_scalar(DataType.Double), [2.0]),
], ids=["constant-1.5", "constant-2.0", "input"])
def test_a_double_scalar_as_a_slice_index_is_refused(index, given):
    # as a Python 1.5 is (eager's x[1.5:] too): sympy's "not comparable" escaped, or the slice's
    # extent came out 4.5 at execution
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1], contiguity=True)
        start = index(fd)  # (an input stays one: it was defined before the refused slice)
        with pytest.raises(FusionDefinitionError, match="slice: index .* must be an int or an integer scalar, "
                                                        "got a scalar of DataType.Double"):
            fd.ops.slice(t, [start], [6])
        fd.add_output(fd.ops.slice(t, [fd.define_scalar(2, DataType.Int)], [6]))
    x = make((6,))
    assert_eager(fd.execute([x, *given])[0], x[2:])


# -- values eager refuses ---------------------------------------------------------------------

@pytest.mark.parametrize("dims", [[0, 0], [0, -3], [2, 0, -1]])
def test_squeeze_refuses_repeated_dims(dims):
    # eager: "dim 0 appears multiple times in the list of dims"; fuser squeezed once
    x = torch.randn(1, 3, 1)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        x.squeeze(tuple(dims))
    with FusionDefinition() as fd:
        t = fd.define_tensor([1, -1, 1], contiguity=[None, True, None])
        with pytest.raises(FusionDefinitionError, match=r"squeeze: repeated dims \["):
            fd.ops.squeeze(t, dims)
        fd.add_output(fd.ops.squeeze(t, [0, -1]))
    assert_eager(fd.execute([x])[0], x.squeeze((0, -1)))


def test_iota_of_bools_is_refused():
    with pytest.raises(NotImplementedError):
        torch.arange(4, dtype=torch.bool)
    with FusionDefinition() as fd:
        with pytest.raises(FusionDefinitionError, match="iota: dtype must be an integer or floating DataType, "
                                                        "got DataType.Bool"):
            fd.ops.iota(4, 0, 1, DataType.Bool)
        fd.add_output(fd.ops.iota(4, 0, 1, DataType.Int))
    assert_eager(fd.execute([])[0], torch.arange(4))


@pytest.mark.parametrize("flags", [["a", False, False, False], [None, False, False, False],
                                   [1, 0, 0, 0], [1.0, False, False, False]], ids=["str", "None", "ints", "float"])
def test_broadcast_flags_must_be_bools(flags):
    # read by their truth: "a" and 1 broadcast, None kept the dim
    with FusionDefinition() as fd:
        t = fd.define_tensor([-1, -1, -1], contiguity=True)
        with pytest.raises(FusionDefinitionError, match="broadcast: is_broadcast_dim entries must be True or False"):
            fd.ops.broadcast(t, flags)
        fd.add_output(fd.ops.broadcast(t, [np.True_, False, False, False]))
    x = make((2, 3, 4))
    assert_eager(fd.execute([x])[0], x[None])


# -- sdpfa_fwd's dropout_p and is_causal --------------------------------------------------------

def _attention(**kwargs):
    with FusionDefinition() as fd:
        ts = [fd.define_tensor([-1] * 4, contiguity=True) for _ in range(3)]
        fd.add_output(fd.ops.sdpfa_fwd(*ts, **kwargs)[0])
    return fd


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, True, 0.5j])
def test_sdpa_dropout_p_must_be_a_probability(p):
    # -0.1 was reported as "dropout_p > 0 is not supported"
    with pytest.raises(FusionDefinitionError, match=r"sdpfa_fwd: dropout_p must be a probability in \[0, 1\), got"):
        _attention(dropout_p=p)


@pytest.mark.parametrize("causal", [2.5, 1])
def test_sdpa_is_causal_must_be_a_bool(causal):
    # 2.5 was read as True
    with pytest.raises(FusionDefinitionError, match="sdpfa_fwd: "):
        _attention(is_causal=causal)


@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_with_valid_flags_matches_eager(causal):
    q, k, v = make((1, 2, 3, 8)), make((1, 2, 5, 8)), make((1, 2, 5, 8))
    fd = _attention(dropout_p=0.0, is_causal=causal)
    assert_eager(fd.execute([q, k, v])[0], F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 rtol=1e-4, atol=1e-5)

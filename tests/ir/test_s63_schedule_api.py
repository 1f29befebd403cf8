"""nvfuser_direct's inspection and scheduling API as nvFuser users call it (sixty-third
session's probe): the method spellings of IterDomain and TensorView flags, parallel types kept
through split and merge, numpy integers as axes and factors, the split factor's error, and a
short repr of a segment."""
import numpy as np
import pytest

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from fuser.ir.printer import format_id
from tests.helpers import assert_eager, make


def loop(tv):
    return [format_id(d) for d in tv.get_loop_domain()]


def rebuilt(fd):
    """The definition that repr(fd) rebuilds."""
    ns = {"FusionDefinition": FusionDefinition, "DataType": DataType, "ParallelType": ParallelType}
    exec(repr(fd), ns)
    with FusionDefinition() as fd2:
        ns["nvfuser_fusion"](fd2)
    return fd2


def test_iterdomain_and_tensorview_flags_answer_nvfusers_method_calls():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 1, -1], contiguity=[True, None, True])
        s = fd.ops.sum(x, [2])
        fd.add_output(s)
    assert s.axis(2).is_reduction() is True and s.axis(0).is_reduction() is False
    assert x.axis(1).is_broadcast() is True and x.axis(0).is_broadcast() is False
    # fuser's own attribute spelling still reads as the bool
    assert s.axis(2).is_reduction and not s.axis(0).is_reduction
    assert s.axis(2).is_reduction == True and repr(x.axis(1).is_broadcast) == "True"  # noqa: E712
    assert x.has_root() is False and s.has_root() is False
    X = make((3, 1, 5))
    assert_eager(fd.execute([X])[0], X.sum(2))


def test_split_of_a_parallelized_axis_keeps_its_parallel_type_on_both_halves():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.relu(x)
        y.axis(0).parallelize(ParallelType.stream)
        y.outer_split(0, 2)
        fd.add_output(y)
    # nvFuser's IterDomain::split builds both halves with the input's parallel type
    assert loop(y) == ["istreamIdx4{2}", "istreamIdx5{( ceilDiv(i0, 2) )}", "iS3{i1}"]
    assert str(rebuilt(fd).fusion.outputs()[0]) == str(y)
    # two stream axes: the host program's clear refusal, not a silently serial run
    with pytest.raises(fuser.UnsupportedError, match="has 2 stream axes; one is supported"):
        fd.execute([make((4, 3))])


def test_merge_keeps_the_outer_axis_parallel_type():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True)
        y = fd.ops.exp(x)
        y.axis(0).parallelize(ParallelType.stream)
        y.axis(2).parallelize(ParallelType.stream)
        y.merge(0, 1)  # stream outer, serial inner: stream
        y.merge(0, 1)  # stream outer, stream inner: stream
        z = fd.ops.neg(x)
        z.axis(1).parallelize(ParallelType.stream)
        z.merge(0, 1)  # serial outer, stream inner: serial, as nvFuser's merge
        fd.add_output(y)
        fd.add_output(z)
    assert loop(y) == ["istreamIdx7{( i0 * i1 * i2 )}"]
    assert loop(z) == ["iS11{( i0 * i1 )}", "iS10{i2}"]


def test_a_parallel_type_kept_by_a_split_runs_as_before():
    # splitting the serial half of a stream split: the stream axis is untouched, values as eager
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.sin(x)
        y.outer_split(0, 3)
        y.axis(0).parallelize(ParallelType.stream)
        y.split(1, 2)
        fd.add_output(y)
    assert loop(y)[0].startswith("istreamIdx") and not any("stream" in a for a in loop(y)[1:])
    X = make((6, 5))
    assert_eager(fd.execute([X])[0], X.sin())


@pytest.mark.parametrize("schedule", [
    lambda x: x.split(np.int64(0), np.int64(2)),
    lambda x: x.outer_split(np.int32(-1), np.int64(2)),
    lambda x: x.merge(np.int64(0)),
    lambda x: x.merge(np.int64(0), np.int64(1)),
    lambda x: x.reorder({np.int64(0): np.int64(1)}),
    lambda x: x.outer_split(np.int64(0), np.int64(2)).axis(np.int64(0)).parallelize(ParallelType.stream),
])
def test_numpy_integers_as_axes_and_factors(schedule):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.exp(x)
        schedule(y)
        fd.add_output(y)
    assert "np." not in repr(fd)  # (plain ints, so repr(fd) rebuilds the definition)
    assert str(rebuilt(fd).fusion.outputs()[0]) == str(y)
    X = make((4, 6))
    assert_eager(fd.execute([X])[0], X.exp())


def test_a_bool_or_a_float_is_still_no_axis_or_factor():
    fd = FusionDefinition()
    x = fd.define_tensor([-1, -1], contiguity=True)
    with pytest.raises(fuser.FusionDefinitionError, match=r"split: axis must be an int, got np.True_"):
        x.split(np.bool_(True), 2)
    with pytest.raises(fuser.FusionDefinitionError, match=r"split: factor must be an int, got 2.0"):
        x.split(0, 2.0)
    with pytest.raises(fuser.FusionDefinitionError, match=r"merge: axis must be an int, got np.float64"):
        x.merge(np.float64(0))


def test_split_by_a_tensor_extent_says_it_is_one():
    fd = FusionDefinition()
    x = fd.define_tensor([-1, -1], contiguity=True)
    n = fd.define_scalar(DataType.Int)
    with pytest.raises(fuser.FusionDefinitionError,
                       match=r"split: factor i1 is T0's extent along axis 1, known only at execution; give an int"):
        x.split(0, x.size(1))
    with pytest.raises(fuser.FusionDefinitionError, match=r"factor \( i0 \* i1 \) is computed from tensor extents"):
        x.split(0, fd.ops.mul(x.size(0), x.size(1)))
    with pytest.raises(fuser.FusionDefinitionError, match=r"factor i2 is a DataType.Int scalar input; give an int"):
        x.split(0, n)
    with pytest.raises(fuser.FusionDefinitionError, match=r"is a DataType.Int scalar computed from scalar inputs"):
        x.split(0, fd.ops.add(n, x.size(0)))


def test_a_segment_repr_is_one_short_line():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        w = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.sum(fd.ops.exp(x), [1]))
        fd.add_output(fd.ops.matmul(x, w))
    X, W = make((4, 6)), make((6, 3))
    s, m = fd.execute([X, W])
    assert_eager(s, X.exp().sum(1))
    assert_eager(m, X @ W)
    kernel, aten = fd.last_segments()
    assert repr(kernel).startswith("<kernel segment: 2 exprs, T0 -> T3 (")
    assert repr(aten) == "<evaluator segment: 1 exprs, T0, T1 -> T4 (MatmulOp runs through ATen)>"
    assert "\n" not in repr(fd.last_segments()) and len(repr(fd.last_segments())) < 300
    assert str(kernel) == kernel.describe()  # (the full listing stays str's)


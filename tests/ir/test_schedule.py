"""Scheduling transforms (split, merge, reorder, parallelize) and their errors."""
import pytest

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from fuser.ir.printer import format_id


@pytest.fixture
def fd_x():
    fd = FusionDefinition()
    x = fd.define_tensor([-1, -1, 4], contiguity=True)
    return fd, x


def loop(tv):
    return [format_id(d) for d in tv.get_loop_domain()]


def test_inner_split(fd_x):
    fd, x = fd_x
    x.split(0, 2)
    assert loop(x) == ["iS3{( ceilDiv(i0, 2) )}", "iS4{2}", "iS1{i1}", "iS2{4}"]


def test_outer_split(fd_x):
    fd, x = fd_x
    x.outer_split(-1, 2)
    assert loop(x) == ["iS0{i0}", "iS1{i1}", "iS3{2}", "iS4{2}"]
    x.inner_split(0, 3)
    assert loop(x)[:2] == ["iS5{( ceilDiv(i0, 3) )}", "iS6{3}"]


def test_merge_and_reorder(fd_x):
    fd, x = fd_x
    x.merge(0)
    assert loop(x) == ["iS3{( i0 * i1 )}", "iS2{4}"]
    x.reorder({0: -1})
    assert loop(x) == ["iS2{4}", "iS3{( i0 * i1 )}"]


def test_split_by_one_keeps_static_extent(fd_x):
    fd, x = fd_x
    x.outer_split(2, 1)
    assert loop(x)[2:] == ["iS3{1}", "iS4{4}"]


def test_parallelize(fd_x):
    fd, x = fd_x
    x.outer_split(0, 3)
    x.axis(0).parallelize(ParallelType.stream)
    x.axis(-1).parallelize(ParallelType.mesh_x)
    assert loop(x)[0] == "istreamIdx3{3}"
    assert loop(x)[-1] == "ideviceIdx.x2{4}"


def test_merge_of_reductions_is_a_reduction():
    fd = FusionDefinition()
    x = fd.define_tensor([-1, -1, 4], contiguity=True)
    r = fd.ops.sum(x, [1, 2])
    r.merge(1, 2)
    assert loop(r)[-1].startswith("rS") and "( i1 * 4 )" in loop(r)[-1]


ERRORS = [  # (id, transform on x of loop [i0, i1, 4], message fragment)
    ("split-axis-too-big", lambda x: x.split(3, 2), "out of range"),
    ("split-axis-too-negative", lambda x: x.split(-4, 2), "out of range"),
    ("split-factor-0", lambda x: x.split(0, 0), "at least 1"),
    ("split-factor-negative", lambda x: x.outer_split(0, -2), "at least 1"),
    ("split-factor-float", lambda x: x.split(0, 1.5), "factor"),
    ("merge-axis-out-of-range", lambda x: x.merge(2), "out of range"),
    ("merge-second-axis-out-of-range", lambda x: x.merge(0, 5), "out of range"),
    ("merge-with-itself", lambda x: x.merge(1, 1), "itself"),
    ("reorder-out-of-range", lambda x: x.reorder({0: 3}), "out of range"),
    ("reorder-collision", lambda x: x.reorder({0: 1, 2: 1}), "one position"),
    ("reorder-not-a-dict", lambda x: x.reorder([1, 0, 2]), "dict"),
    ("axis-out-of-range", lambda x: x.axis(3), "out of range"),
    ("parallelize-string", lambda x: x.axis(0).parallelize("stream"), "ParallelType"),
]


@pytest.mark.parametrize("transform,message", [pytest.param(*e[1:], id=e[0]) for e in ERRORS])
def test_schedule_errors(fd_x, transform, message):
    fd, x = fd_x
    before = loop(x)
    with pytest.raises(fuser.FusionDefinitionError, match=message):
        transform(x)
    assert loop(x) == before  # a refused transform leaves the loop domain as it was


def test_merging_reduction_with_iteration_axis_is_an_error():
    fd = FusionDefinition()
    x = fd.define_tensor([-1, -1, 4], contiguity=True)
    r = fd.ops.sum(x, [1])
    with pytest.raises(fuser.FusionDefinitionError, match="reduction axis rS.*iteration axis iS"):
        r.merge(0, 1)
    with pytest.raises(fuser.FusionDefinitionError, match="reduction"):
        r.merge(1, 2)


def test_error_names_the_extent_count():
    fd = FusionDefinition()
    x = fd.define_tensor([-1, 8], contiguity=True, dtype=DataType.BFloat16)
    with pytest.raises(fuser.FusionDefinitionError, match="2 axes"):
        x.split(2, 3)

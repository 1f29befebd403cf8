"""Faults of the binding table, the schedule API and the kernel cache found by probing them as
a user would (forty-eighth session), each checked against eager PyTorch or nvFuser's rule."""
import warnings

import pytest
import torch

from fuser import DataType, FusionDefinition, FusionDefinitionError, FusionInputError, ParallelType
from fuser.codegen import compile as kernel_compile
from fuser.errors import ExtentConflictError
from tests.helpers import assert_eager, make


def _expanded_plus(op_name: str = "add"):
    with FusionDefinition() as fd:
        x = fd.define_tensor([1, -1], contiguity=True)
        y = fd.define_tensor([-1, -1], contiguity=True)
        n = fd.define_scalar(dtype=DataType.Int)
        e = fd.ops.expand(x, [n, x.size(1)])
        fd.add_output(fd.ops.sum(getattr(fd.ops, op_name)(e, y), [0]))
    return fd


def test_an_expanded_size_must_match_the_other_operand():
    # eager: x.expand(4, 5) + y[3, 5] raises; the kernel looped over 4 rows into 3 (heap corruption)
    fd = _expanded_plus()
    x, y = make((1, 5)), make((3, 5))
    assert_eager(fd.execute([x, y, 3])[0], (x.expand(3, 5) + y).sum(0))
    for n in (2, 4, 100):
        with pytest.raises(ExtentConflictError, match=rf"3 from input 1 \(T1\) axis 0 and {n} from input 2"):
            fd.execute([x, y, n])
    with pytest.raises(FusionDefinitionError, match="expanded axis 0 of the operands: extents 3 and 4"):
        with FusionDefinition() as fd:
            x = fd.define_tensor([1, -1])
            y = fd.define_tensor([3, -1])
            fd.add_output(fd.ops.add(fd.ops.expand(x, [4, x.size(1)]), y))


def _sum_of_full():
    with FusionDefinition() as fd:
        n = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.sum(fd.ops.full([n, 3], 1.0, DataType.Float), [0]))
    return fd


def test_a_negative_size_inside_a_kernel_is_refused():
    # the output [3] is fine; the loop of -2 rows ran no iteration and gave zeros
    fd = _sum_of_full()
    assert_eager(fd.execute([4])[0], torch.full((3,), 4.0))  # (the precompiled binder is warm)
    with pytest.raises(FusionInputError, match="full: size i0 evaluates to -2, a negative size"):
        fd.execute([-2])
    with FusionDefinition() as fd:
        x = fd.define_tensor([1, -1], contiguity=True)
        m = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.sum(fd.ops.expand(x, [m, -1]), [0]))
    with pytest.raises(FusionInputError, match="expand: size .* a negative size"):
        fd.execute([make((1, 3)), -1])


def test_a_fractional_size_is_refused():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], contiguity=True)
        n = fd.define_scalar(dtype=DataType.Double)
        b = fd.ops.broadcast_in_dim(x, [n, x.size(0)], [1])
        fd.add_output(fd.ops.sum(b, [0]))
    x = make((3,))
    assert_eager(fd.execute([x, 2.0])[0], 2 * x)
    for bad in (2.5, float("nan")):
        with pytest.raises(FusionInputError, match="(broadcast_in_dim|expand): size .*cannot be evaluated"):
            fd.execute([x, bad])


def test_merging_an_expanded_broadcast_counts_its_expanded_size():
    with FusionDefinition() as fd:
        x = fd.define_tensor([1, -1], contiguity=True)
        n = fd.define_scalar(dtype=DataType.Int)
        e = fd.ops.expand(x, [n, x.size(1)])
        fd.add_output(e)
        e.merge(0)
        assert str(e.axis(0).extent) in ("i0*i1", "i1*i0")
        e.split(0, 4)
        assert str(e.axis(0).extent) in ("ceilDiv(i0*i1, 4)", "ceilDiv(i1*i0, 4)")
    with FusionDefinition() as fd:
        x = fd.define_tensor([1, -1], contiguity=True)
        e = fd.ops.expand(x, [8, x.size(1)])
        fd.add_output(e)
        e.split(0, 2)
        assert [d.expanded_extent for d in (e.axis(0), e.axis(1))] == [4, 2]


def test_scheduling_a_definition_that_ran_is_refused():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.exp(x)
        fd.add_output(y)
    x_in = make((3, 4))
    assert_eager(fd.execute([x_in])[0], x_in.exp())
    calls = {"split": lambda: y.split(0, 2), "merge": lambda: y.merge(0),
             "reorder": lambda: y.reorder({0: 1}),
             "set_allocation_domain": lambda: y.set_allocation_domain([y.axis(1), y.axis(0)]),
             "parallelize": lambda: y.axis(0).parallelize(ParallelType.stream)}
    for name, call in calls.items():
        with pytest.raises(FusionDefinitionError, match=f"{name}: the fusion is final"):
            call()
    assert fd.execute([x_in])[0].stride() == (4, 1)  # as defined


def test_an_allocation_domain_is_checked():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, 4], contiguity=True)
        y = fd.ops.exp(x)
        fd.add_output(y)
        with pytest.raises(FusionDefinitionError, match="expects a list of IterDomains"):
            y.set_allocation_domain(y.axis(0))
        with pytest.raises(FusionDefinitionError, match="is given twice"):
            y.set_allocation_domain([y.axis(1), y.axis(1), y.axis(0)])
        with pytest.raises(FusionDefinitionError, match="leaves out the logical axis"):
            y.set_allocation_domain([y.axis(2), y.axis(0)])
        y.split(2, 2)
        with pytest.raises(FusionDefinitionError, match="half of a split"):
            y.set_allocation_domain([y.axis(0), y.axis(1), y.axis(2)])
        with pytest.raises(FusionDefinitionError, match="must be next to each other, outer first"):
            y.set_allocation_domain([y.axis(2), y.axis(0), y.axis(1), y.axis(3)])  # a tiled layout
        y.set_allocation_domain([y.axis(1), y.axis(0), y.axis(2), y.axis(3)])  # both halves: fine
    x_in = make((2, 3, 4))
    out = fd.execute([x_in])[0]
    assert_eager(out, x_in.exp())
    assert out.stride() == (4, 8, 1)


def _input_allocated(schedule):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.mul(x, 3.0))
        schedule(x)
    return fd


def _split_in_place(x):
    x.split(1, 5)
    x.set_allocation_domain(x.get_loop_domain())


def _columns_split(x):
    x.split(0, 2)
    loop = x.get_loop_domain()
    x.set_allocation_domain([loop[2], loop[0], loop[1]])


def _columns_merged(x):
    x.reorder({0: 1})
    x.merge(0)
    x.set_allocation_domain(x.get_loop_domain())


ROW_MAJOR, COLUMN_MAJOR = (lambda: make((6, 10))), (lambda: make((10, 6)).t())


@pytest.mark.parametrize("schedule, good, bad", [
    (_split_in_place, ROW_MAJOR, COLUMN_MAJOR),
    (_columns_split, COLUMN_MAJOR, ROW_MAJOR),
    (_columns_merged, COLUMN_MAJOR, lambda: make((12, 20))[::2, ::2]),
], ids=["split-rows", "split-columns", "merged-columns"])
def test_an_inputs_allocation_with_a_split_or_merge_checks_its_own_axes(schedule, good, bad):
    """The contiguity flags were paired with the wrong axes (a row-major tensor refused for a
    row-major allocation split in place, a column-major one for its own layout) or with none (a
    merge: any strides passed) (fifty-fifth session)."""
    fd = _input_allocated(schedule)
    x = good()
    assert_eager(fd.execute([x])[0], x * 3)
    with pytest.raises(FusionInputError, match="declared contiguous"):
        fd.execute([bad()])


def test_reorder_refuses_one_axis_twice_and_axes_must_be_ints():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1])
        with pytest.raises(FusionDefinitionError, match="one axis is given twice"):
            x.reorder({0: 2, -3: 1})
        with pytest.raises(FusionDefinitionError, match="axis must be an int, got True"):
            x.split(True, 2)
        fd.add_output(fd.ops.neg(x))


def test_an_unwritable_kernel_cache_warns_and_still_runs(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("FUSER_CACHE_DIR", str(blocker))
    monkeypatch.setattr(kernel_compile, "_memory", {})  # (every kernel is loaded from its file again)
    monkeypatch.setattr(kernel_compile, "_warned_unwritable", set())
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.sum(fd.ops.tanh(x), [1]))
    x_in = make((3, 5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fd.execute([x_in])[0]
    assert_eager(out, x_in.tanh().sum(1))
    assert any("cannot write its kernel cache" in str(w.message) for w in caught)


def test_a_pad_cropping_more_than_the_axis_holds_is_refused():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.sum(fd.ops.pad(x, [-3, -3]), [1]))
    x_in = make((2, 8))
    assert_eager(fd.execute([x_in])[0], torch.nn.functional.pad(x_in, [-3, -3]).sum(1))
    with pytest.raises(RuntimeError):
        torch.nn.functional.pad(make((2, 4)), [-3, -3])  # eager refuses it
    with pytest.raises(FusionInputError, match=r"pad: axis 1 of T0 cropped by widths \[-3, -3\]: .* -2, a negative"):
        fd.execute([make((2, 4))])


def test_an_int32_scalar_out_of_its_range_is_refused():
    # the kernel's int32 argument would wrap it silently
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1], dtype=DataType.Int32)
        s = fd.define_scalar(dtype=DataType.Int32)
        fd.add_output(fd.ops.add(x, s))
    x = torch.arange(3, dtype=torch.int32)
    assert torch.equal(fd.execute([x, -2**31])[0], x + -2**31)
    for bad in (2**31, -2**31 - 1):  # the second call takes the precompiled binder's path
        with pytest.raises(FusionInputError, match=f"{bad} is out of the range of a 32-bit integer"):
            fd.execute([x, bad])


def test_a_split_by_a_scalar_and_contiguity_of_a_wrong_type():
    """A constant Scalar factor splits as its value (an input's is refused by name: the message
    said "must be an int, got 2"); a string contiguity was read letter by letter."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.exp(x)
        fd.add_output(y)
        y.split(1, fd.define_scalar(2))
        with pytest.raises(FusionDefinitionError, match="split: factor .* scalar input; give an int"):
            y.split(0, fd.define_scalar(dtype=DataType.Int))
        with pytest.raises(FusionDefinitionError, match="set_allocation_domain: contiguity must be a bool"):
            y.set_allocation_domain(y.get_loop_domain(), "yes")
        with pytest.raises(FusionDefinitionError, match="define_tensor: contiguity must be a bool"):
            fd.define_tensor([-1], contiguity="yes")
    assert len(y.domain.loop) == 3 and y.domain.loop[2].extent == 2
    x_in = make((3, 4))
    assert_eager(fd.execute([x_in, 7])[0], x_in.exp())  # (the refused split's scalar stays an input)

"""A FusionDefinition's outputs take the memory order of their inputs (sixty-third session),
as nvFuser's allocation order inference gives them: a pointwise result of a transposed or
channels-last input came back row-major, where eager and nvFuser keep the input's order, so a
`.view` that ported code makes of it raised (frontend/allocation_order.py)."""
import re

import torch

from fuser import DataType, FusionDefinition
from tests.helpers import make


def _dense_strides_of(t: torch.Tensor) -> list:
    # strides of the axes longer than 1 (a size-1 axis's stride is arbitrary)
    return [(s, n) for s, n in zip(t.stride(), t.shape) if n > 1]


def _pointwise(x: torch.Tensor) -> torch.Tensor:
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.relu(fd.ops.exp(fd.from_pytorch(x))))
    (out,) = fd.execute([x])
    return out, fd


def test_a_transposed_input_gives_a_transposed_output_written_in_its_order():
    x = make((12, 8)).t()
    out, fd = _pointwise(x)
    want = x.exp().relu()
    torch.testing.assert_close(out, want)
    assert out.stride() == want.stride() == (1, 8)
    # input and output alike in memory: one flat run of both, no tile transposing between them
    code = fd.last_triton_code()
    assert re.search(r"# X0 = i\d+ \* i\d+", code), code
    assert "T2_off1 = idx0 * T2_stride0" in code and "T0_off1 = idx0 * T0_stride0" in code


def test_a_channels_last_input_gives_a_channels_last_output_that_views_as_eager_s():
    x = make((2, 5, 5, 3)).to(memory_format=torch.channels_last)
    out, _ = _pointwise(x)
    want = x.exp().relu()
    torch.testing.assert_close(out, want)
    assert out.stride() == want.stride() == (75, 1, 15, 5)
    torch.testing.assert_close(out.permute(0, 2, 3, 1).view(2, -1), want.permute(0, 2, 3, 1).view(2, -1))


def _channels_last_sum(dims: list, keepdim: bool):
    x = make((2, 5, 4, 3)).to(memory_format=torch.channels_last)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.sum(fd.ops.mul(t, t), dims, keepdim))
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, (x * x).sum(dims, keepdim=keepdim))
    return out


def test_a_reduction_of_a_channels_last_input_keeps_its_channels_innermost():
    """nvFuser's rule (eager's reductions come back row-major): the kept axes in the input's
    order, C innermost; the reduced axis, put back by keepdim, outermost with N."""
    assert _channels_last_sum([2], keepdim=False).stride() == (15, 1, 5)  # [N, C, W] as N, W, C
    assert _dense_strides_of(_channels_last_sum([2], keepdim=True)) == [(15, 2), (1, 5), (5, 3)]
    assert _dense_strides_of(_channels_last_sum([2, 3], keepdim=True)) == [(5, 2), (1, 5)]
    assert _channels_last_sum([1], keepdim=False).stride() == (12, 3, 1)  # C reduced: row-major


def test_a_broadcast_vector_does_not_lead_the_layout_of_a_permuted_operand():
    """The vector is the first input, but the transposed matrix maps more axes of the sum."""
    b, x = make((6,)), make((6, 4)).t()
    with FusionDefinition() as fd:
        tb, tx = fd.from_pytorch(b), fd.from_pytorch(x)
        fd.add_output(fd.ops.add(fd.ops.broadcast_in_dim(tb, [4, 6], [1]), tx))
    (out,) = fd.execute([b, x])
    want = b + x
    torch.testing.assert_close(out, want)
    assert out.stride() == want.stride() == (1, 4)


def test_an_explicit_stride_order_or_allocation_domain_is_left_as_given():
    x = make((6, 4)).t()
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.stride_order(fd.ops.exp(t), [1, 0]))  # row-major, asked for
        y = fd.ops.mul(t, 2.0)
        fd.add_output(y)
        y.set_allocation_domain(y.get_logical_domain(), True)
    row_major, doubled = fd.execute([x])
    torch.testing.assert_close(row_major, x.exp())
    torch.testing.assert_close(doubled, x * 2.0)
    assert row_major.stride() == (6, 1) and doubled.stride() == (6, 1)


def test_a_reshape_across_the_permuted_axes_stays_row_major():
    x = make((2, 5, 4, 3)).to(memory_format=torch.channels_last)
    with FusionDefinition() as fd:
        t = fd.from_pytorch(x)
        fd.add_output(fd.ops.reshape(fd.ops.exp(t), [2, 5, 12]))
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.exp().reshape(2, 5, 12))
    assert out.stride() == (60, 12, 1)


def test_the_inferred_layout_is_not_printed_as_a_user_call():
    """repr(fd) rebuilds what the user wrote; the rebuilt definition infers the same layout."""
    x = make((12, 8)).t()
    _, fd = _pointwise(x)
    assert "set_allocation_domain" not in repr(fd)
    scope = {}
    exec(repr(fd), {"FusionDefinition": FusionDefinition, "DataType": DataType}, scope)
    with FusionDefinition() as again:
        scope["nvfuser_fusion"](again)
    (out,) = again.execute([x])
    assert out.stride() == (1, 8)


def test_an_outer_product_of_row_major_inputs_stays_row_major():
    """The broadcast axis maps onto no axis of the row-major reference: putting it outermost
    (as the reference's walk would) gave strides (6, 1, 30), where eager's result is row-major
    and `.view(5, 18)` of it works."""
    x, w = make((5, 6)), make((3,))
    with FusionDefinition() as fd:
        tx, tw = fd.from_pytorch(x), fd.from_pytorch(w)
        bx = fd.ops.broadcast_in_dim(tx, [5, 6, 3], [0, 1])
        bw = fd.ops.broadcast_in_dim(tw, [5, 6, 3], [2])
        fd.add_output(fd.ops.mul(bx, bw))
    (out,) = fd.execute([x, w])
    want = x[:, :, None] * w
    torch.testing.assert_close(out, want)
    assert out.stride() == want.stride() == (18, 3, 1)
    torch.testing.assert_close(out.view(5, 18), want.view(5, 18))


def test_a_permute_of_a_row_major_input_comes_back_row_major():
    """A row-major reference leaves its outputs row-major, whatever the fusion permutes."""
    x = make((4, 6))
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.permute(fd.ops.exp(fd.from_pytorch(x)), [1, 0]))
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.exp().t())
    assert out.stride() == (4, 1)


def _sum_of(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.add(fd.from_pytorch(a), fd.from_pytorch(b)))
    (out,) = fd.execute([a, b])
    torch.testing.assert_close(out, a + b)
    return out


def test_tied_references_that_disagree_leave_the_output_row_major():
    """nvFuser's rule: two inputs mapping as many axes, laid out differently, give no reference
    (the first one's order is no better a guess than the second's)."""
    a_t, b = make((6, 4)).t(), make((4, 6))
    assert _sum_of(a_t, b).stride() == (6, 1)
    assert _sum_of(b, a_t).stride() == (6, 1)


def test_tied_references_that_agree_give_their_order():
    a_t, b_t = make((6, 4)).t(), make((6, 4)).t()
    assert _sum_of(a_t, b_t).stride() == (1, 4)


def test_a_definition_executed_inside_its_block_infers_its_layout_once():
    """Executed before the block closes, the fusion became final with row-major outputs, and
    stayed so; a fresh identical definition gave the input's order."""
    x = make((6, 5)).t()
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.relu(fd.from_pytorch(x)))
        (inside,) = fd.execute([x])
    (after,) = fd.execute([x])
    want = x.relu()
    torch.testing.assert_close(inside, want)
    torch.testing.assert_close(after, want)
    assert inside.stride() == after.stride() == want.stride() == (1, 5)


def test_a_definition_compiled_ahead_inside_its_block_infers_its_layout():
    x = make((6, 5)).t()
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.relu(fd.from_pytorch(x)))
        fd.compile_ahead([x.to("meta")], device="cpu")
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.relu())
    assert out.stride() == (1, 5)


def test_a_definition_built_without_a_block_infers_no_layout():
    """fuser.jit builds its definitions so, and lays their outputs out itself (lowering.py)."""
    x = make((6, 5)).t()
    fd = FusionDefinition()
    fd.add_output(fd.ops.relu(fd.from_pytorch(x)))
    (out,) = fd.execute([x])
    torch.testing.assert_close(out, x.relu())
    assert out.stride() == (6, 1)

"""Reshapes move to the edges of a fusion through elementwise ops (passes/move_reshapes.py), so
that the kernels around them are one: a reshape of an input or of an output is a free view."""
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition
from fuser.ir import ReshapeOp
from fuser.passes.move_reshapes import move_reshapes
from fuser.segment import SegmentKind

F32, BF16 = DataType.Float, DataType.BFloat16


def kernels(fd) -> int:
    return sum(s.kind is SegmentKind.kernel for s in fd.last_segments())


def reshapes_next_to_edges(fusion) -> bool:
    """Every reshape reads a fusion input (or a reshape of one) or writes a fusion output."""
    inputs, outputs = {id(v) for v in fusion.inputs()}, {id(v) for v in fusion.outputs()}
    for e in fusion.exprs:
        if isinstance(e, ReshapeOp):
            if id(e.inp) not in inputs and id(e.out) not in outputs:
                return False
            inputs.add(id(e.out))
    return True


def test_a_cast_then_a_flatten_then_a_row_reduction_is_one_kernel():
    # logits.float().flatten(0, 1) then a softmax-like row reduction: the flatten moves onto the
    # input (a view), the cast joins the reduction's kernel
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=True, dtype=BF16)
        xf = fd.ops.reshape(fd.ops.cast(x, F32), [-1, x.shape()[2]])
        fd.add_output(fd.ops.sub(xf, fd.ops.max(xf, [1], True)))
    x = torch.randn(2, 3, 17, dtype=torch.bfloat16)
    (out,) = fd.execute([x])
    xf = x.float().flatten(0, 1)
    torch.testing.assert_close(out, xf - xf.amax(1, keepdim=True))
    assert kernels(fd) == 1
    assert reshapes_next_to_edges(fd.cache.last_runtime.fusion)
    assert not reshapes_next_to_edges(fd.fusion)  # the user's definition is unchanged


def test_a_reshape_then_elementwise_ops_to_an_output_sinks_below_them():
    # softmax-like rows, reshaped, then scaled and cast: the reshape goes to the output
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        s = fd.define_scalar(dtype=DataType.Float)
        y = fd.ops.sub(x, fd.ops.max(x, [1], True))
        r = fd.ops.reshape(y, [2, -1, x.shape()[1]])
        fd.add_output(fd.ops.cast(fd.ops.mul(r, s), BF16))
    x = torch.randn(6, 9)
    (out,) = fd.execute([x, 0.5])
    torch.testing.assert_close(out, ((x - x.amax(1, keepdim=True)).reshape(2, 3, 9) * 0.5).bfloat16())
    assert kernels(fd) == 1
    assert reshapes_next_to_edges(fd.cache.last_runtime.fusion)


def test_a_value_read_on_both_sides_of_a_reshape_stays_where_it_is():
    # y is an output and is reshaped: moving the reshape would compute y twice
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        y = fd.ops.exp(x)
        fd.add_output(y)
        fd.add_output(fd.ops.sum(fd.ops.reshape(y, [-1]), [0]))
    assert move_reshapes(fd.fusion) is fd.fusion
    x = torch.randn(4, 5)
    y, total = fd.execute([x])
    torch.testing.assert_close(y, x.exp())
    torch.testing.assert_close(total, x.exp().sum(), rtol=1e-5, atol=1e-5)


def test_a_reshape_between_two_computed_values_with_other_operands_stays():
    # the op after the reshape reads another tensor with dims: not moved (that tensor would
    # need the inverse reshape), and the result is still right
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        z = fd.define_tensor(shape=[-1], contiguity=True, dtype=F32)
        r = fd.ops.reshape(fd.ops.sub(x, fd.ops.max(x, [1], True)), [-1])
        fd.add_output(fd.ops.add(r, z))
    assert move_reshapes(fd.fusion) is fd.fusion
    x, z = torch.randn(3, 4), torch.randn(12)
    (out,) = fd.execute([x, z])
    torch.testing.assert_close(out, (x - x.amax(1, keepdim=True)).flatten() + z)


def test_jit_cross_entropy_of_flattened_logits_is_one_kernel_each_way():
    def loss(logits, targets):
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    from fuser.frontend.backend import backend_for
    from tests.frontend.jit_helpers import check_forward_backward

    logits = torch.randn(2, 5, 33, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, 33, (2, 5))
    jitted = fuser.jit(loss)
    check_forward_backward(loss, jitted, (logits, targets))
    programs = {p.kind: p for p in backend_for().records[-1].programs}
    # the cast joins the cross entropy's row kernel (the other two sum the losses over rows)
    assert programs["forward"].counts()["kernels"] == 3
    assert programs["backward"].counts()["kernels"] == 1


def test_chains_of_reshapes_and_views_of_inputs_settle():
    # a reshape of a reshape of a cast of an input, and a view of an input then cast to the
    # output: every reshape ends on an edge, none moves back and forth
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=True, dtype=BF16)
        y = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=F32)
        twice = fd.ops.reshape(fd.ops.reshape(fd.ops.neg(fd.ops.cast(x, F32)), [-1, x.shape()[2]]), [-1])
        fd.add_output(fd.ops.sum(twice, [0]))
        fd.add_output(fd.ops.cast(fd.ops.reshape(y, [-1]), BF16))
    moved = move_reshapes(fd.fusion)
    assert reshapes_next_to_edges(moved)
    assert move_reshapes(moved) is moved  # settled
    x, y = torch.randn(2, 3, 5, dtype=torch.bfloat16), torch.randn(4, 6)
    total, flat = fd.execute([x, y])
    torch.testing.assert_close(total, (-x.float()).sum(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(flat, y.flatten().bfloat16())


_UNARY = [lambda t: t.exp().clamp(max=4.0), lambda t: -t, lambda t: t * 0.5 + 1.0, torch.abs,
          lambda t: torch.where(t > 0, t, 0.1 * t), lambda t: t.to(torch.float64).to(torch.float32)]
_RESHAPES = [lambda t: t.flatten(0, 1), lambda t: t.reshape(t.shape[0], -1),
             lambda t: t.unflatten(-1, (2, t.shape[-1] // 2)), lambda t: t.view(-1)]
_ENDS = [lambda t: t, lambda t: t.sum(-1), lambda t: t - t.amax(-1, keepdim=True), lambda t: t.sum()]


def _random_program(seed: int):
    """Elementwise ops, a reshape, elementwise ops, then a reduction or not; sometimes a value
    before the reshape is returned too (two uses: it must not move past it)."""
    import random

    r = random.Random(seed)
    pre = [r.choice(_UNARY) for _ in range(r.randint(0, 3))]
    reshape = r.choice(_RESHAPES)
    post = [r.choice(_UNARY) for _ in range(r.randint(0, 3))]
    end = r.choice(_ENDS)
    keep = r.random() < 0.3

    def program(x):
        y = x
        for op in pre:
            y = op(y)
        before = y
        y = reshape(y)
        for op in post:
            y = op(y)
        return (end(y), before) if keep else end(y)
    return program


def test_random_programs_around_a_reshape_match_eager(monkeypatch):
    from fuser.runtime import cache

    moved, real = [], cache.move_reshapes
    monkeypatch.setattr(cache, "move_reshapes", lambda f: (lambda out: moved.append(out is not f) or out)(real(f)))
    for seed in range(16):
        torch._dynamo.reset()  # (each program is the same closure's code: Dynamo would stop compiling it)
        program = _random_program(seed)
        x = torch.randn(4, 6, 8)
        jitted = fuser.jit(program)
        got, want = jitted(x), program(x)
        assert jitted.cache_info().fusions >= 1, f"seed {seed} did not run through fuser"
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5, msg=lambda m: f"seed {seed}: {m}")
    assert sum(moved) >= 4, moved  # the programs do move reshapes


def test_a_reshape_of_an_expanded_value_stays_where_it_is():
    # (the backward of a row sum of a reshape, fuzzed: the op after the reshape, moved before
    # it, would compute on the unexpanded [n, 1] and the reshape then lacks elements)
    def f(v):
        return -(v[:, None].expand(-1, 12) * 0.5).reshape(v.shape[0], 3, 4)

    v = torch.randn(5)
    torch.testing.assert_close(fuser.jit(f)(v), f(v))

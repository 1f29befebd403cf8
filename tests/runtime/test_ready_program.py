"""A repeat call of a runtime of several segments replays the first call's steps
(runtime/ready.py ReadyProgram): each kernel's prepared launch and each ATen op's rule with its
sizes and scalars fixed by the call's layout. Every test calls with fresh data and compares
with eager; a call with another layout or other scalar values is bound and planned anew."""
import re

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.ready import ReadyProgram


def _ready(fd) -> list:
    return list(fd.cache.ready_calls())


def test_a_reshape_and_a_scalar_between_kernels():
    """exp(x) * s, flattened by an ATen reshape, then a matmul: the reshape's sizes and the
    scalar's value are the first call's; another value of s gets its own ready program."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Double)
        flat = fd.ops.reshape(fd.ops.mul(fd.ops.exp(x), s), [fd.ops.mul(x.shape()[0], x.shape()[1]), x.shape()[2]])
        fd.add_output(fd.ops.relu(fd.ops.matmul(flat, w)))
    g = torch.Generator().manual_seed(11)
    for shape, scale in (((2, 3, 4), 0.5), ((2, 3, 4), 0.5), ((2, 3, 4), -2.0), ((2, 3, 4), 0.5), ((3, 1, 4), 0.5)):
        x, w = torch.randn(*shape, generator=g), torch.randn(shape[2], 5, generator=g)
        (out,) = fd.execute([x, w, scale])
        want = torch.relu((torch.exp(x) * scale).reshape(-1, shape[2]) @ w)
        torch.testing.assert_close(out, want)
    programs = [r for r in _ready(fd) if isinstance(r, ReadyProgram)]
    assert len(programs) == 3  # two scalar values at one shape, and another shape


def test_autocast_does_not_recast_the_replayed_aten_ops():
    """Under autocast the IR's dtypes hold: the matmul of float inputs stays float in the
    replayed steps, as in the first call."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.matmul(fd.ops.sin(a), b), 1.0))
    g = torch.Generator().manual_seed(12)
    for _ in range(3):
        a, b = torch.randn(4, 8, generator=g), torch.randn(8, 3, generator=g)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            (out,) = fd.execute([a, b])
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, torch.sin(a) @ b + 1.0)
    assert any(isinstance(r, ReadyProgram) for r in _ready(fd))


def test_an_empty_input_replays_through_aten():
    """A kernel with nothing to do (no rows) was evaluated through ATen on the first call:
    its replay evaluates it so too, with the matmul beside it."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.matmul(fd.ops.exp(a), b), [1]))
    g = torch.Generator().manual_seed(13)
    for rows in (0, 0, 3, 3):
        a, b = torch.randn(rows, 4, generator=g), torch.randn(4, 2, generator=g)
        (out,) = fd.execute([a, b])
        torch.testing.assert_close(out, (torch.exp(a) @ b).sum(1))
    assert sum(isinstance(r, ReadyProgram) for r in _ready(fd)) == 2


def test_outputs_that_are_inputs_and_intermediates():
    """A fusion returning one of its inputs beside a kernel's output and an ATen view."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        m = fd.ops.matmul(fd.ops.tanh(a), b)
        fd.add_output(a)
        fd.add_output(fd.ops.permute(m, [1, 0]))
        fd.add_output(fd.ops.mul(m, 3.0))
    g = torch.Generator().manual_seed(14)
    for _ in range(3):
        a, b = torch.randn(5, 4, generator=g), torch.randn(4, 6, generator=g)
        got = fd.execute([a, b])
        m = torch.tanh(a) @ b
        assert got[0] is a or torch.equal(got[0], a)
        torch.testing.assert_close(got[1], m.t())
        torch.testing.assert_close(got[2], m * 3.0)
    assert any(isinstance(r, ReadyProgram) for r in _ready(fd))


def test_a_launch_cleared_before_the_program_is_made(monkeypatch):
    """Another thread's call with new shapes may clear a launcher's launches (past 1024)
    between this call's run and the making of its ready program: the program takes the
    launches the run made, not a lookup after it (found by review: the lookup missed, the
    kernel became ATen steps whose sizes the first call never asked, and every replay
    raised)."""
    import fuser.runtime.cache as cache_module

    made = cache_module.ready_program

    def after_another_call(runtime, env, *rest):
        for launcher in runtime.launchers.values():
            launcher.launches.clear()
        return made(runtime, env, *rest)
    monkeypatch.setattr(cache_module, "ready_program", after_another_call)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
        m = fd.ops.matmul(fd.ops.exp(x), w)
        bb = fd.ops.expand(fd.ops.broadcast_in_dim(b, [1, m.shape()[1]], [1]), [m.shape()[0], m.shape()[1]])
        fd.add_output(fd.ops.relu(fd.ops.add(m, bb)))
    g = torch.Generator().manual_seed(15)
    for _ in range(3):
        x, w, b = torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g), torch.randn(5, generator=g)
        (out,) = fd.execute([x, w, b])
        torch.testing.assert_close(out, torch.relu(torch.exp(x) @ w + b))
    (ready,) = _ready(fd)
    assert [type(s).__name__ for s in ready.steps] == ["_KernelStep", "_AtenStep", "_KernelStep"]


def test_a_replay_keeps_no_tensor_of_its_call():
    """Neither the arguments nor the values made inside a replayed call outlive it (the
    program keeps launches, sizes and scalars only)."""
    import gc
    import weakref

    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.mul(fd.ops.matmul(fd.ops.exp(a), b), 0.5))
    g = torch.Generator().manual_seed(16)
    refs = []
    for _ in range(3):
        a, b = torch.randn(4, 6, generator=g), torch.randn(6, 2, generator=g)
        (out,) = fd.execute([a, b])
        torch.testing.assert_close(out, (torch.exp(a) @ b) * 0.5)
        refs += [weakref.ref(t) for t in (a, b, out)]
        del a, b, out
    gc.collect()
    assert any(isinstance(r, ReadyProgram) for r in _ready(fd))
    assert all(r() is None for r in refs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_jitted_training_step_replays_on_the_gpu():
    """An MLP block (linear, tanh GELU, linear) trained through fuser.jit on the GPU: every
    repeat step replays its runtimes (kernels launched directly, matmuls between them) and
    matches eager on fresh data."""
    import fuser

    torch.manual_seed(17)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(approximate="tanh"),
                                torch.nn.Linear(256, 64)).cuda()
    jitted = fuser.jit(model)
    params = list(model.parameters())
    for _ in range(4):
        x = torch.randn(2, 16, 64, device="cuda", requires_grad=True)
        dy = torch.randn(2, 16, 64, device="cuda")
        got = torch.autograd.grad(jitted(x), [x, *params], dy)
        want = torch.autograd.grad(model(x), [x, *params], dy)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_a_fusion_that_lists_an_input_twice():
    """Fusion.add_input keeps a Val listed twice (its last position binds it, as a run's
    environment does): the values a replay makes take slots after every input's (found by
    review: they were numbered from the distinct inputs and overwrote the last one)."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        b = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.relu(fd.ops.matmul(fd.ops.exp(a), b)))
    fd.fusion.add_input(fd.fusion.inputs()[1])  # inputs: a, b, b
    g = torch.Generator().manual_seed(18)
    for _ in range(3):
        x, w = torch.randn(3, 4, generator=g), torch.randn(4, 5, generator=g)
        (out,) = fd.execute([x, w, w])
        torch.testing.assert_close(out, torch.relu(torch.exp(x) @ w))
    assert any(isinstance(r, ReadyProgram) for r in _ready(fd))


def test_a_single_kernel_keeps_its_ready_launch_when_launches_are_cleared(monkeypatch):
    """The one-kernel form too is made from the launch its run made: a launch cache cleared
    by another call in between leaves it a ReadyCall (a lookup made it a BoundCall)."""
    from fuser.runtime.cache import FusionRuntime
    from fuser.runtime.ready import ReadyCall

    made = FusionRuntime.ready_call

    def after_another_call(runtime, kept):
        for launcher in runtime.launchers.values():
            launcher.launches.clear()
        return made(runtime, kept)
    monkeypatch.setattr(FusionRuntime, "ready_call", after_another_call)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.exp(x), [1]))
    g = torch.Generator().manual_seed(19)
    for _ in range(3):
        x = torch.randn(4, 7, generator=g)
        (out,) = fd.execute([x])
        torch.testing.assert_close(out, torch.exp(x).sum(1))
    (ready,) = _ready(fd)
    assert isinstance(ready, ReadyCall)


def test_view_ops_replay_as_tensor_methods():
    """A reshape and a permute between a kernel and a matmul replay as one Tensor method call
    each, with the first call's sizes (no rule dispatch, no size lookup), on fresh data."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        flat = fd.ops.reshape(fd.ops.exp(x), [fd.ops.mul(x.shape()[0], x.shape()[1]), x.shape()[2]])
        fd.add_output(fd.ops.permute(fd.ops.matmul(flat, w), [1, 0]))
    g = torch.Generator().manual_seed(19)
    for _ in range(3):
        x, w = torch.randn(2, 3, 4, generator=g), torch.randn(4, 5, generator=g)
        (out,) = fd.execute([x, w])
        torch.testing.assert_close(out, (torch.exp(x).reshape(6, 4) @ w).permute(1, 0))
    (program,) = [r for r in _ready(fd) if isinstance(r, ReadyProgram)]
    names = program._run.__code__.co_names
    assert "reshape" in names and "permute" in names


def test_a_weight_read_through_two_transposes_replays_without_a_view():
    """A linear layer's backward reads its weight as permute(permute(w)): the ready program
    passes w itself to the matmul, and the matmul is a direct call of torch.matmul (no rule,
    no evaluation context), on fresh data each call."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        twice = fd.ops.permute(fd.ops.permute(w, [1, 0]), [1, 0])
        fd.add_output(fd.ops.relu(fd.ops.matmul(fd.ops.exp(x), twice)))
    g = torch.Generator().manual_seed(23)
    for _ in range(3):
        x, w = torch.randn(6, 4, generator=g), torch.randn(4, 5, generator=g)
        (out,) = fd.execute([x, w])
        torch.testing.assert_close(out, torch.relu(torch.exp(x) @ w))
    (program,) = [r for r in _ready(fd) if isinstance(r, ReadyProgram)]
    names = program._run.__code__.co_names
    assert "permute" not in names and "EvalContext" not in names


def test_permutes_in_a_row_replay_as_one():
    """permute(permute(x, [1, 0, 2]), [0, 2, 1]) is x.permute(1, 2, 0): one view, then the
    batched matmul and a kernel, equal to eager on fresh data."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        moved = fd.ops.permute(fd.ops.permute(x, [1, 0, 2]), [0, 2, 1])
        fd.add_output(fd.ops.exp(fd.ops.matmul(moved, w)))
    g = torch.Generator().manual_seed(29)
    for _ in range(3):
        x, w = torch.randn(2, 3, 4, generator=g), torch.randn(2, 5, generator=g)
        (out,) = fd.execute([x, w])
        torch.testing.assert_close(out, torch.exp(x.permute(1, 0, 2).permute(0, 2, 1) @ w))
    (program,) = [r for r in _ready(fd) if isinstance(r, ReadyProgram)]
    source_dims = [v for k, v in program._run.__globals__.items() if re.fullmatch(r"A\d+", k)]
    assert source_dims == [(1, 2, 0)]


@pytest.mark.parametrize("then", ["returned", "squeezed", "broadcast"])
def test_an_identity_permute_that_reaches_an_output_is_a_view(then):
    """permute(permute(w)) returned by the fusion beside a kernel's output, directly or
    through an op that hands its input back (an empty squeeze or broadcast), is a view of w,
    as in eager (a new tensor object over w's storage), never w itself (found by review)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.matmul(fd.ops.exp(x), w))
        same = fd.ops.permute(fd.ops.permute(w, [1, 0]), [1, 0])
        if then == "squeezed":
            same = fd.ops.squeeze(same, [])
        elif then == "broadcast":
            same = fd.ops.broadcast(same, [False, False])
        fd.add_output(same)
    g = torch.Generator().manual_seed(31)
    for _ in range(3):
        x, w = torch.randn(6, 4, generator=g), torch.randn(4, 5, generator=g)
        out, same = fd.execute([x, w])
        torch.testing.assert_close(out, torch.exp(x) @ w)
        assert same is not w and same.data_ptr() == w.data_ptr() and same.stride() == w.stride()
        torch.testing.assert_close(same, w)
    assert any(isinstance(r, ReadyProgram) for r in _ready(fd))


def test_a_permute_read_twice_is_kept():
    """permute(w) read by a second permute and by a matmul of its own stays a view: only a
    permute nothing else reads is composed away. Equal to eager on fresh data."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        wt = fd.ops.permute(w, [1, 0])
        e = fd.ops.exp(x)
        fd.add_output(fd.ops.matmul(e, fd.ops.permute(wt, [1, 0])))
        fd.add_output(fd.ops.exp(fd.ops.matmul(wt, fd.ops.permute(e, [1, 0]))))
    g = torch.Generator().manual_seed(37)
    for _ in range(3):
        x, w = torch.randn(6, 4, generator=g), torch.randn(4, 6, generator=g)
        a, b = fd.execute([x, w])
        torch.testing.assert_close(a, torch.exp(x) @ w)
        torch.testing.assert_close(b, torch.exp(w.t() @ torch.exp(x).t()))
    assert any(isinstance(r, ReadyProgram) for r in _ready(fd))

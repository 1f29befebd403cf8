"""Generated kernels inside stream loops (on chunk tensors) and on device shards, in one process:
what the host program launches, that kernels write the chunks of preallocated outputs, index
by local sizes (uneven, strided and empty chunks), pass the output check, fall back to ATen
where they cannot run, and that plans and meta inference still hold. The two-rank versions of
the main cases are in cases.py."""
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from fuser.evaluate import bind_inputs
from fuser.hostir import HostRunner
from fuser.hostir.lower import local_axes
from fuser.hostir.nodes import Evaluate, ForLoop, LaunchKernel
from fuser.ir import BinaryOp, BinaryOpType
from fuser.multidevice.transform import set_stream_allocation
from fuser.schedulers.plan import plan_kernel
from tests.multidevice.cases import (ELEMENTWISE_ATEN, _chunks, column_parallel_act_definition, exact, ints,
                                     loop_segments, profiled, shard, traced)
from tests.multidevice.test_plan import RecordingCommunicator, RecordingStreams, holds_table


def matmul_bias_relu(split_axis=0, s=3):
    """relu(a @ b + bias) with a's rows (split_axis 0) or the output's columns (1) on s streams."""
    with FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        bias = fd.define_tensor([-1], contiguity=True)
        c = fd.ops.matmul(a, b)
        fd.add_output(fd.ops.relu(fd.ops.add(c, bias)))
        tv = a if split_axis == 0 else c
        tv.outer_split(split_axis, s)
        tv.axis(split_axis).parallelize(ParallelType.stream)
    return fd


def test_a_stream_loop_launches_one_kernel_per_chunk_for_its_pointwise_exprs():
    fd = matmul_bias_relu()
    for t in (7, 6, 9):
        A, B, C = ints(t, 5), ints(5, 4, seed=1), ints(4, seed=2)
        (out,), events = profiled(lambda: fd.execute([A, B, C]))
        exact(out, torch.relu(A @ B + C), f"t={t}")
        assert not {n for n, _ in events} & ELEMENTWISE_ATEN
        _, seen = traced(fd, [A, B, C])
        assert [s[0] for w, s in seen if w == "LaunchKernel"] == [(c, 4) for c in _chunks(t, 3)]
    assert fd.cache.num_runtimes == 1
    assert [k for k, _ in loop_segments(fd)] == ["Evaluate", "LaunchKernel"]
    text = str(fd.cache.last_runtime.program)
    loop = text[text.index("FOR"):text.index("SetCurrentStream to Stream 0")]
    assert "LaunchKernel (Triton) over local extents [( ceilDiv(i0, 3) ), i3]:" in loop, text
    assert re.search(r"LaunchKernel.*\n.*\n.*= T\d+.*\n.*\+ T\d+.*\n.*\n.*= relu\(", loop), loop


def test_the_kernel_writes_into_the_chunk_of_the_preallocated_output():
    fd = matmul_bias_relu()
    A, B, C = ints(7, 5), ints(5, 4, seed=1), ints(4, seed=2)
    fd.execute([A, B, C])
    written = []
    (out,) = fd.cache.last_runtime.runner.run(
        [A, B, C], fd.cache._binder.bind([A, B, C]),
        trace=lambda what, x, values: written.append(values[0].data_ptr()) if what == "LaunchKernel" else None)
    exact(out, torch.relu(A @ B + C))
    row = out.stride(0) * out.element_size()
    assert written == [out.data_ptr() + r * row for r in (0, 3, 6)]


def test_column_chunks_are_strided_views_the_kernel_writes_through():
    fd = matmul_bias_relu(split_axis=1)
    for n in (7, 9):
        A, B, C = ints(4, 5), ints(5, n, seed=1), ints(n, seed=2)
        (out,), seen = traced(fd, [A, B, C])
        exact(out, torch.relu(A @ B + C), f"n={n}")
        assert [s[0] for w, s in seen if w == "LaunchKernel"] == [(4, c) for c in _chunks(n, 3)]


def test_an_inner_stream_split_runs_the_kernel_on_strided_chunks():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.cast(fd.ops.relu(fd.ops.mul(x, 3.0)), DataType.BFloat16))
        x.inner_split(0, 3)
        x.axis(1).parallelize(ParallelType.stream)  # chunk j: rows j, j + 3, ...
    X = ints(9, 4)
    (out,), seen = traced(fd, [X])
    exact(out, torch.relu(X * 3).bfloat16())
    assert [w for w, _ in seen] == ["LaunchKernel"] * 3


def test_an_empty_last_chunk_runs_through_aten():
    fd = matmul_bias_relu()
    A, B, C = ints(2, 5), ints(5, 4, seed=1), ints(4, seed=2)  # chunks of 1, 1 and 0 rows
    (out,), seen = traced(fd, [A, B, C])
    exact(out, torch.relu(A @ B + C))
    in_loop = [(w, s[0]) for w, s in seen][1:]  # after the bias broadcast
    assert in_loop == [("Evaluate", (1, 4)), ("LaunchKernel", (1, 4)), ("Evaluate", (1, 4)),
                       ("LaunchKernel", (1, 4)), ("Evaluate", (0, 4)), ("Evaluate", (0, 4)),
                       ("Evaluate", (0, 4))]


def test_reductions_in_a_loop_run_as_kernels_on_the_chunk_rows():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        w = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.linear(x, w)
        fd.add_output(fd.ops.sum(fd.ops.mul(y, 2.0), [1]))
        fd.add_output(fd.ops.max(y, [1]))
        x.outer_split(0, 3)
        x.axis(0).parallelize(ParallelType.stream)
    for t in (7, 5):
        X, W = ints(t, 6), ints(5, 6, seed=1)
        (s, m), seen = traced(fd, [X, W])
        exact(s, (F.linear(X, W) * 2).sum(1), f"sum, t={t}")
        exact(m, F.linear(X, W).amax(1), f"max, t={t}")
        kernels = [sh[0] for what, sh in seen if what == "LaunchKernel"]
        # one kernel a chunk: the sum and the max read the chunk's rows in one pass
        assert sorted(kernels) == sorted([(c,) for c in _chunks(t, 3)]), kernels
    assert fd.cache.num_runtimes == 1
    assert all(k == "LaunchKernel" for k, names in loop_segments(fd) if "LinearOp" not in names)


def test_a_kernel_output_of_the_wrong_size_fails_the_output_check_with_the_ir_extent(monkeypatch):
    fd = matmul_bias_relu()
    A, B, C = ints(6, 5), ints(5, 4, seed=1), ints(4, seed=2)
    fd.execute([A, B, C])
    launcher = next(op.launcher for op in _loop(fd).body if isinstance(op, LaunchKernel))

    def whole(inputs, scalars, values, device, extents, out_shapes, dests=None):
        return [torch.zeros(6, 4)]  # a kernel that ignores the chunking
    monkeypatch.setattr(launcher, "run_local", whole)
    fd.cache.last_runtime.runner._plans.clear()
    with pytest.raises(fuser.InternalError) as info:
        fd.execute([A, B, C])
    msg = str(info.value)
    assert re.search(r"produced size 6 on axis 0 of T\d+, but the IR extent .*ceilDiv\(i0, 3\)", msg), msg
    assert "relu(" in msg


def test_kernels_off_keep_the_loop_on_aten():
    fd = matmul_bias_relu()
    fd.execute([ints(6, 5), ints(5, 4, seed=1), ints(4, seed=2)])
    runtime = type(fd.cache.last_runtime)(fd.cache.prepared, torch.device("cpu"), use_kernels=False)
    assert not any(isinstance(op, LaunchKernel) for op in _loop_of(runtime.program).body)
    A, B, C = ints(7, 5), ints(5, 4, seed=1), ints(4, seed=2)
    (out,) = runtime.run([A, B, C], fd.cache._binder.bind([A, B, C]))
    exact(out, torch.relu(A @ B + C))


def test_the_kernel_runs_on_the_iterations_stream():
    fd = matmul_bias_relu()
    A, B, C = ints(6, 5), ints(5, 4, seed=1), ints(4, seed=2)
    fd.execute([A, B, C])
    log: list = []
    runner = HostRunner(fd.cache.last_runtime.program, torch.device("cpu"), streams=RecordingStreams(log))
    (out,) = runner.run([A, B, C], fd.cache._binder.bind([A, B, C]), RecordingCommunicator(log),
                        trace=lambda what, x, outs: log.append(f"{what} {tuple(outs[0].shape)}"))
    exact(out, torch.relu(A @ B + C))
    body = log[log.index("set S1"):log.index("set S0")]
    assert body == [line for k in (1, 2, 3) for line in
                    (f"set S{k}", f"S{k} waits E3", "Evaluate (2, 4)", "LaunchKernel (2, 4)")], log
    assert not any(holds_table(p) for p in runner._plans.values())


def test_meta_inference_gives_chunks_for_a_loop_with_kernels():
    fd = matmul_bias_relu()
    A, B, C = ints(7, 5), ints(5, 4, seed=1), ints(4, seed=2)
    fd.execute([A, B, C])
    seen = []
    (out,) = fd.cache.last_runtime.infer_meta(
        [A, B, C], bind_inputs(fd.cache.prepared, [A, B, C]),
        trace=lambda what, expr, outs: seen.append(tuple(outs[0].shape)))
    assert out.device.type == "meta" and out.shape == (7, 4)
    # the bias broadcast, then per chunk (3, 3, 1 rows) the matmul, the add and the relu
    assert seen == [(1, 4)] + [(3, 4)] * 6 + [(1, 4)] * 3, seen


def test_column_parallel_gelu_on_one_device_matches_eager():
    fd = column_parallel_act_definition(1, s=3, k=4, n=6, act="gelu")
    X, W, B = ints(8, 4), ints(6, 4, seed=1), ints(6, seed=2)
    (out,), events = profiled(lambda: fd.execute([shard(fd, 0, X), shard(fd, 1, W), shard(fd, 2, B)]))
    want = F.gelu(F.linear(X, W, B), approximate="tanh").bfloat16()
    torch.testing.assert_close(out.float(), want.float(), rtol=1e-2, atol=1e-2)
    assert not {n for n, _ in events} & ELEMENTWISE_ATEN
    source = "\n".join(fd.cache.last_runtime.triton_code())
    assert "_tanh_near_one(" in source and "# Generated by fuser" in source


# ---------------------------------------------------------------------------------------------
# local_axes: which tensor gives each loop axis its local extent, and when there is none


def _add_plan(with_chunk_allocation: bool):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.add(x, y))
    f = fd.fusion
    x, y = f.inputs()
    out = f.outputs()[0]
    for tv in (x, y, out):
        tv.outer_split(0, 3)
        tv.axis(0).parallelize(ParallelType.stream)
    for tv in ((x, out) if with_chunk_allocation else (x, y, out)):
        set_stream_allocation(tv)
    e = next(e for e in f.exprs if isinstance(e, BinaryOp) and e.kind is BinaryOpType.add)
    plan, why = plan_kernel([e], [x, y], [out], lambda e: True)
    assert plan is not None, why
    return plan, x, y


def test_local_axes_pick_a_tensor_per_loop_axis():
    plan, x, y = _add_plan(with_chunk_allocation=False)
    axes, why = local_axes(plan, with_streams=True)
    assert why == "" and [(tv.name, k) for tv, k in axes] == [(x.name, 0), (x.name, 1)]


def test_local_axes_refuse_tensors_that_disagree_on_a_loop_axis():
    plan, x, y = _add_plan(with_chunk_allocation=True)  # y whole, x one chunk: not one extent
    axes, why = local_axes(plan, with_streams=True)
    assert axes is None and re.search(rf"T{x.name} axis 0 and T{y.name} axis 0 share a loop axis", why), why
    assert local_axes(plan, with_streams=False)[0] is not None  # on whole local tensors they agree


def _loop_of(program):
    return next(op for op in program.body if isinstance(op, ForLoop) and any(
        isinstance(x, (Evaluate, LaunchKernel)) for x in op.body))


def _loop(fd):
    return _loop_of(fd.cache.last_runtime.program)


def test_fuser_dump_triton_prints_the_kernels_of_a_stream_loop(monkeypatch, capsys):
    monkeypatch.setenv("FUSER_DUMP", "triton")
    fd = matmul_bias_relu()
    A, B, C = ints(7, 5), ints(5, 4, seed=1), ints(4, seed=2)
    fd.execute([A, B, C])
    fd.execute([A, B, C])  # printed once, not again for the same source
    printed = capsys.readouterr().out
    assert printed.count("def fuser_pointwise") == 1, printed
    assert "Generated by fuser" in printed


@pytest.mark.parametrize("form", ["broadcast_in_dim", "expand", "negated", "exp"])
def test_an_expanded_broadcast_meets_the_chunks_of_a_stream_loop(form):
    # the expanded operand (or an op's dense copy of it) keeps the loop's whole row count while
    # the op runs on a chunk of rows: ATen refused it (an InternalError); its one value a
    # column now broadcasts
    g = torch.Generator().manual_seed(3)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        r = fd.define_tensor([-1], contiguity=True)
        e = (fd.ops.expand(fd.ops.broadcast(r, [True, False]), x.shape()) if form == "expand"
             else fd.ops.broadcast_in_dim(r, x.shape(), [1]))
        y = {"negated": lambda: fd.ops.add(x, fd.ops.neg(e)),
             "exp": lambda: fd.ops.add(fd.ops.exp(e), fd.ops.exp(x))}.get(form, lambda: fd.ops.add(x, e))()
        fd.add_output(y)
        y.outer_split(0, 3)
        y.axis(0).parallelize(ParallelType.stream)
    want = {"negated": lambda x, r: x - r, "exp": lambda x, r: r.exp() + x.exp()}.get(form, lambda x, r: x + r)
    for rows in (6, 7, 7, 6):
        x_in, r_in = torch.randn(rows, 4, generator=g), torch.randn(4, generator=g)
        (out,) = fd.execute([x_in, r_in])
        torch.testing.assert_close(out, want(x_in, r_in))


def test_a_broadcast_output_split_onto_streams_is_never_left_unwritten():
    # an op of the expanded operand alone, its broadcast axis split onto streams: narrowing the
    # operand to the chunk's one row left the other rows of the output unwritten (garbage)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        r = fd.define_tensor([-1], contiguity=True)
        y = fd.ops.mul(fd.ops.broadcast_in_dim(r, x.shape(), [1]), 2.0)
        fd.add_output(y)
        y.outer_split(0, 3)
        y.axis(0).parallelize(ParallelType.stream)
    x_in, r_in = torch.randn(6, 4), torch.randn(4)
    try:
        (out,) = fd.execute([x_in, r_in])
    except fuser.FuserError:
        return  # (refused loudly: what this test guards against is a silent wrong result)
    torch.testing.assert_close(out, (r_in * 2).expand(6, 4))

"""Host plans (hostir/plan.py) under review: a plan is reused only for values that compute the
same, a loop that raises still orders the caller's stream after its side streams, and the
benchmark's hand-written reference chunks rows as fuser does. The multi-rank findings (allgather
buffers gloo takes, an uneven shard) are cases in cases.py, run on 2 and 4 ranks."""
import importlib.machinery
import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from fuser.hostir import HostRunner
from tests.multidevice.cases import exact, ints, seed_definition
from tests.multidevice.test_plan import RecordingCommunicator, RecordingStreams

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_plan_is_not_reused_for_a_scalar_that_compares_equal_but_computes_differently():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 4], contiguity=True)
        s = fd.define_scalar(dtype=DataType.Float)
        fd.add_output(fd.ops.div(x, s))
        x.outer_split(0, 2)
        x.axis(0).parallelize(ParallelType.stream)
    X = ints(4, 4).abs() + 1
    for value in (0.0, -0.0, 2.0, float("nan"), float("nan"), -0.0):
        out = fd.execute([X, value])[0]
        torch.testing.assert_close(out, X / value, rtol=0, atol=0, equal_nan=True, msg=f"x / {value!r}")
        assert torch.equal(out.signbit(), (X / value).signbit()), f"x / {value!r}: {out}"
    # one plan per value that computes differently; NaN and -0.0 reuse theirs
    assert len(fd.cache.last_runtime.runner._plans) == 4


def test_a_loop_that_raises_still_makes_stream_0_wait_for_its_side_streams(monkeypatch):
    import fuser.hostir.plan as plan

    fd = seed_definition(1, 3, 2)
    x, w = ints(6, 8), ints(2, 8, seed=1)
    fd.execute([x, w])
    log: list = []
    runner = HostRunner(fd.cache.last_runtime.program, torch.device("cpu"), streams=RecordingStreams(log))
    table = fd.cache._binder.bind([x, w])
    real, calls = plan.evaluate_expr_into, []

    def second_chunk_fails(expr, args, ctx, dsts):
        calls.append(1)
        if len(calls) == 2:
            log.append("raise")
            raise fuser.FusionInputError("chunk 1 failed")
        return real(expr, args, ctx, dsts)
    monkeypatch.setattr(plan, "evaluate_expr_into", second_chunk_fails)
    with pytest.raises(fuser.FusionInputError, match="chunk 1 failed"):
        runner.run([x, w], table, RecordingCommunicator(log))
    after = log[log.index("raise") + 1:]
    # the output buffer is freed with the exception: Stream 0 (whose allocations may reuse it)
    # must wait for the chunk-0 work queued on S1 and for S2 before the caller goes on
    assert after == ["record E0 on S1", "S0 waits E0", "record E1 on S2", "S0 waits E1",
                     "record E2 on S3", "S0 waits E2", "set S0"], after
    monkeypatch.setattr(plan, "evaluate_expr_into", real)
    log.clear()
    (out,) = runner.run([x, w], table, RecordingCommunicator(log))
    exact(out, F.linear(x, w), "the next call")
    assert log[0] == "record E3 on S0" and log[-2:] == ["record E2 on S3", "S0 waits E2"], log


def load_bench(monkeypatch):
    monkeypatch.setenv("FUSER_BENCH_ONE_PROCESS", "1")  # import it without relaunching
    path = os.path.join(ROOT, "scripts", "bench_multidevice")
    loader = importlib.machinery.SourceFileLoader("bench_multidevice", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("t,s", [(7, 3), (6, 4), (8, 8), (2, 3)])
def test_the_benchmark_reference_computes_every_row_when_s_does_not_divide_t(monkeypatch, t, s):
    bench = load_bench(monkeypatch)
    x, w = ints(t, 8), ints(2, 8, seed=1)
    exact(bench.hand_written(x, w, s, [], False), F.linear(x, w), f"t={t}, s={s}")
    fd = bench.fuser_definition(2, 1, s, DataType.Float)
    exact(fd.execute([x, w])[0], bench.hand_written(x, w, s, [], False), "fuser vs hand-written")

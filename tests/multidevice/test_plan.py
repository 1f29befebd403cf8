"""The compiled host program (hostir/plan.py): the stream and event calls and collectives one
execution issues (read back through a recording stand-in for CUDA streams, so they are checked
without a GPU), plans reused per sizes, and the output check still in force."""
import re

import pytest
import torch
import torch.nn.functional as F

import fuser
from fuser.hostir import HostRunner
from fuser.multidevice import Communicator
from tests.multidevice.cases import exact, ints, seed_definition


class RecordingStreams:
    """The methods of hostir.streams.CudaStreams, logging each call instead of making it.
    Streams are named S0 (the caller's) and S1.. (the pool), events E0..."""

    def __init__(self, log: list):
        self.log = log

    def enter(self):
        return None  # the caller's device is this one: nothing to restore

    def leave(self, previous):
        self.log.append(f"device back to {previous}")

    def current(self):
        return "S0"

    def set(self, stream):
        self.log.append(f"set {stream}")

    def pool(self, count):
        return [f"S{k + 1}" for k in range(count)]

    def events(self, count):
        return [f"E{k}" for k in range(count)]

    def record(self, event, stream):
        self.log.append(f"record {event} on {stream}")

    def wait_event(self, stream, event):
        self.log.append(f"{stream} waits {event}")


class RecordingCommunicator(Communicator):
    """A world of one process that logs how each collective is posted."""

    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def allreduce(self, tensor, team, op="sum", async_op=True):
        self.log.append(f"allreduce {tuple(tensor.shape)} async_op={async_op}")
        return super().allreduce(tensor, team, op, async_op=async_op)


def seed_run(t=6, s=3):
    """A runner of the seed's host program with recording streams and communicator."""
    fd = seed_definition(1, s, 2)
    x, w = ints(t, 8), ints(2, 8, seed=1)
    fd.execute([x, w])
    log: list = []
    runner = HostRunner(fd.cache.last_runtime.program, torch.device("cpu"), streams=RecordingStreams(log))
    table = fd.cache._binder.bind([x, w])

    def run():
        log.clear()
        (out,) = runner.run([x, w], table, RecordingCommunicator(log),
                            trace=lambda what, expr, outs: log.append(f"{what} {tuple(outs[0].shape)}"))
        exact(out, F.linear(x, w))
        return list(log)
    return runner, run


def test_one_execution_issues_the_hand_written_stream_calls():
    runner, run = seed_run(t=6, s=3)
    per_chunk = [["set S{k}", "S{k} waits E3", "Evaluate (2, 2)", "allreduce (2, 2) async_op=False",
                  "Allreduce (2, 2)"]]
    expected = ["record E3 on S0"]  # Stream 0 queues nothing in the loop: one event for all
    for k in (1, 2, 3):
        expected += [line.format(k=k) for line in per_chunk[0]]
    expected += ["set S0"]  # once, after the loop
    for k in (1, 2, 3):
        expected += [f"record E{k - 1} on S{k}", f"S0 waits E{k - 1}"]
    assert run() == expected
    assert run() == expected  # the same plan again: same calls, same events


def test_more_chunks_than_streams_reuse_the_pool_and_join_each_stream_once():
    runner, run = seed_run(t=20, s=10)
    log = run()
    sets = [line for line in log if line.startswith("set ")]
    assert sets == [f"set S{k % 8 + 1}" for k in range(10)] + ["set S0"]
    joins = [line for line in log if line.startswith("S0 waits")]
    assert joins == [f"S0 waits E{k}" for k in range(8)]
    assert log.count("record E8 on S0") == 1


def test_plans_are_made_per_sizes_and_reused():
    fd = seed_definition(1, 3, 2)
    w = ints(2, 8, seed=1)
    for t in (6, 7, 6, 7, 9):
        x = ints(t, 8)
        exact(fd.execute([x, w])[0], F.linear(x, w), f"t={t}")
    runner = fd.cache.last_runtime.runner
    assert len(runner._plans) == 3 and fd.cache.num_runtimes == 1


def test_a_conflicting_extent_still_names_both_inputs():
    with fuser.FusionDefinition() as fd:
        a = fd.define_tensor([-1, -1], contiguity=True)
        b = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.add(a, b))
        a.outer_split(0, 2)
        a.axis(0).parallelize(fuser.ParallelType.stream)
    fd.execute([ints(4, 3), ints(4, 3, seed=1)])
    with pytest.raises(fuser.ExtentConflictError, match=r"input 0 \(T0\) axis 0.*input 1 \(T1\) axis 0"):
        fd.execute([ints(4, 3), ints(6, 3, seed=1)])


def test_a_chunk_of_the_wrong_size_fails_the_output_check_with_the_ir_extent(monkeypatch):
    import fuser.hostir.plan as plan

    fd = seed_definition(1, 3, 2)
    x, w = ints(6, 8), ints(2, 8, seed=1)
    fd.execute([x, w])

    def whole(*args):  # a linear that ignores the chunking: the seed's bug
        return [torch.zeros(6, 2)]
    monkeypatch.setattr(plan, "evaluate_expr_into", whole)
    fd.cache.last_runtime.runner._plans.clear()
    with pytest.raises(fuser.InternalError) as info:
        fd.execute([x, w])
    msg = str(info.value)
    assert re.search(r"produced size 6 on axis 0 of T\d+, but the IR extent .*ceilDiv\(i0, 3\)", msg), msg
    assert "linear(" in msg


def holds_table(plan) -> bool:
    """Whether any step of `plan` reaches a BindingTable (through closures, lists, attributes)."""
    from fuser.evaluate.binding import BindingTable

    seen: set[int] = set()

    def reach(v) -> bool:
        if id(v) in seen:
            return False
        seen.add(id(v))
        if isinstance(v, BindingTable) or isinstance(getattr(v, "table", None), BindingTable):
            return True
        if isinstance(v, (list, tuple)):
            return any(reach(x) for x in v)
        return callable(v) and any(reach(c.cell_contents) for c in (getattr(v, "__closure__", None) or ()))
    return any(reach(step) for step in plan.steps)


def test_a_plan_keeps_no_binding_table():
    runner, run = seed_run()
    run()
    (plan,) = runner._plans.values()
    assert not holds_table(plan)


def test_an_inner_stream_split_takes_strided_chunks_and_reports_an_uneven_size():
    with fuser.FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.relu(x))
        x.inner_split(0, 3)
        x.axis(1).parallelize(fuser.ParallelType.stream)  # chunk j: rows j, j + 3, ...
    for t in (6, 9):
        X = ints(t, 4)
        exact(fd.execute([X])[0], torch.relu(X), f"t={t}")
    assert not any(holds_table(p) for p in fd.cache.last_runtime.runner._plans.values())
    with pytest.raises(fuser.FusionInputError, match="does not divide evenly by the split factor 3"):
        fd.execute([ints(7, 4)])


class _OtherDeviceStreams(RecordingStreams):
    """As if the caller's current device were another one than the fusion's."""

    def enter(self):
        return "cuda:7"


def test_the_callers_current_device_is_restored_after_an_execution(monkeypatch):
    fd = seed_definition(1, 3, 2)
    x, w = ints(6, 8), ints(2, 8, seed=1)
    fd.execute([x, w])
    log: list = []
    runner = HostRunner(fd.cache.last_runtime.program, torch.device("cpu"), streams=_OtherDeviceStreams(log))
    table = fd.cache._binder.bind([x, w])
    (out,) = runner.run([x, w], table, RecordingCommunicator(log))
    exact(out, F.linear(x, w))
    assert log[-1] == "device back to cuda:7"
    # also when a step fails half way through the loop
    import fuser.hostir.plan as plan_module

    def failing(*args, **kwargs):
        raise RuntimeError("injected")
    monkeypatch.setattr(plan_module, "evaluate_expr_into", failing)
    monkeypatch.setattr(plan_module, "evaluate_expr", failing)
    runner = HostRunner(fd.cache.last_runtime.program, torch.device("cpu"), streams=_OtherDeviceStreams(log))
    log.clear()
    with pytest.raises(RuntimeError, match="injected"):
        runner.run([x, w], table, RecordingCommunicator(log))
    assert log[-1] == "device back to cuda:7"

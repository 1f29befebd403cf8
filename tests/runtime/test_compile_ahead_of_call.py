"""Compiling a definition's kernels before its first call, from meta tensors of its inputs'
layouts (`FusionDefinition.compile_ahead`, used by fuser.jit to compile a backward's kernels
while the forward runs): the execute that follows finds its runtime planned and its kernels
compiled with its own launch arguments, compiles none again, and waits for a compile that is
still under way in another thread. The interpreter compiles nothing, so the compile jobs are
recorded (the `recorded` fixture, tests/compile_jobs.py)."""
import threading

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.errors import FusionInputError

from ..compile_jobs import RecordingStep, launched_were_compiled
from .test_compile_ahead import three_kernels_around_a_matmul

CPU = torch.device("cpu")


def _meta(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor of t's layout, its storage offset counting elements past an aligned
    address (as frontend/ahead.py makes them from traced values)."""
    offset = (t.data_ptr() % 16) // t.element_size()
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return torch.empty(offset + span, dtype=t.dtype, device="meta").as_strided(t.shape, t.stride(), offset)


def test_the_call_after_finds_every_kernel_compiled_with_its_arguments(recorded):
    fd = three_kernels_around_a_matmul()
    x = torch.randn(24 * 40 + 3, dtype=torch.bfloat16)[3:].view(24, 40)  # unaligned: its meta says so
    w = torch.randn(40, 48, dtype=torch.bfloat16)
    jobs = fd.compile_ahead([_meta(x), _meta(w)], CPU)
    assert jobs >= 2 and len(recorded) == jobs and all(e[0] == "compile" for e in recorded)
    assert fd.cache.num_runtimes == 1 and not fd.cache.runtimes()[0].compile_ahead_pending
    compiles = list(recorded)
    recorded.clear()
    rows, cols = fd.execute([x, w])
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(cols, m.sum(0), rtol=1e-4, atol=1e-3)
    assert fd.cache.num_runtimes == 1  # the runtime planned ahead
    assert recorded[0][0] == "launch"  # no pass ahead at the call (a launch of two kernels
    launched_were_compiled(recorded, compiles)  # asks for both at its launch, compiled then)
    assert fd.compile_ahead([_meta(x), _meta(w)], CPU) == 0  # planned already


def test_a_single_kernel_fusion_is_compiled_ahead_too(recorded):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.relu(x), [1]))
    x = torch.randn(6, 10)
    assert fd.compile_ahead([_meta(x)], CPU) == 1
    compiles = list(recorded)
    recorded.clear()
    torch.testing.assert_close(fd.execute([x])[0], torch.relu(x).sum(1))
    assert [e[0] for e in recorded] == ["launch"]
    launched_were_compiled(recorded, compiles)


def test_a_layout_guessed_wrong_costs_a_compile_not_a_wrong_result(recorded):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], dtype=DataType.BFloat16)  # any strides
        fd.add_output(fd.ops.sum(fd.ops.mul(fd.ops.cast(x, DataType.Float), 2.0), [1]))
        fd.add_output(fd.ops.sum(fd.ops.cast(x, DataType.Float), [0]))
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    assert fd.compile_ahead([_meta(x.t().contiguous().t())], CPU) > 0  # guessed column-major
    rows, cols = fd.execute([x])
    torch.testing.assert_close(rows, x.float().sum(1) * 2.0, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(cols, x.float().sum(0), rtol=1e-4, atol=1e-3)
    assert fd.cache.num_runtimes == 2  # its own runtime, compiled at its call


def test_an_execute_during_the_compile_waits_for_it(recorded, monkeypatch):
    """The execute of the layout being compiled in another thread waits for that compile,
    then launches what it compiled: each kernel compiled once."""
    gate, inside = threading.Event(), threading.Event()

    class SlowStep(RecordingStep):
        def precompile(self, args):
            inside.set()
            assert gate.wait(30)
            super().precompile(args)
    monkeypatch.setattr(launch, "_Step", SlowStep)
    fd = three_kernels_around_a_matmul()
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    ahead = threading.Thread(target=fd.compile_ahead, args=([_meta(x), _meta(w)], CPU))
    ahead.start()
    assert inside.wait(30)  # the compile is under way
    results = []
    caller = threading.Thread(target=lambda: results.append(fd.execute([x, w])))
    caller.start()
    caller.join(0.5)
    assert caller.is_alive() and not any(e[0] == "launch" for e in recorded)  # waiting
    gate.set()
    ahead.join(30)
    caller.join(30)
    (rows, cols), = results
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)
    compiles = [e for e in recorded if e[0] == "compile"]
    assert len({(id(fn), tuple(map(repr, a))) for _, fn, a in compiles}) == len(compiles)  # none twice
    first_launch = next(k for k, e in enumerate(recorded) if e[0] == "launch")
    assert all(e[0] == "compile" for e in recorded[:first_launch]) and fd.cache.num_runtimes == 1


def test_compile_ahead_compiles_nothing_on_the_interpreter():
    fd = three_kernels_around_a_matmul()  # (no `recorded`: the interpreter is not a target)
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    assert fd.compile_ahead([_meta(x), _meta(w)], CPU) == 0 and fd.cache.num_runtimes == 0
    rows, _ = fd.execute([x, w])
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)


def test_compile_ahead_checks_its_inputs_as_execute_does(recorded):
    fd = three_kernels_around_a_matmul()
    with pytest.raises(FusionInputError, match=r"input 0 \(T0\).*dtype.*(BFloat16|bfloat16)"):
        fd.compile_ahead([torch.empty(4, 8, device="meta"), torch.empty(8, 2, dtype=torch.bfloat16, device="meta")], CPU)
    with pytest.raises(FusionInputError, match=r"input 1 \(T1\)"):
        fd.compile_ahead([torch.empty(4, 8, dtype=torch.bfloat16, device="meta"), torch.empty(8, device="meta")], CPU)
    assert fd.cache.num_runtimes == 0

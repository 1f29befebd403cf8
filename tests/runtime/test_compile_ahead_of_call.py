"""Compiling a definition's kernels before its first call, from meta tensors of its inputs'
layouts (`FusionDefinition.compile_ahead`, used by fuser.jit to compile a backward's kernels
while the forward runs): the execute that follows finds its runtime planned and its kernels
compiled with its own launch arguments, compiles none again, and waits for a compile that is
still under way in another thread. The interpreter compiles nothing, so the compile jobs are
recorded (the `recorded` fixture, tests/compile_jobs.py)."""
import os
import signal
import threading

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import launch
from fuser.errors import FusionInputError
from fuser.runtime import cache
from fuser.runtime.ahead import meta_like

from ..compile_jobs import Gate, RecordingStep, launched_were_compiled
from .test_compile_ahead import three_kernels_around_a_matmul

CPU = torch.device("cpu")


def _execute_during_compile_ahead(fd, inputs: list, recorded: list, monkeypatch) -> list:
    """`fd.execute(inputs)` started in a thread while another compiles ahead for their layouts,
    its compiles held: checks that the execute waits (launches nothing) until they are done;
    its outputs."""
    gate = Gate().hold(monkeypatch)
    ahead = threading.Thread(target=fd.compile_ahead, args=([meta_like(t) for t in inputs], CPU))
    ahead.start()
    results = []
    caller = threading.Thread(target=lambda: results.append(fd.execute(inputs)))
    try:
        assert gate.inside.wait(30)  # the compile is under way
        caller.start()
        caller.join(0.5)
        assert caller.is_alive() and not any(e[0] == "launch" for e in recorded)  # waiting
    finally:
        gate.open()
    ahead.join(30)
    caller.join(30)
    (outs,) = results
    return outs


def test_the_call_after_finds_every_kernel_compiled_with_its_arguments(recorded):
    fd = three_kernels_around_a_matmul()
    x = torch.randn(24 * 40 + 3, dtype=torch.bfloat16)[3:].view(24, 40)  # unaligned: its meta says so
    w = torch.randn(40, 48, dtype=torch.bfloat16)
    jobs = fd.compile_ahead([meta_like(x), meta_like(w)], CPU)
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
    assert fd.compile_ahead([meta_like(x), meta_like(w)], CPU) == 0  # planned already


def test_a_single_kernel_fusion_is_compiled_ahead_too(recorded):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.relu(x), [1]))
    x = torch.randn(6, 10)
    assert fd.compile_ahead([meta_like(x)], CPU) == 1
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
    assert fd.compile_ahead([meta_like(x.t().contiguous().t())], CPU) > 0  # guessed column-major
    rows, cols = fd.execute([x])
    torch.testing.assert_close(rows, x.float().sum(1) * 2.0, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(cols, x.float().sum(0), rtol=1e-4, atol=1e-3)
    assert fd.cache.num_runtimes == 2  # its own runtime, compiled at its call


def test_an_execute_during_the_compile_waits_for_it(recorded, monkeypatch):
    """The execute of the layout being compiled in another thread waits for that compile,
    then launches what it compiled: each kernel compiled once."""
    fd = three_kernels_around_a_matmul()
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    rows, cols = _execute_during_compile_ahead(fd, [x, w], recorded, monkeypatch)
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
    assert fd.compile_ahead([meta_like(x), meta_like(w)], CPU) == 0 and fd.cache.num_runtimes == 0
    with pytest.raises(FusionInputError, match="2 inputs but compile_ahead got 1"):
        fd.compile_ahead([meta_like(x)], CPU)  # checked there too
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


def test_a_failed_compile_ahead_leaves_the_call_to_compile(recorded, monkeypatch):
    fd = three_kernels_around_a_matmul()
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    monkeypatch.setattr(cache.FusionRuntime, "compile_ahead_of_call",
                        lambda *a: (_ for _ in ()).throw(RuntimeError("the pass broke")))
    with pytest.raises(RuntimeError, match="the pass broke"):
        fd.compile_ahead([meta_like(x), meta_like(w)], CPU)
    rows, _ = fd.execute([x, w])  # does not wait for the failed compile
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)
    assert fd.cache.num_runtimes == 1 and fd.cache.runtimes()[0].warming is None


def test_a_definition_of_scalars_alone_compiles_nothing_ahead(recorded):
    """Its runtime's key holds no device: one made ahead for the GPU would serve a CPU call."""
    with FusionDefinition() as fd:
        a = fd.define_scalar(dtype=DataType.Float)
        fd.add_output(fd.ops.full([4], fd.ops.mul(a, 2.0), DataType.Float))
    assert fd.compile_ahead([1.5], CPU) == 0 and fd.cache.num_runtimes == 0
    (out,) = fd.execute([1.5])
    assert out.device.type == "cpu"
    torch.testing.assert_close(out, torch.full((4,), 3.0))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_during_a_compile_ahead_does_not_wait_for_it(recorded, monkeypatch):
    """The child has the runtime being compiled but not the thread compiling it."""
    gate = Gate(only_pid=os.getpid()).hold(monkeypatch)  # (the child compiles straight through)
    fd = three_kernels_around_a_matmul()
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    ahead = threading.Thread(target=fd.compile_ahead, args=([meta_like(x), meta_like(w)], CPU), daemon=True)
    ahead.start()
    try:
        assert gate.inside.wait(30)
        pid = os.fork()
        if pid == 0:  # the child: its execute must return (an alarm ends it otherwise)
            code = 1
            try:
                signal.alarm(60)
                rows, _ = fd.execute([x, w])
                m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
                code = 0 if torch.allclose(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        gate.open()
    ahead.join(30)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_fusions_alike_compiled_ahead_at_once_compile_each_kernel_one_at_a_time(recorded, monkeypatch):
    """Two definitions alike (a model's layers) share their kernels: compiled ahead in two
    threads at once, a kernel is not compiled by both at the same time (the second waits,
    then finds it compiled)."""
    import time

    lock, active, most = threading.Lock(), {}, {}
    together = threading.Barrier(2)  # the two threads' first compiles meet (or time out)

    class CountingStep(RecordingStep):
        def precompile(self, args, load=True):
            key = (id(self.fn), tuple(repr(a) if not hasattr(a, "dtype") else a.dtype for a in args))
            with lock:
                active[key] = active.get(key, 0) + 1
                most[key] = max(most.get(key, 0), active[key])
            try:
                together.wait(1.0)
            except threading.BrokenBarrierError:
                pass
            time.sleep(0.05)
            with lock:
                active[key] -= 1
            super().precompile(args, load)
    monkeypatch.setattr(launch, "_Step", CountingStep)
    from fuser.codegen import parallel_compile

    monkeypatch.setenv("FUSER_COMPILE_THREADS", "8")  # every job of both passes at once
    monkeypatch.setattr(parallel_compile, "_pool", None)
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    fds = [three_kernels_around_a_matmul() for _ in range(2)]
    threads = [threading.Thread(target=fd.compile_ahead, args=([meta_like(x), meta_like(w)], CPU)) for fd in fds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most and max(most.values()) == 1, most
    assert len({id(fn) for _, fn, _ in recorded}) == len(most)  # (shared kernels: each asked twice)
    for fd in fds:
        rows, _ = fd.execute([x, w])
        m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
        torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)


def test_a_background_compile_is_patient_in_its_jobs_too(monkeypatch):
    """Jobs that compile_together hands to its threads wait for the compile worker as their
    caller does (frontend/ahead.py compiles with `side_by_side(patient=True)`)."""
    from fuser.codegen import compile_pool, parallel_compile

    monkeypatch.setenv("FUSER_PARALLEL_COMPILE", "1")
    seen = []
    job = lambda: seen.append(compile_pool.patient())  # noqa: E731
    with compile_pool.side_by_side(patient=True):
        parallel_compile.compile_together([job, job])
    parallel_compile.compile_together([job, job])
    assert seen == [True, True, False, False]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_call_after_finds_its_runtime_and_kernels(monkeypatch, tmp_path):
    """"cuda" (the default) stands for the current GPU, as a real tensor's device reads: the
    execute that follows finds the runtime made ahead and compiles no kernel."""
    from triton.runtime.jit import JITFunction

    if not hasattr(JITFunction, "_do_compile"):
        pytest.skip("this Triton compiles elsewhere")
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))  # no remembered autotune choice
    misses = []
    real_compile = JITFunction._do_compile

    def counting(self, *args, **kwargs):
        compiled = real_compile(self, *args, **kwargs)
        if compiled is not None:  # (None: a compile worker was asked to compile it)
            misses.append(self)
        return compiled
    monkeypatch.setattr(JITFunction, "_do_compile", counting)
    fd = three_kernels_around_a_matmul()
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 2048, device="cuda", dtype=torch.bfloat16)
    assert fd.compile_ahead([meta_like(x), meta_like(w)]) >= 2
    compiled_ahead = len(misses)
    rows, cols = fd.execute([x, w])
    assert len(misses) == compiled_ahead, "kernels compiled at the call"
    (runtime,) = fd.cache.runtimes()
    assert runtime.device == torch.device("cuda", torch.cuda.current_device())
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-3, atol=1e-1)
    torch.testing.assert_close(cols, m.sum(0), rtol=1e-3, atol=1e-1)


def test_a_single_kernel_execute_during_the_compile_waits_for_it(recorded, monkeypatch):
    """A fusion of one launch has no pass of its own to wait in: its execute waits on the
    runtime's event."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.relu(x), [1]))
    x = torch.randn(6, 10)
    (out,) = _execute_during_compile_ahead(fd, [x], recorded, monkeypatch)
    torch.testing.assert_close(out, torch.relu(x).sum(1))
    assert [e[0] for e in recorded] == ["compile", "launch"]

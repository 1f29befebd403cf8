"""Launch forms tuned after the first call (codegen/tuning.py): the first call runs the default
form while the others compile in the background; the first call after those compiles are done
times every form and runs the fastest from then on. On the interpreter, made a background
target here, the compiles are recorded and held (tests/compile_jobs.py) rather than run."""
import json
import os
import threading

import pytest
import torch

from fuser.codegen import autotune, compile_pool, launch, tuning
from fuser.codegen.ahead import CompileJobs
from fuser.runtime import cache

from tests.compile_jobs import Gate, no_threads, passes_in_forked_child


@pytest.fixture
def tuned(recorded, tmp_path, monkeypatch):
    """LayerNorm's forward over 100 columns tuned on the interpreter in the background (two
    forms: 8 warps, the default, and 4), a timer that prefers 4 warps; yields the list of
    (warps of each launch) and the choices' file."""
    from fuser.schedulers import heuristics

    monkeypatch.setattr(heuristics, "AUTOTUNE_WARPS_MIN_COLS", 64)
    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter",))
    monkeypatch.setattr(tuning, "BACKGROUND_TARGETS", ("interpreter",))
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    monkeypatch.setattr(tuning, "_buckets", {})  # (no other test's calls of these kernels)
    times = iter([2.0, 1.0])
    monkeypatch.setattr(autotune, "cuda_time_ms", lambda launch_once, device: (launch_once(), next(times))[1])
    warps = []
    real_call = launch.Launch.__call__
    monkeypatch.setattr(launch.Launch, "__call__",
                        lambda self, *a, **k: warps.append(self.steps[0][0].kwargs["num_warps"]) or real_call(self, *a, **k))
    yield warps, tmp_path / "autotune.json"


def _layernorm():
    from benchmarks import fuser_defs

    fd = fuser_defs.layernorm_fwd.__wrapped__()
    x = torch.randn(24, 100, dtype=torch.bfloat16)
    w, b = torch.randn(100, dtype=torch.bfloat16), torch.randn(100, dtype=torch.bfloat16)
    want = torch.nn.functional.layer_norm(x.float(), (100,), w.float(), b.float())
    return fd, [x, w, b], want


def test_the_default_runs_until_the_other_forms_compiled_then_the_fastest(tuned, recorded, monkeypatch):
    """The first call runs the default; the second starts the other form's compile (held here)
    and runs the default; the first call after the compile times both and runs the faster."""
    warps, choices = tuned
    gate = Gate().hold(monkeypatch)
    fd, args, want = _layernorm()
    try:
        (y,) = fd.execute(args)  # the default, compiled at its launch
        assert warps == [8] and not gate.inside.is_set() and not choices.exists()
        (y2,) = fd.execute(args)  # 4 warps compiling from here
        assert gate.inside.wait(30) and warps == [8, 8]
        fd.execute(args)
        assert warps == [8, 8, 8]  # not compiled yet: not timed
        assert not fd.cache.ready_calls()  # (none made for a launch not settled)
    finally:
        gate.open()
    assert tuning.finish_tuning(30)
    compiled = [e for e in recorded if e[0] == "compile"]
    assert len(compiled) == 1  # the other form's kernel alone
    (y3,) = fd.execute(args)  # times both (the default first), then runs the faster
    assert warps[3:] == [8, 4, 4] and list(json.loads(choices.read_text()).values()) == [1]
    assert len(fd.cache.ready_calls()) == 1
    fd.execute(args)
    assert warps[-1] == 4 and len(warps) == 7  # timed once
    for out in (y, y2, y3):
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=5e-2)


def test_finish_tuning_starts_the_compiles_a_second_call_would(tuned, recorded):
    warps, choices = tuned
    fd, args, want = _layernorm()
    fd.execute(args)
    assert not [e for e in recorded if e[0] == "compile"]
    assert tuning.finish_tuning(30)
    assert len([e for e in recorded if e[0] == "compile"]) == 1
    (y,) = fd.execute(args)
    assert warps == [8, 8, 4, 4] and choices.exists()
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=5e-2)


def test_a_remembered_choice_runs_at_once_and_compiles_nothing_in_the_background(tuned, recorded):
    warps, choices = tuned
    fd, args, want = _layernorm()
    fd.execute(args)
    assert tuning.finish_tuning(30)
    fd.execute(args)
    assert warps == [8, 8, 4, 4]  # tuned at the second call
    recorded.clear()
    autotune.CHOICES.memory = None  # a new process reads the file
    fd2, args2, want2 = _layernorm()
    (y,) = fd2.execute(args2)
    assert warps[-1] == 4 and not [e for e in recorded if e[0] == "compile"]
    torch.testing.assert_close(y.float(), want2, rtol=2e-2, atol=5e-2)


def test_compiling_ahead_takes_the_default_alone_unless_in_the_background(tuned, recorded):
    """A runtime's compile-ahead pass on the caller's thread compiles the default form (the
    others compile after the first call); a background thread's (a jitted backward's) compiles
    every form, to be timed sooner."""
    fd, args, _ = _layernorm()
    executor = cache.FusionExecutorCache(fd.fusion)
    table = executor._binder.bind(args)
    (launcher,) = executor._runtime_for(args).launchers.values()
    jobs = CompileJobs()
    launcher.prepare(args, {}, table.values, args[0].device, ahead_jobs=jobs)
    assert len(jobs.jobs) == 1
    jobs = CompileJobs()
    with compile_pool.side_by_side(patient=True):
        launcher.prepare(args, {}, table.values, args[0].device, ahead_jobs=jobs)
    assert len(jobs.jobs) == 2


def test_tuning_in_background_is_off_under_its_variable(tuned, monkeypatch):
    warps, choices = tuned
    monkeypatch.setenv("FUSER_BACKGROUND_COMPILE", "0")
    fd, args, want = _layernorm()
    (y,) = fd.execute(args)
    assert warps == [8, 4, 4]  # timed at the first call
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=5e-2)


def test_finish_tuning_waits_for_every_batch_and_times_out(monkeypatch):
    gate_open = threading.Event()
    done = tuning.compile_in_background([lambda: gate_open.wait(30), lambda: None], torch.device("cpu"))
    assert not tuning.finish_tuning(0.05) and not done.is_set()
    gate_open.set()
    assert tuning.finish_tuning(30) and done.is_set()
    assert tuning.compile_in_background([], torch.device("cpu")).is_set()


def test_a_failing_job_still_ends_its_batch():
    def fails():
        raise RuntimeError("a compile error, left to the launch")
    assert tuning.compile_in_background([fails], torch.device("cpu")).wait(30)
    assert tuning.finish_tuning(30)



def test_a_batch_no_thread_can_take_is_done_and_not_waited_for(monkeypatch):
    """Where no thread can be started, the batch's jobs are dropped (the launches that need the
    kernels compile them) and its event is set: `finish_tuning` has nothing to wait for."""
    ran = []
    no_threads(monkeypatch)
    done = tuning.compile_in_background([lambda: ran.append(1)], torch.device("cpu"))
    assert done.is_set() and not ran and tuning.finish_tuning(0)


def test_finish_tuning_waits_for_a_batch_being_submitted(monkeypatch):
    """A batch whose jobs are not yet queued (another thread is submitting it) is waited for."""
    held, release = threading.Event(), threading.Event()
    real_put = tuning._background.queue.put

    def slow_put(items):
        held.set()
        release.wait(30)
        real_put(items)
    monkeypatch.setattr(tuning._background.queue, "put", slow_put)
    submitter = threading.Thread(target=tuning.compile_in_background, args=([lambda: None], torch.device("cpu")))
    submitter.start()
    try:
        assert held.wait(30) and not tuning.finish_tuning(0.05)
    finally:
        release.set()
        submitter.join(30)
    assert tuning.finish_tuning(30)

class _Form:
    """A launch that records its calls under its name (its code)."""

    def __init__(self, name, calls):
        self.source, self.compiles, self.cold, self.calls = name, 2, False, calls

    def __call__(self, inputs, device, dests=None):
        self.calls.append(self.source)
        return []

    def jobs_for(self, inputs, device):
        return [self.source]


def test_a_stand_in_a_graph_captured_keeps_running_under_capture_and_stays_alive(monkeypatch):
    """A call under capture stays on the stand-in though the kernel compiled (its first launch
    would load it during the capture); the call after leaves it but keeps it (the graph's)."""
    cpu, calls = torch.device("cpu"), []
    shared = launch.SharedRowLaunch(_Form("shared row", calls), lambda ins: _Form("two kernels", calls), staged=())
    shared.compiling = compiled = threading.Event()
    compiled.set()
    monkeypatch.setattr(tuning, "capturing", lambda device: True)
    shared([torch.randn(4, 8)], cpu)
    monkeypatch.setattr(tuning, "capturing", lambda device: False)
    shared([torch.randn(4, 8)], cpu)
    assert calls == ["two kernels", "shared row"] and shared.settled and shared.stand_in is not None


def test_a_shared_row_launch_runs_its_stand_in_untimed_until_a_call_after_its_kernel_compiled():
    """While its kernels compile in the background, a shared-row launch's calls, compile jobs
    and code shown are its stand-in's (the two-kernel form, prepared once with nothing timed);
    the first call after the compile runs its own kernel. A fallback for a refused launch is
    prepared as any launch is, its forms timed."""
    cpu, calls, untimed = torch.device("cpu"), [], []

    def prepare(inputs):
        untimed.append(not tuning.timing_forms())
        return _Form("two kernels", calls)
    shared = launch.SharedRowLaunch(_Form("shared row", calls), prepare, staged=())
    shared.compiling = compiled = threading.Event()
    x = [torch.randn(4, 8)]
    assert shared.jobs_for(x, cpu) == ["two kernels"] and not shared.settled
    shared(x, cpu)
    assert calls == ["two kernels"] and shared.source == "two kernels"
    compiled.set()
    assert shared.source == "two kernels" and not shared.settled  # (until a call leaves it)
    shared(x, cpu)
    assert calls == ["two kernels", "shared row"] and shared.source == "shared row" and shared.settled
    assert shared.jobs_for(x, cpu) == ["shared row"] and untimed == [True] and tuning.timing_forms()
    shared.refused = True
    shared(x, cpu)
    assert calls[-1] == "two kernels" and untimed == [True, False]


def test_a_failing_form_is_passed_over_and_a_failing_default_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))

    def fails():
        raise RuntimeError("a form that does not compile")
    cpu = torch.device("cpu")
    assert autotune.fastest("k", [lambda: 2.0, fails, lambda: 3.0], cpu, lambda c, d: c()) == 0
    with pytest.raises(RuntimeError, match="does not compile"):
        autotune.fastest("k2", [fails, lambda: 1.0], cpu, lambda c, d: c())


def test_a_launch_whose_bucket_another_launch_tuned_takes_its_choice(tuned, recorded):
    """Two definitions of the same kernels: the second's launch, made before the first's was
    timed, takes the first's choice at its next call without compiling or timing."""
    warps, choices = tuned
    fd, args, want = _layernorm()
    fd2, args2, want2 = _layernorm()
    fd.execute(args)
    fd2.execute(args2)
    assert tuning.finish_tuning(30)
    fd.execute(args)  # times
    assert warps == [8, 8, 8, 4, 4]
    (y,) = fd2.execute(args2)
    assert warps[-1] == 4 and len(warps) == 6
    torch.testing.assert_close(y.float(), want2, rtol=2e-2, atol=5e-2)


def test_shapes_that_vary_every_call_still_tune_their_bucket(tuned, recorded, monkeypatch):
    """Each shape of a bucket called once: the bucket's second call (another shape) starts its
    forms compiling, and no later shape starts another while that runs; once done, the next
    shape compiles its own forms (here, at the call, with its default) and times them; later
    shapes take the choice."""
    from benchmarks import fuser_defs

    warps, choices = tuned
    gate = Gate().hold(monkeypatch)
    fd = fuser_defs.layernorm_fwd.__wrapped__()
    w, b = torch.randn(100, dtype=torch.bfloat16), torch.randn(100, dtype=torch.bfloat16)
    outs = []

    def call(rows):
        x = torch.randn(rows, 100, dtype=torch.bfloat16)
        outs.append((fd.execute([x, w, b])[0], x))
    try:
        for rows in (20, 24, 26):
            call(rows)
        assert gate.inside.wait(30) and warps == [8, 8, 8]
    finally:
        gate.open()
    assert tuning.finish_tuning(30)
    assert len([e for e in recorded if e[0] == "compile"]) == 1  # (the second shape's form alone)
    for rows in (28, 30):
        call(rows)
    assert len([e for e in recorded if e[0] == "compile"]) == 3  # (and the fourth shape's two)
    assert warps[3:] == [8, 4, 4, 4] and list(json.loads(choices.read_text()).values()) == [1]
    for y, x in outs:
        want = torch.nn.functional.layer_norm(x.float(), (100,), w.float(), b.float())
        torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=5e-2)


def test_a_background_compile_does_not_load_its_kernels(tuned, monkeypatch):
    """The forms compiled in the background go into Triton's caches only (no module load, which
    would spoil another thread's CUDA graph capture); their first launch loads them."""
    from tests.compile_jobs import RecordingStep

    loads = []

    class Step(RecordingStep):
        def precompile(self, args, load=True):
            loads.append(load)
    monkeypatch.setattr(launch, "_Step", Step)
    fd, args, _ = _layernorm()
    fd.execute(args)
    assert tuning.finish_tuning(30) and loads == [False]


def test_a_child_forked_during_a_background_compile_does_not_wait_for_it():
    """The child has the batch but not the thread compiling it: its event is set there (its
    launches compile what they need at their calls) and nothing is left to wait for."""
    opened = threading.Event()
    done = tuning.compile_in_background([lambda: opened.wait(30)], torch.device("cpu"))
    try:
        child_passed = passes_in_forked_child(lambda: done.is_set() and tuning.wait_for_compiles(5), 30)
    finally:
        opened.set()
    assert tuning.wait_for_compiles(30) and done.is_set() and child_passed


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def fresh_choices(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSER_AUTOTUNE", raising=False)
    monkeypatch.delenv("FUSER_BACKGROUND_COMPILE", raising=False)
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    monkeypatch.setattr(tuning, "_buckets", {})
    return tmp_path / "autotune.json"


@pytest.mark.gpu
@gpu
def test_on_the_gpu_a_softmax_over_long_rows_is_timed_after_its_first_call(fresh_choices):
    """Softmax over 32768 columns has several launch forms: the first call times none (the
    default runs), the first call after their compiles times them; every call matches eager."""
    from benchmarks import fuser_defs

    fd = fuser_defs.softmax_fwd.__wrapped__()
    x = torch.randn(64, 32768, device="cuda", dtype=torch.bfloat16)
    want = torch.softmax(x.float(), -1)
    (y,) = fd.execute([x])
    assert not fresh_choices.exists()
    assert tuning.finish_tuning(300)
    (y2,) = fd.execute([x])
    assert len(json.loads(fresh_choices.read_text())) == 1
    (y3,) = fd.execute([x])
    (ready,) = fd.cache.ready_calls()  # made once tuned, with the chosen form's inline launch
    assert getattr(ready.run, "__name__", "") == "run"
    for out in (y, y2, y3):
        torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=1e-5)


@pytest.mark.parametrize("kernel, shape", [("softmax", (64, 32768)), ("colsum", (2048, 32768))])
@pytest.mark.gpu
@gpu
def test_on_the_gpu_a_call_under_graph_capture_does_not_time(kernel, shape, fresh_choices):
    """The forms compiled, a call captured into a CUDA graph runs the default form (timing would
    synchronize inside the capture); the graph replays it, the next call outside times, and the
    graph still replays right after it (the captured form, a column sum's split kernel with its
    counters, is kept alive)."""
    from benchmarks import fuser_defs

    fd = getattr(fuser_defs, f"{kernel}_fwd").__wrapped__()
    x = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    def want():
        return torch.softmax(x.float(), -1) if kernel == "softmax" else x.float().sum(0)
    tol = dict(rtol=2e-2, atol=1e-5) if kernel == "softmax" else dict(rtol=1e-4, atol=1e-2)
    fd.execute([x])  # (the default form compiles and runs: the capture launches it alone)
    assert tuning.finish_tuning(300)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (y,) = fd.execute([x])
    assert not fresh_choices.exists()
    for timed in (False, True):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.testing.assert_close(y.float(), want(), **tol)
        if not timed:
            (y2,) = fd.execute([x])
            assert len(json.loads(fresh_choices.read_text())) == 1
            torch.testing.assert_close(y2.float(), want(), **tol)


@pytest.mark.gpu
@gpu
def test_on_the_gpu_the_layernorm_backward_runs_two_kernels_while_its_shared_row_kernel_compiles(
        fresh_choices, monkeypatch):
    """The LayerNorm definition's backward over 32768 columns (dx and dw in the shared-row
    kernel, db's column sum apart): its first call runs the two-kernel form in the shared-row
    kernel's stead (that kernel compiling in the background; taken as not compiled yet here,
    whatever earlier tests compiled) and db's default form; the call after the compiles runs
    the shared-row kernel and times db's forms. Both right against float64."""
    from tests.codegen.test_inner_outer import close, layernorm_bwd_fd
    from tests.codegen.test_shared_row import inputs, layernorm_reference

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs a Hopper GPU")
    real, real_background = compile_pool.compiled_already, tuning.compile_in_background
    asked, opened, held = [], threading.Event(), []
    monkeypatch.setattr(compile_pool, "compiled_already", lambda *a: asked.append(a) or False)

    def background(jobs, device):  # (done when the jobs are and the test opens: an earlier test's
        done, told = real_background(jobs, device), threading.Event()  # kernel is found at once)
        threading.Thread(target=lambda: (opened.wait(60), done.wait(300), told.set()), daemon=True).start()
        held.append(told)
        return told
    monkeypatch.setattr(tuning, "compile_in_background", background)
    x, w, dy = inputs(300, 32768)
    fd = layernorm_bwd_fd(torch.bfloat16, stats_as_inputs=False)
    first = fd.execute([x, w, dy])
    code = fd.last_triton_code()
    assert asked and "_kept_rows_" in code and "_kept_columns_" in code and "row in shared memory" not in code
    assert not fresh_choices.exists()
    opened.set()
    assert tuning.finish_tuning(300) and all(told.wait(300) for told in held)
    assert real(*asked[0])  # compiled now, in memory
    second = fd.execute([x, w, dy])
    code = fd.last_triton_code()
    assert "row in shared memory" in code and "_apart_" in code and fresh_choices.exists()
    for outputs in (first, second):
        for a, e in zip(outputs, layernorm_reference(x, w, dy), strict=True):
            close(a, e.to(torch.bfloat16), torch.bfloat16)


@pytest.mark.gpu
@gpu
def test_on_the_gpu_a_process_that_exits_while_forms_compile_exits_cleanly(tmp_path):
    """A script whose last call started the background compiles of a launch's other forms
    (the bucket's second call) ends with status 0: Python's exit used to end the compiling
    threads inside Triton's C++ passes, and the process aborted ("terminate called ...")."""
    import subprocess
    import sys

    code = """if True:
        import torch, torch.nn.functional as F, fuser
        def ce(logits, target):
            return F.cross_entropy(logits.float(), target)
        jitted = fuser.jit(ce)
        for rows in (1000, 1024):  # (the bucket's second call starts the compiles)
            x = torch.randn(rows, 32000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            jitted(x, torch.randint(0, 32000, (rows,), device="cuda")).backward()
        torch.cuda.synchronize()
    """
    env = dict(os.environ, FUSER_CACHE_DIR=str(tmp_path), TRITON_CACHE_DIR=str(tmp_path / "triton"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr[-2000:]

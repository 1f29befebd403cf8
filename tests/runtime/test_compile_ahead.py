"""A runtime's first call compiles the kernels of all its launches side by side before the first
one runs (FusionRuntime.compile_ahead): the segments run on meta tensors for their layouts,
each kernel segment's launch is prepared without running, and its kernels' compile jobs get
stand-ins for their tensors. The interpreter compiles nothing, so these tests record the
compile jobs with a step that remembers what it was asked to compile, and check that every
kernel the real run launched was compiled ahead with the same arguments (dtypes, alignment,
sizes and strides), before any launch."""
import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.codegen import launch, steps
from fuser.codegen.ahead import CompileJobs
from fuser.runtime import cache

from ..compile_jobs import same_argument

def three_kernels_around_a_matmul():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        h = fd.ops.cast(fd.ops.relu(fd.ops.mul(fd.ops.cast(x, DataType.Float), 2.0)), DataType.BFloat16)
        m = fd.ops.cast(fd.ops.matmul(h, w), DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.mul(m, m), [1]))  # a row reduction after the matmul
        fd.add_output(fd.ops.sum(m, [0]))  # and a column reduction
    return fd


def test_every_kernel_is_compiled_ahead_with_its_launch_arguments(recorded):
    fd = three_kernels_around_a_matmul()
    x = torch.randn(24 * 40 + 3, dtype=torch.bfloat16)[3:].view(24, 40)  # unaligned: its stand-in says so
    w = torch.randn(40, 48, dtype=torch.bfloat16)
    rows, cols = fd.execute([x, w])
    runtime = fd.cache.last_runtime
    kinds = [s.kind.name for s in runtime.segments]
    assert kinds.count("kernel") >= 2 and "evaluator" in kinds
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(cols, m.sum(0), rtol=1e-4, atol=1e-3)

    first_launch = next(k for k, e in enumerate(recorded) if e[0] == "launch")
    compiles = recorded[:first_launch]  # the pass ahead (a launch of two kernels asks again, later)
    launches = [e for e in recorded if e[0] == "launch"]
    assert compiles and all(e[0] == "compile" for e in compiles)
    for _, fn, args in launches:  # each kernel that ran was compiled ahead with its arguments
        planned = [a for kind, f, a in compiles if f is fn]
        assert any(len(p) == len(args) and all(map(same_argument, p, args)) for p in planned), fn

    # a repeat call compiles nothing ahead again
    recorded.clear()
    fd.execute([x, w])
    assert [e[0] for e in recorded] == ["launch"] * len(launches)


def test_a_failing_segment_ends_the_pass_and_the_call_still_runs(recorded, monkeypatch):
    fd = three_kernels_around_a_matmul()
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    calls = []
    real = launch.KernelLauncher.compile_ahead

    def second_fails(self, *args):
        calls.append(self)
        if len(calls) == 2:
            raise RuntimeError("no layout for this one")
        return real(self, *args)
    monkeypatch.setattr(launch.KernelLauncher, "compile_ahead", second_fails)
    rows, cols = fd.execute([x, w])
    assert len(calls) == 2  # the pass stopped at the failure
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(cols, m.sum(0), rtol=1e-4, atol=1e-3)
    assert any(e[0] == "compile" for e in recorded)  # what was found before it still compiled


@pytest.mark.parametrize("switch", ["FUSER_PARALLEL_COMPILE", "FUSER_COMPILE_AHEAD"])
def test_nothing_is_compiled_ahead_where_it_is_off(recorded, monkeypatch, switch):
    monkeypatch.setenv(switch, "0")
    fd = three_kernels_around_a_matmul()
    monkeypatch.setattr(cache.FusionRuntime, "compile_ahead", lambda *a: pytest.fail("compiled ahead"))
    fd.execute([torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(16, 8, dtype=torch.bfloat16)])
    assert not fd.cache.last_runtime.compile_ahead_pending


def test_a_fusion_of_one_launch_compiles_at_its_launch(recorded, monkeypatch):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.relu(x), [1]))
    monkeypatch.setattr(cache.FusionRuntime, "compile_ahead", lambda *a: pytest.fail("compiled ahead"))
    x = torch.randn(6, 10)
    torch.testing.assert_close(fd.execute([x])[0], torch.relu(x).sum(1))


def _all_launches_compiled_ahead(recorded) -> int:
    """Checks that every launch's kernel and arguments were compiled before the first launch;
    returns how many compile jobs the pass ran."""
    first_launch = next(k for k, e in enumerate(recorded) if e[0] == "launch")
    compiles = recorded[:first_launch]
    assert compiles and all(e[0] == "compile" for e in compiles)
    for _, fn, args in (e for e in recorded if e[0] == "launch"):
        planned = [a for kind, f, a in compiles if f is fn]
        assert any(len(p) == len(args) and all(map(same_argument, p, args)) for p in planned), fn
    return len(compiles)


def test_layers_alike_compile_their_shared_kernel_once(recorded):
    """Kernels alike but for their tensors' names (canonical forms) are one JITFunction: the
    pass asks for each specialization once (Triton would compile a kernel asked for twice at
    once twice)."""
    with FusionDefinition() as fd:
        h = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        ws = [fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float) for _ in range(3)]
        for w in ws:
            h = fd.ops.matmul(fd.ops.relu(fd.ops.mul(h, 0.5)), w)
        fd.add_output(h)
    x = torch.randn(8, 16)
    weights = [torch.randn(16, 16) for _ in range(3)]
    (out,) = fd.execute([x] + weights)
    want = x
    for w in weights:
        want = torch.relu(want * 0.5) @ w
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    launches = [e for e in recorded if e[0] == "launch"]
    assert len(launches) == 3 and len({id(fn) for _, fn, _ in launches}) == 1
    assert _all_launches_compiled_ahead(recorded) == 1


def test_an_unaligned_input_viewed_by_aten_keeps_its_alignment(recorded):
    """A kernel reading an ATen view (made on meta tensors in the pass) of an input that is not
    16-byte aligned is compiled for an unaligned pointer, as its launch will be."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        fd.add_output(fd.ops.sum(fd.ops.relu(fd.ops.cast(x, DataType.Float)), [1]))
        fd.add_output(fd.ops.sum(fd.ops.cast(fd.ops.matmul(x, w), DataType.Float), [0]))
        fd.add_output(fd.ops.mul(fd.ops.cast(fd.ops.reshape(x, [40, 24]), DataType.Float), 3.0))
    x = torch.randn(24 * 40 + 7, dtype=torch.bfloat16)[7:].view(24, 40)  # 14 bytes off
    w = torch.randn(40, 48, dtype=torch.bfloat16)
    _, _, scaled = fd.execute([x, w])
    torch.testing.assert_close(scaled, x.reshape(40, 24).float() * 3.0)
    _all_launches_compiled_ahead(recorded)


def test_two_threads_making_the_first_call_compile_once(recorded, monkeypatch):
    import threading

    passes = []
    real = cache.FusionRuntime.compile_ahead
    monkeypatch.setattr(cache.FusionRuntime, "compile_ahead",
                        lambda self, *a: passes.append(self) or real(self, *a))
    fd = three_kernels_around_a_matmul()
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 8, dtype=torch.bfloat16)
    fd.execute([x[:2], w])  # the runtime exists before the threads start
    passes.clear()
    runtime = fd.cache.last_runtime
    runtime.compile_ahead_pending = True
    runtime.launchers[next(iter(runtime.launchers))].launches.clear()
    start, results = threading.Barrier(2), []

    def call():
        start.wait()
        results.append(fd.execute([x, w]))
    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(passes) == 1 and len(results) == 2
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    for rows, _ in results:
        torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-4, atol=1e-3)


def test_autotuned_forms_are_compiled_ahead_all_or_the_remembered_one(recorded, monkeypatch, tmp_path):
    """Where the first launch will time a kernel's forms, the pass compiles them all; where a
    choice is remembered, only the chosen form; it times nothing and remembers nothing."""
    from fuser.codegen import autotune

    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter",))
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "choices.json"))
    monkeypatch.setattr(autotune, "fastest", lambda *a, **k: pytest.fail("timed"))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.div(x, fd.ops.sum(x, [1], True)))
    x = torch.randn(4, 4096)
    executor = cache.FusionExecutorCache(fd.fusion)  # (nothing executed: no launch on the interpreter)
    table = executor._binder.bind([x])
    runtime = executor._runtime_for([x])
    (launcher,) = runtime.launchers.values()
    jobs = CompileJobs()
    assert launcher.prepare([x], {}, table.values, x.device, ahead_jobs=jobs) is not None
    every_form = len(jobs.jobs)
    assert every_form >= 3 and not launcher.launches
    for job in jobs.jobs:
        job()
    assert len(recorded) == every_form and len({id(fn) for _, fn, _ in recorded}) >= 2  # forms of 2+ kernels
    monkeypatch.setattr(autotune.Choices, "get", lambda self, key: 2)
    jobs = CompileJobs()
    launcher.prepare([x], {}, table.values, x.device, ahead_jobs=jobs)
    assert len(jobs.jobs) == 1
    assert not (tmp_path / "choices.json").exists()


def test_a_stand_in_specializes_as_its_tensor_does():
    """Triton keys a compiled kernel by how it specializes each argument: a stand-in must
    specialize as the tensor it stands for (dtype, 16-byte alignment)."""
    jit = pytest.importorskip("triton.runtime.jit")
    native = getattr(jit, "native_specialize_impl", None)
    backend = getattr(jit, "BaseBackend", None)
    if native is None or backend is None:
        pytest.skip("this Triton specializes arguments elsewhere")
    device = torch.device("cpu")
    for dtype in (torch.bfloat16, torch.float32, torch.int32):
        base = torch.zeros(64, dtype=dtype)
        for t in (base, base[1:]):
            assert native(backend, steps.StandIn.of(t, device), False, True, True) == \
                native(backend, t, False, True, True), (dtype, t.data_ptr() % 16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_first_call_compiles_nothing_after_the_pass(tmp_path, monkeypatch):
    """Every kernel the first call launches (the autotuner's forms too, where that call times
    them) was compiled by the pass ahead: Triton's in-memory cache misses no kernel after it."""
    from triton.runtime.jit import JITFunction

    if not hasattr(JITFunction, "_do_compile"):
        pytest.skip("this Triton compiles elsewhere")
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))  # no remembered autotune choice
    misses, passes = [], []
    real_compile, real_ahead = JITFunction._do_compile, cache.FusionRuntime.compile_ahead

    def counting(self, *args, **kwargs):
        compiled = real_compile(self, *args, **kwargs)
        if compiled is not None:  # (None: a compile worker was asked to compile it, compile_pool.py)
            misses.append(self)
        return compiled

    def ahead(self, *args):
        jobs = real_ahead(self, *args)
        passes.append((jobs, len(misses)))
        return jobs
    monkeypatch.setattr(JITFunction, "_do_compile", counting)
    monkeypatch.setattr(cache.FusionRuntime, "compile_ahead", ahead)
    fd = three_kernels_around_a_matmul()
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, 2048, device="cuda", dtype=torch.bfloat16)
    rows, cols = fd.execute([x, w])
    assert len(passes) == 1 and passes[0][0] >= 2
    # at most one compile a job: a kernel another test of the session compiled (a canonical
    # form shared by kernels alike) is found in Triton's memory and compiles nowhere
    assert passes[0][1] <= passes[0][0], "the pass compiled a kernel twice, or one it did not plan"
    assert len(misses) == passes[0][1], "kernels compiled after the pass ahead"
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-3, atol=1e-1)
    torch.testing.assert_close(cols, m.sum(0), rtol=1e-3, atol=1e-1)


def test_attention_on_meta_standing_for_a_gpu_has_flash_attentions_layout():
    """ATen's flash attention (the evaluator's choice on the GPU for half and bf16) writes its
    output in the query's strides, the math form contiguously: the pass predicts the former."""
    from fuser.evaluate.rules import evaluate_expr
    from fuser.evaluate.evaluator import EvalContext
    from fuser.ir import SdpaFwdOp

    with FusionDefinition() as fd:
        q, k, v = (fd.define_tensor([-1, -1, -1, -1], dtype=DataType.BFloat16) for _ in range(3))
        out, lse, _seed, _offset = fd.ops.sdpfa_fwd(q, k, v, None, None, 0.0, True, None)
        fd.add_output(out)
    (expr,) = [e for e in fd.fusion.exprs if isinstance(e, SdpaFwdOp)]
    query = torch.empty(2, 16, 4, 64, dtype=torch.bfloat16, device="meta").transpose(1, 2)
    args = [query, query, query, 0.0, True, None]
    ctx = EvalContext(None, steps.META)
    assert evaluate_expr(expr, args, ctx)[0].is_contiguous()  # the math form
    ctx.stands_for = torch.device("cuda")
    flash = evaluate_expr(expr, args, ctx)
    assert flash[0].stride() == query.stride()
    # the IR's 0-dim int64 seed and offset (some torch versions' flash give two elements)
    assert all(t.shape == () and t.dtype == torch.int64 for t in flash[2:])


def test_random_fusions_compile_ahead_what_they_launch(recorded):
    """The fuzzer's fusions (tests/fuzz_fusions.py; odd sizes, strided, transposed and expanded
    inputs, reductions, shape ops, split reductions) of several launches: each launch's kernel
    and arguments were compiled ahead, before any launch."""
    import warnings

    from tests.fuzz_fusions import run_case

    checked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the interpreter's numpy on NaN and inf
        for seed in range(280):  # (ops no output needs are not launched: fewer several-launch cases)
            recorded.clear()
            run_case(seed, processors=(seed % 5) if seed % 2 else 0)
            launched = [k for k, e in enumerate(recorded) if e[0] == "launch"]
            ahead = [e for e in recorded[:launched[0] if launched else 0]
                     if any(isinstance(a, steps.StandIn) for a in e[2])]
            if not ahead:  # one launch (its own kernels compile together at it), or none
                continue
            checked += 1
            for _, fn, args in (recorded[k] for k in launched):
                assert any(f is fn and len(p) == len(args) and all(map(same_argument, p, args))
                           for _, f, p in ahead), f"seed {seed}: a launch not compiled ahead"
    assert checked >= 30


def test_a_statistics_form_compiles_both_of_its_kernels_ahead(recorded, monkeypatch):
    """A column normalization beside a row reduction: the runtime has several launches, one of
    them the two-kernel statistics form (schedulers/plan.py StatisticsParts), whose split
    statistics kernel and rows kernel are both compiled ahead with their launch arguments."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        w = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        n, c = x.shape()[0], x.shape()[1]
        mean = fd.ops.broadcast_in_dim(fd.ops.div(fd.ops.sum(x, [0]), n), [n, c], [1])
        fd.add_output(fd.ops.sub(x, mean))
        fd.add_output(fd.ops.sum(fd.ops.matmul(x, w), [1]))
    a, b = torch.randn(300, 40), torch.randn(40, 24)
    centered, rows = fd.execute([a, b])
    torch.testing.assert_close(centered, a - a.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rows, (a @ b).sum(1), rtol=1e-4, atol=1e-3)
    assert "pointwise" in fd.last_triton_code() and "split" in fd.last_triton_code()
    first_launch = next(k for k, e in enumerate(recorded) if e[0] == "launch")
    compiles = recorded[:first_launch]
    launches = [e for e in recorded if e[0] == "launch"]
    assert len({id(fn) for _, fn, _ in launches}) >= 3  # statistics, rows, the row reduction
    for _, fn, args in launches:
        planned = [a for kind, f, a in compiles if f is fn]
        assert any(len(p) == len(args) and all(map(same_argument, p, args)) for p in planned), fn

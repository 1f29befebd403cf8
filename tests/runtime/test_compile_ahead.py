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
from fuser.runtime import cache

events: list = []


class RecordingStep(steps._DirectStep):
    """A _DirectStep on the interpreter: `precompile` records its arguments, a launch runs
    through Triton's interpreter and records its real ones."""

    def precompile(self, args):
        events.append(("compile", self.fn, args))

    def __call__(self, args):
        events.append(("launch", self.fn, args))
        self.launch(*args, **self.kwargs)


@pytest.fixture
def recorded(monkeypatch):
    events.clear()
    monkeypatch.setattr(cache, "COMPILE_AHEAD_TARGETS", ("interpreter",))
    monkeypatch.setattr(launch, "_Step", RecordingStep)
    monkeypatch.setenv("FUSER_PARALLEL_COMPILE", "1")
    yield events
    events.clear()


def _same_argument(planned, real) -> bool:
    if isinstance(real, torch.Tensor):
        return (isinstance(planned, steps.StandIn) and planned.dtype == real.dtype
                and planned.data_ptr() % 16 == real.data_ptr() % 16)
    return type(planned) is type(real) and planned == real


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
        assert any(len(p) == len(args) and all(map(_same_argument, p, args)) for p in planned), fn

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


def test_nothing_is_compiled_ahead_where_it_is_off(recorded, monkeypatch):
    monkeypatch.setenv("FUSER_PARALLEL_COMPILE", "0")
    fd = three_kernels_around_a_matmul()
    monkeypatch.setattr(cache.FusionRuntime, "compile_ahead", lambda *a: pytest.fail("compiled ahead"))
    fd.execute([torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(16, 8, dtype=torch.bfloat16)])
    assert not fd.cache.last_runtime.ahead


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_first_call_compiles_nothing_after_the_pass(tmp_path, monkeypatch):
    """Every kernel the first call launches (the autotuner's forms too) was compiled by the
    pass ahead: Triton's in-memory cache misses no kernel after it."""
    from triton.runtime.jit import JITFunction

    if not hasattr(JITFunction, "_do_compile"):
        pytest.skip("this Triton compiles elsewhere")
    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))  # no remembered autotune choice
    misses, passes = [], []
    real_compile, real_ahead = JITFunction._do_compile, cache.FusionRuntime.compile_ahead

    def counting(self, *args, **kwargs):
        misses.append(self)
        return real_compile(self, *args, **kwargs)

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
    assert len(misses) == passes[0][1], "kernels compiled after the pass ahead"
    m = (torch.relu(x.float() * 2.0).bfloat16() @ w).float()
    torch.testing.assert_close(rows, (m * m).sum(1), rtol=1e-3, atol=1e-1)
    torch.testing.assert_close(cols, m.sum(0), rtol=1e-3, atol=1e-1)

"""Kernels of one launch compile side by side before its first launch (codegen/parallel_compile.py).
The GPU test runs a split column reduction (two kernels) from a cold start; the others check the
scheduling with stand-in kernels, since the interpreter compiles nothing."""
import contextlib
import threading
import time

import pytest
import torch

from fuser.codegen import launches, parallel_compile, steps


class _Compiled:
    def _init_handles(self):
        pass


class _StandInKernel:
    """What _DirectStep uses of a Triton kernel: `fn[grid]` and `fn.run(..., warmup=True)`."""

    def __init__(self, seconds: float, fails: bool = False):
        self.seconds, self.fails = seconds, fails
        self.compiled_in: list[str] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None

    def run(self, *args, grid, warmup, **kwargs):
        time.sleep(self.seconds)
        self.compiled_in.append(threading.current_thread().name)
        if self.fails:
            raise RuntimeError("a compile error")
        return _Compiled()


def stand_in_launch(*kernels, outputs=()):
    kwargs = dict(BLOCK0=1, BLOCK1=16, INT64=False, num_warps=1)
    made = [(steps._DirectStep(k, 1, kwargs), [None], [(0, 0)]) for k in kernels]
    return launches.Launch(made, list(outputs), [], "")


def test_the_kernels_of_a_launch_compile_side_by_side():
    kernels = [_StandInKernel(0.3), _StandInKernel(0.3)]
    first = stand_in_launch(*kernels)
    assert first.cold
    start = time.perf_counter()
    parallel_compile.compile_together(first.compile_jobs([torch.zeros(1)]))
    assert time.perf_counter() - start < 0.5  # not 0.6: they overlapped
    assert all(len(k.compiled_in) == 1 and k.compiled_in[0].startswith("fuser-compile") for k in kernels)


def test_the_two_kernel_form_compiles_its_row_and_column_kernels_together():
    """Rows too long for registers run a row kernel, then a column kernel (split in two): all
    three compile side by side, the column kernels' arguments made from the row kernel's
    output specs before it has run."""
    from fuser.codegen.inner_outer import _TwoLaunches

    kernels = [_StandInKernel(0.3) for _ in range(3)]
    rows = stand_in_launch(kernels[0], outputs=[((4,), torch.float32)])
    columns = stand_in_launch(kernels[1], kernels[2], outputs=[((4,), torch.float32)])
    both = _TwoLaunches(rows, columns, [0], [("first", 0)], [("second", 0)])
    assert both.cold
    start = time.perf_counter()
    both._compile_together([torch.zeros(4)], torch.device("cpu"))
    assert time.perf_counter() - start < 0.6 + 0.3 * (parallel_compile._executor()._max_workers < 3)
    assert all(len(k.compiled_in) == 1 for k in kernels)
    assert not rows.cold and not columns.cold  # their own launches compile nothing again


def test_jobs_joined_by_a_block_compile_with_its_first_batch_and_are_made_only_then():
    """A two-part launch's first kernel joins the batch of forms the second part compiles before
    timing them (TwoKernels.prepare), rather than compiling alone at its first launch."""
    kernels = [_StandInKernel(0.3) for _ in range(3)]
    made = []

    def first_part_jobs():
        made.append(True)
        return stand_in_launch(kernels[2]).compile_jobs([torch.zeros(1)])
    parallel_compile.start_triton_driver()  # (once a process: not in the time below)
    parallel_compile._executor()
    with parallel_compile.joined_by(first_part_jobs):
        start = time.perf_counter()
        parallel_compile.compile_together(stand_in_launch(kernels[0], kernels[1]).compile_jobs([torch.zeros(1)]))
        elapsed = time.perf_counter() - start
        parallel_compile.compile_together([])  # a later batch in the block: nothing joins it
    assert made == [True] and all(len(k.compiled_in) == 1 for k in kernels)
    assert elapsed < 0.6 + 0.3 * (parallel_compile._executor()._max_workers < 3)  # not 0.9
    with parallel_compile.joined_by(lambda: made.append(False) or []):
        pass  # no batch ran: the jobs are not made (the kernel compiles at its launch)
    with parallel_compile.joined_by(lambda: made.append("outer") or []):
        with parallel_compile.joined_by(None):  # no jobs of its own: the outer block's still join
            parallel_compile.compile_together([])
    assert made == [True, "outer"]


class _Unallocatable(launches.Launch):
    """A launch whose outputs cannot be allocated (out of memory)."""

    __slots__ = ()

    def tensors_for(self, inputs, device, dests=None):
        raise MemoryError("stand-in")


class _FirstPart:
    """A two-part launch's first part (TwoKernels.first), prepared without compiling."""

    def __init__(self, kernels, fails=False):
        self.kernels, self.fails = kernels, fails

    def prepare(self, inputs, scalars, values, device, ahead_jobs=None, in_one_pass=False):
        made = stand_in_launch(*self.kernels, outputs=[((4,), torch.float32)])
        if self.fails:
            made.__class__ = _Unallocatable
        return made

    def allocate_outputs(self, values, device):
        return [torch.empty(4)]


class _SecondPart:
    """The second part, which compiles its forms in one batch to time them (launch._fastest_form)
    unless its choice is remembered (`timed` False) or it is prepared ahead."""

    def __init__(self, kernel, timed):
        self.kernel, self.timed = kernel, timed

    def prepare(self, inputs, scalars, values, device, ahead_jobs=None):
        made = stand_in_launch(self.kernel, outputs=[((4,), torch.float32)])
        if self.timed and ahead_jobs is None:
            parallel_compile.compile_together(made.jobs_for(inputs, device))
        return made


def two_parts(first, second):
    from fuser.codegen.inner_outer import TwoKernels

    made = object.__new__(TwoKernels)
    made.first, made.second = first, second
    made.first_take, made.second_take, made.give = [0], [("first", 0)], [("second", 0)]
    return made


@pytest.mark.parametrize("case", ["timed", "remembered", "ahead", "first part fails"])
def test_a_two_part_launch_compiles_its_first_part_in_the_batch_its_second_part_times(case, monkeypatch):
    """TwoKernels.prepare: where the second part compiles its forms to time them, the first part's
    kernels compile in that batch, and the first call compiles nothing again; where it compiles
    none (its choice remembered), the first call compiles both parts together, as before; a
    compile-ahead pass joins nothing (it collects every job itself)."""
    batches = []
    together = parallel_compile.compile_together

    def counted(jobs):
        batches.append(len(jobs))
        together(jobs)
    monkeypatch.setattr(parallel_compile, "compile_together", counted)
    first = [_StandInKernel(0.0), _StandInKernel(0.0)]
    second = _StandInKernel(0.0)
    two = two_parts(_FirstPart(first, fails=case == "first part fails"), _SecondPart(second, case != "remembered"))
    prepared = two.prepare([torch.zeros(4)], {}, {}, torch.device("cpu"),
                           ahead_jobs=object() if case == "ahead" else None)
    compiled = [len(k.compiled_in) for k in first + [second]]
    if case == "timed":
        assert batches == [1] and compiled == [1, 1, 1] and not prepared.cold
    elif case == "first part fails":  # left to the first part's own launch, which meets the error
        assert batches == [1] and compiled == [0, 0, 1] and prepared.cold
    else:
        assert batches == [] and compiled == [0, 0, 0] and prepared.cold


def test_a_failing_compile_is_left_to_the_launch_and_one_kernel_is_not_sent_to_threads(monkeypatch):
    good, bad = _StandInKernel(0.01), _StandInKernel(0.01, fails=True)
    parallel_compile.compile_together(stand_in_launch(good, bad).compile_jobs([torch.zeros(1)]))  # no exception
    assert good.compiled_in and bad.compiled_in
    assert not stand_in_launch(_StandInKernel(0.0)).cold
    monkeypatch.setenv("FUSER_PARALLEL_COMPILE", "0")
    ran = []
    parallel_compile.compile_together([lambda: ran.append(threading.current_thread().name)] * 2)
    assert ran == [threading.current_thread().name] * 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_split_reduction_compiled_ahead_matches_eager(tmp_path, monkeypatch):
    from fuser import DataType, FusionDefinition

    monkeypatch.setenv("FUSER_CACHE_DIR", str(tmp_path))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.BFloat16)
        xf = fd.ops.cast(x, DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.mul(xf, 1.5), [0]))
        fd.add_output(fd.ops.max(xf, [0]))
    x = torch.randn(8192, 3000, device="cuda", dtype=torch.bfloat16)
    total, top = fd.execute([x])
    assert "_partial" in fd.last_triton_code() and "_combine" in fd.last_triton_code()
    torch.testing.assert_close(total, (x.float() * 1.5).sum(0), rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(top, x.float().amax(0))


def test_empty_launch_hook_chains_are_not_called():
    # Triton keeps launch hooks in chains that are never None: a direct launch passes None for
    # an empty chain (no launch metadata built, no empty chain called), and the chain itself
    # once a hook (a profiler's) is in it
    from triton import knobs

    chain = type(knobs.runtime.launch_enter_hook)()
    assert steps._hook(chain) is None and steps._hook(None) is None
    chain.add(print)
    assert steps._hook(chain) is chain
    assert steps._hook(print) is print  # a Triton whose hook is a plain callable


def test_an_exit_hook_alone_still_gets_launch_metadata(monkeypatch):
    # Triton's own launch builds the metadata whenever a hook may read it: an exit hook
    # installed without an enter hook gets it too (found by review)
    import types

    from triton import knobs

    class Compiled:
        function = packed_metadata = None

        def launch_metadata(self, grid, stream, *args):
            return {"name": "stand-in"}

        def run(self, *args):
            self.args = args

    exit_chain = type(knobs.runtime.launch_exit_hook)()
    exit_chain.add(print)
    step = steps._DirectStep(_StandInKernel(0), 1, dict(BLOCK0=1, BLOCK1=16, INT64=False, num_warps=1))
    step.compiled, step.aligned_at = Compiled(), []
    step.hooks = types.SimpleNamespace(launch_enter_hook=type(exit_chain)(), launch_exit_hook=exit_chain)
    monkeypatch.setattr(steps, "raw_stream", lambda device: 0)
    monkeypatch.setattr(steps, "current_device", lambda: 0)
    step([])
    meta, enter, leave = step.compiled.args[6:9]
    assert meta == {"name": "stand-in"} and enter is None and leave is exit_chain


def test_a_launch_for_another_gpu_runs_under_that_device(monkeypatch):
    """Triton launches on the current device's stream, so a launch whose tensors live on
    another GPU enters that device first (and one on the current device does not)."""
    entered, ran = [], []
    monkeypatch.setattr(launches, "current_device", lambda: 0)

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        yield
    monkeypatch.setattr(torch.cuda, "device", device)
    made = launches.Launch([], [], [], "")
    monkeypatch.setattr(launches.Launch, "_run", lambda self, inputs, dev, dests=None: ran.append(dev) or [])
    made([], torch.device("cuda", 1))
    made([], torch.device("cuda", 0))
    made([], torch.device("cpu"))
    assert entered == [1] and [d.index for d in ran] == [1, 0, None]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_tensors_on_the_second_gpu():
    from benchmarks import fuser_defs

    fd = fuser_defs.rmsnorm_fwd.__wrapped__()
    x = torch.randn(64, 4096, device="cuda:1", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda:1", dtype=torch.bfloat16)
    before = torch.cuda.current_device()
    for _ in range(3):
        (y,) = fd.execute([x, w])
    assert y.device == x.device and torch.cuda.current_device() == before
    xf = x.float()
    want = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + fuser_defs.RMS_EPS) * w.float()
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=2e-2)

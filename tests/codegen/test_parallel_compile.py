"""Kernels of one launch compile side by side before its first launch (codegen/parallel_compile.py).
The GPU test runs a split column reduction (two kernels) from a cold start; the others check the
scheduling with stand-in kernels, since the interpreter compiles nothing."""
import contextlib
import threading
import time

import pytest
import torch

from fuser.codegen import launch, parallel_compile, steps


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
    return launch._Launch(made, list(outputs), [], "")


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
    with parallel_compile.joined_by(first_part_jobs):
        start = time.perf_counter()
        parallel_compile.compile_together(stand_in_launch(kernels[0], kernels[1]).compile_jobs([torch.zeros(1)]))
        elapsed = time.perf_counter() - start
        parallel_compile.compile_together([])  # a later batch in the block: nothing joins it
    assert made == [True] and all(len(k.compiled_in) == 1 for k in kernels)
    assert elapsed < 0.6 + 0.3 * (parallel_compile._executor()._max_workers < 3)  # not 0.9
    with parallel_compile.joined_by(lambda: made.append(False) or []):
        pass  # no batch ran: the jobs are not made (the kernel compiles at its launch)
    with parallel_compile.joined_by(None):
        parallel_compile.compile_together([])
    assert made == [True]


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
    monkeypatch.setattr(launch, "current_device", lambda: 0)

    @contextlib.contextmanager
    def device(index):
        entered.append(index)
        yield
    monkeypatch.setattr(torch.cuda, "device", device)
    made = launch._Launch([], [], [], "")
    monkeypatch.setattr(launch._Launch, "_run", lambda self, inputs, dev, dests=None: ran.append(dev) or [])
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

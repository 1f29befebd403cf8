"""A split column reduction in one kernel (codegen/split_kernel.py): programs reduce chunks of
rows into workspace rows, and the last program of each column block, found by counting on the
block's semaphore, combines them; the semaphores are zero again after each launch."""
import gc
import threading

import pytest
import torch

from benchmarks import fuser_defs
from fuser import DataType, FusionDefinition
from fuser.codegen import launch


def _split_launch(fd) -> "launch.Launch":
    (runtime,) = fd._cache.runtimes()
    (launcher,) = runtime.launchers.values()
    (made,) = launcher.launches.values()
    return made


def test_one_kernel_combines_and_leaves_its_semaphores_zero(monkeypatch):
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    fd = fuser_defs.colsum_fwd.__wrapped__()
    for seed in (0, 1):  # a second launch finds the semaphores zero again
        x = torch.randn(3000, 300, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(seed))
        (y,) = fd.execute([x])
        torch.testing.assert_close(y, x.float().sum(0), rtol=1e-5, atol=1e-3)
    code = fd.last_triton_code()
    assert code.count("def fuser_") == 3 and code.count("@triton.jit\ndef fuser_") == 2  # 2 parts, 1 kernel
    assert "tl.atomic_add(SEM_ptr + pid1, 1" in code and 'cache_modifier=".cg"' in code
    made = _split_launch(fd)
    (sems,) = made.semaphores.by_stream.values()
    assert sems.dtype == torch.int32 and sems.numel() == 3 and not sems.any()  # 300 columns: 3 blocks


def test_var_mean_and_several_reductions_split_in_one_kernel(monkeypatch):
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        var, mean = fd.ops.var_mean(x, [0], 1)
        fd.add_output(var)
        fd.add_output(mean)
        fd.add_output(fd.ops.max(x, [0]))
    x = torch.randn(2000, 7) * 3 + 1
    var, mean, top = fd.execute([x])
    want_var, want_mean = torch.var_mean(x, 0, correction=1)
    torch.testing.assert_close(var, want_var, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mean, want_mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(top, x.amax(0))
    assert "split in one kernel" in fd.last_triton_code()


def test_any_program_order(monkeypatch, any_program_order):
    """Column sums and a sum the same in every column (of a [rows, 1] input), split over 3
    column blocks and 4 chunks of rows, with the programs in any order: each block's last
    program reads only what its own block's programs wrote (the same-in-every-column sum was
    read from column 0, which only block 0 writes: wrong sums in the other blocks)."""
    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 4)
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        r = fd.define_tensor([-1, 1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.sum(fd.ops.mul(x, r), [0]), fd.ops.sum(fd.ops.mul(r, 2.0), [0])))
        fd.add_output(fd.ops.max(x, [0]))
    g = torch.Generator().manual_seed(3)
    x, r = torch.randn(240, 260, generator=g), torch.randn(240, 1, generator=g)
    out, top = fd.execute([x, r])
    assert "split in one kernel" in fd.last_triton_code()
    torch.testing.assert_close(out, (x * r).sum(0) + (r * 2).sum(0), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(top, x.amax(0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_split_kernel_on_two_streams_at_once():
    """The same split launch on two streams at the same time: each stream has its own
    semaphores, so both sums are right, many times over."""
    fd = fuser_defs.colsum_fwd.__wrapped__()
    xs = [torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    fd.execute([xs[0]])
    assert "split in one kernel" in fd.last_triton_code()
    streams = [torch.cuda.Stream() for _ in range(2)]
    results: list = [[], []]

    def run(k):
        with torch.cuda.stream(streams[k]):
            for _ in range(20):
                results[k].append(fd.execute([xs[k]])[0])
    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    for k in range(2):
        want = xs[k].float().sum(0)
        for y in results[k]:
            torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-2)
    made = _split_launch(fd)
    assert len(made.semaphores.by_stream) >= 2 and len(made.workspaces.by_stream) >= 2
    assert not any(s.any() for s in made.semaphores.by_stream.values())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_split_kernel_in_a_cuda_graph():
    """Captured in a CUDA graph, the split kernel uses counters of its own (not the eager
    launches' of the capturing stream), and each replay sums the current input."""
    fd = fuser_defs.colsum_fwd.__wrapped__()
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    fd.execute([x])  # compiled and tuned outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (y,) = fd.execute([x])
    made = _split_launch(fd)
    assert len(made.semaphores.captured) == 1
    assert len(made.workspaces.by_stream) == 1  # the eager call's: the capture allocated its own
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        (eager,) = fd.execute([x])  # an eager launch between replays, on another stream's counters
        torch.cuda.synchronize()
        torch.testing.assert_close(y, x.float().sum(0), rtol=1e-4, atol=1e-2)
        torch.testing.assert_close(eager, y)


def _kept(workspaces) -> list:
    """`workspaces` for the calling thread, as a launch on the CPU asks for them."""
    from fuser.codegen import scratch

    cpu = torch.device("cpu")
    return workspaces.get(cpu, scratch.stream_key(cpu))


def test_workspaces_are_kept_for_each_stream_within_a_budget(monkeypatch):
    """A launch keeps its workspaces between calls (one allocation fewer a call), one set for
    each stream (on the CPU: each thread), and allocates them at each call once all launches
    keep KEPT_WORKSPACE_BYTES; the sums stay right on every path."""
    from fuser.codegen import scratch

    monkeypatch.setattr(launch, "INTERPRETER_PROCESSORS", 8)
    fd = fuser_defs.colsum_fwd.__wrapped__()
    xs = [torch.randn(3000, 300, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    for x in xs[:2]:
        (y,) = fd.execute([x])
        torch.testing.assert_close(y, x.float().sum(0), rtol=1e-5, atol=1e-3)
    made = _split_launch(fd)
    (kept,) = made.workspaces.by_stream.values()
    assert kept[0].shape == (made.workspaces.specs[0][0]) and kept[0].shape[1] == 300
    assert _kept(made.workspaces)[0] is kept[0]  # the same tensors again
    other = []
    thread = threading.Thread(target=lambda: other.append((fd.execute([xs[2]])[0], _kept(made.workspaces))))
    thread.start()
    thread.join()
    torch.testing.assert_close(other[0][0], xs[2].float().sum(0), rtol=1e-5, atol=1e-3)
    assert other[0][1][0] is not kept[0] and len(made.workspaces.by_stream) == 2
    gc.disable()  # (no other launch's workspaces are let go of meanwhile)
    try:
        before = scratch.kept_workspace_bytes()
        counted = scratch.Workspaces(made.workspaces.specs)
        _kept(counted)
        assert scratch.kept_workspace_bytes() == before + counted.nbytes == before + kept[0].numel() * 4
        del counted  # a launch let go of (a full launch cache) gives its bytes back
        assert scratch.kept_workspace_bytes() == before
    finally:
        gc.enable()
    monkeypatch.setattr(scratch, "KEPT_WORKSPACE_BYTES", 0)  # over the budget: a fresh set a call
    fresh = scratch.Workspaces(made.workspaces.specs)
    assert _kept(fresh)[0] is not _kept(fresh)[0] and not fresh.by_stream


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_two_threads_on_one_stream_keep_their_own_workspaces():
    """The rmsnorm backward's inner-outer launch (a pass writing partial rows, then a combine
    reading them) from two threads on the same default stream: each thread's combine reads its
    own partial rows (a review ran this with workspaces kept per stream only: 23-71 of 300 dw
    wrong a thread, on the H200)."""
    import sys

    fd = fuser_defs.rmsnorm_bwd.__wrapped__()
    g = torch.Generator(device="cuda").manual_seed(0)
    ins = [[torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16, generator=g),
            torch.randn(4096, device="cuda", dtype=torch.bfloat16, generator=g),
            torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16, generator=g)] for _ in range(2)]
    refs = [fd.execute(a)[1].clone() for a in ins]
    outs: list = [[], []]

    def work(k):
        for _ in range(150):
            outs[k].append(fd.execute(ins[k])[1])
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between the two kernels of a launch
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    torch.cuda.synchronize()
    for k in range(2):
        wrong = sum(not torch.equal(o, refs[k]) for o in outs[k])
        assert wrong == 0, f"thread {k}: {wrong} of {len(outs[k])} dw differ"

"""Host time of the suite's backward rows: where a `torch.autograd.grad` call's time goes when
the kernels are short (16384x4096 on the H200 hosts), for eager, torch.compile, fuser.jit and
the hand-written definitions, beside two floors: autograd through a C++ node and through a
Python node that launch nothing. Not a suite row.

- launch-bound: wall time a call at [64, 256], the GPU far from busy (the host's cost);
- suite shape: do_bench's median (the suite's timing, L2 flushed before each call) and the
  back-to-back time a call (max of host and GPU) at 16384x4096;
- `--suite-order`: first builds and runs every forward row of the suite at that shape through
  fuser.jit and the definitions, as `scripts/bench` does before the backward rows, so that a
  row timed alone can be told from the same row in the suite's state;
- `--profile`: cProfile of each contender's launch-bound call;
- `--threads`: fuser.jit's backward program (the Python its autograd node runs) timed on the
  main thread, handed to a plain worker thread, and run inside an autograd node, each beside
  the same with no work (the autograd engine runs a CUDA node on its device thread);
- `--single-thread`: the two tables again with `torch.autograd.set_multithreading_enabled(False)`,
  under which the engine runs every node on the calling thread (no hand-off to its device
  thread and back);
- `--bench-loop`: do_bench's loop by hand for fuser.jit at 16384x4096 (an L2-clearing memset, a
  start event, the call, an end event): the memset's GPU time, the median measured, and the
  GPU's and host's period an iteration. The row reads its kernel time only while the host
  keeps ahead of the GPU;
- `--busy`: the host's time a call alone, with the GPU held busy by a sleep queued ahead of the
  calls (a round whose sleep runs out first is not counted), for the floors and every
  contender at both shapes, beside the time fuser.jit's autograd node spends in its backward
  program (on the engine's device thread) and the same program called on the main thread. A suite row reads its kernels' time while a
  call's host time stays under do_bench's memset plus the kernels (thirty-fifth session);
- `--placement`: the floors and every contender's call at both shapes with the calling thread
  and the engine's device thread pinned to cores (`os.sched_setaffinity`; the engine's thread
  pins itself from inside a node's backward): as they fall, both on one core, the caller alone
  pinned, adjacent cores, and the engine on the calling thread. The hand-off's cost is waking
  another core (thirty-fourth session).

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/backward_host.py [--rows rmsnorm_bwd,gelu_bwd]
        [--suite-order] [--profile] [--threads] [--single-thread] [--bench-loop] [--busy] [--placement]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import queue
import statistics
import sys
import threading
import time

# steady-state timings: each launch times its forms at its first call, as the bench's settled
# calls run them (with background compiles, do_bench's calls would all run the default form)
os.environ.setdefault("FUSER_BACKGROUND_COMPILE", "0")

import torch
import torch._functorch.config as functorch_config

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks import harness, suite  # noqa: E402

CONTENDERS = ("eager", "torch.compile", "fuser", "fuser-fd")
SUITE_SHAPE = (16384, 4096)
SMALL_SHAPE = (64, 256)
DEVICE = torch.device("cuda")  # of the jit programs timed by --threads (a CPU smoke test sets another)


class _NoWork(torch.autograd.Function):
    """A Python autograd node whose backward launches nothing."""

    @staticmethod
    def forward(ctx, x):
        ctx.grad = torch.empty_like(x)
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        return ctx.grad


def floors(shape: tuple) -> dict:
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    through_cpp, through_python = x.clone(), _NoWork.apply(x)  # CloneBackward passes dy on
    return {"floor: C++ node, no launch": lambda: torch.autograd.grad(through_cpp, x, dy, retain_graph=True),
            "floor: Python node, no launch": lambda: torch.autograd.grad(through_python, x, dy, retain_graph=True)}


def runners(kernel: str, shape: tuple, device: torch.device = DEVICE, contenders: tuple = CONTENDERS) -> dict:
    case = suite.make_case(kernel, *shape)
    args = case.make_inputs(device, 0)
    made = {}
    for name in contenders:
        impl = harness.CONTENDERS[name](case)
        if impl is not None:
            made[name] = suite.make_runner(case, impl.fn, args)
            made[name]()
    return made


def wall_us(fn, calls: int = 2000) -> float:
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def back_to_back_us(fn, calls: int = 200) -> float:
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def run_forward_rows(shape: tuple) -> None:
    """The suite's forward rows at `shape` through fuser.jit and the definitions, validated
    once and called as the bench calls them (its state before the backward rows)."""
    import triton.testing

    for kernel in suite.ROW_KERNELS:
        case = suite.make_case(kernel, *shape)
        if case.backward:
            continue
        args = case.make_inputs(torch.device("cuda"), 0)
        for name in ("fuser", "fuser-fd"):
            impl = harness.CONTENDERS[name](case)
            if impl is not None:
                triton.testing.do_bench(suite.make_runner(case, impl.fn, args), return_mode="median")


def profile(fn, calls: int = 2000, top: int = 20) -> str:
    wall_us(fn, 200)
    return harness.profile_calls(fn, DEVICE, calls, top)


class NodeTimer:
    """Time spent in fuser.jit's backward program inside its autograd node (`_Fused.run_backward`),
    a mean over the calls since `reset`; the node's arguments of its first call are kept, so
    that the same program can be timed outside autograd."""

    def __init__(self):
        from fuser.frontend import training

        self.training, self.real = training, training._Fused.run_backward
        self.seconds, self.calls, self.first = 0.0, 0, None

    def __enter__(self):
        def timed(ctx, grads):
            start = time.perf_counter()
            try:
                return self.real(ctx, grads)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
                self.first = self.first or (ctx, grads)
        self.training._Fused.run_backward = staticmethod(timed)
        return self

    def __exit__(self, *exc):
        self.training._Fused.run_backward = staticmethod(self.real)

    def reset(self, first: bool = False) -> None:
        """Start a new mean (and, with `first`, keep the next call's arguments)."""
        self.seconds, self.calls = 0.0, 0
        if first:
            self.first = None

    def mean_us(self) -> float:
        return self.seconds / self.calls * 1e6 if self.calls else float("nan")

    def program(self):
        """fuser.jit's backward program on the first call's arguments, outside autograd."""
        ctx, grads = self.first
        return lambda: self.real(ctx, grads)


def _jit_backward_program(kernel: str, shape: tuple):
    """(the jit row's runner, its case's inputs, the backward program fuser's autograd node
    runs, that program's arguments), captured from the node's first backward."""
    case = suite.make_case(kernel, *shape)
    args = case.make_inputs(DEVICE, 0)
    impl = harness.CONTENDERS["fuser"](case)
    with NodeTimer() as timer, impl.context():
        run = suite.make_runner(case, impl.fn, args)
        run()
    if timer.first is None:
        raise RuntimeError(f"{kernel}: fuser.jit's backward did not run through its own autograd node")
    ctx, grads = timer.first
    pick = {"tensor": ctx.saved_tensors, "int": ctx.ints, "tangent": grads}
    return run, [args[i] for i in case.grad_args], ctx.plan.run_backward, [pick[kind][k] for kind, k in ctx.plan.sources]


def thread_table(kernel: str, shape: tuple) -> None:
    run, wrt, program, program_args = _jit_backward_program(kernel, shape)
    ours = lambda: program(*program_args)  # noqa: E731
    jobs, results = queue.SimpleQueue(), queue.SimpleQueue()

    def worker():
        while True:
            results.put(jobs.get()())
    threading.Thread(target=worker, daemon=True).start()

    def on_worker(fn):
        return lambda: (jobs.put(fn), results.get())[1]

    class NoWork(torch.autograd.Function):  # fuser's node's shape: a non-tensor input first
        @staticmethod
        def forward(ctx, plan, *tensors):
            ctx.save_for_backward(*tensors)
            ctx.grads = tuple(torch.empty_like(t) for t in tensors)
            return tensors[0].clone()

        @staticmethod
        def backward(ctx, dy):
            ctx.saved_tensors  # noqa: B018 - unpacked, as fuser's node does
            return (None, *ctx.grads)

    class Ours(torch.autograd.Function):
        @staticmethod
        def forward(ctx, plan, *tensors):
            ctx.save_for_backward(*tensors)
            return tensors[0].clone()

        @staticmethod
        def backward(ctx, dy):
            ctx.saved_tensors  # noqa: B018
            return (None, *program(*program_args)[-len(wrt):])

    dy = torch.randn_like(wrt[0])
    no_work, with_work = NoWork.apply(object(), *wrt), Ours.apply(object(), *wrt)
    table = {"main thread: the backward program": ours,
             "worker thread: the hand-off alone": on_worker(lambda: None),
             "worker thread: the backward program": on_worker(ours),
             "autograd node: no work": lambda: torch.autograd.grad(no_work, wrt, dy, retain_graph=True),
             "autograd node: the backward program": lambda: torch.autograd.grad(with_work, wrt, dy, retain_graph=True),
             "fuser.jit's backward row": run}
    calls = 2000 if shape == SMALL_SHAPE else 200
    for name, fn in table.items():
        print(f"{kernel:14s} {name:40s} {wall_us(fn, calls):8.1f} us", flush=True)


def bench_loop(kernel: str, shape: tuple, iterations: int = 200) -> None:
    run = _jit_backward_program(kernel, shape)[0]
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")  # as do_bench's
    for label, fn in (("fuser.jit", run), ("the memset alone", lambda: None)):
        events = [[torch.cuda.Event(enable_timing=True) for _ in range(iterations)] for _ in range(3)]
        for _ in range(10):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(iterations):
            events[0][i].record()
            flush.zero_()
            events[1][i].record()
            fn()
            events[2][i].record()
        torch.cuda.synchronize()
        host = (time.perf_counter() - start) / iterations * 1e6
        measured = statistics.median(a.elapsed_time(b) * 1e3 for a, b in zip(events[1], events[2]))
        memset = statistics.median(a.elapsed_time(b) * 1e3 for a, b in zip(events[0], events[1]))
        period = statistics.median(events[2][i].elapsed_time(events[2][i + 1]) * 1e3 for i in range(iterations - 1))
        print(f"{kernel:14s} {label:18s} measured {measured:7.1f} us, memset {memset:6.1f} us, "
              f"GPU period {period:7.1f} us, host period {host:7.1f} us", flush=True)


def busy_table(rows: list, device: torch.device = DEVICE, shapes: tuple = (SMALL_SHAPE, SUITE_SHAPE),
               calls: int = 200, contenders: tuple = CONTENDERS) -> list:
    """`--busy`'s table: (label, host us a call, fuser's node us, the node's program on the main
    thread us) for the floors and every contender of `rows` at `shapes`."""
    found = []
    with NodeTimer() as timer:
        for shape in shapes:
            tag = f"[{shape[0]}x{shape[1]}]"
            if device.type == "cuda":
                for name, fn in floors(shape).items():
                    found.append((f"{name} {tag}", harness.busy_times(fn, device, calls)[0], None, None))
            for kernel in rows:
                for name, fn in runners(kernel, shape, device, contenders).items():
                    timer.reset(first=True)
                    host, node = harness.busy_times(fn, device, calls, timer=timer)
                    alone = harness.busy_times(timer.program(), device, calls)[0] if name == "fuser" and timer.first else None
                    found.append((f"{kernel}{tag} {name}", host, node if name == "fuser" else None, alone))
    return found


class _PinningNode(torch.autograd.Function):
    """A node whose backward pins the thread that runs it (a CUDA node: the engine's device
    thread, which the engine keeps for the process) to `cpus`."""

    cpus: set = set()

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        os.sched_setaffinity(0, _PinningNode.cpus)  # (0: the calling thread alone, on Linux)
        return dy


def pin_engine_thread(cpus: set, device: torch.device) -> None:
    """Pin the thread autograd's engine runs `device`'s nodes on to `cpus`."""
    _PinningNode.cpus = set(cpus)
    x = torch.randn(4, device=device, requires_grad=True)
    torch.autograd.grad(_PinningNode.apply(x).sum(), x)


PLACEMENTS = ("as they fall", "one core", "caller pinned", "adjacent cores", "calling thread")


@contextlib.contextmanager
def placement(name: str, device: torch.device):
    """The calling thread and the engine's device thread placed as `name` says (PLACEMENTS), on
    the second and third of the process's cores; both set back to every core after."""
    everywhere = os.sched_getaffinity(0)
    cores = sorted(everywhere)
    one, other = (cores[1], cores[2]) if len(cores) >= 3 else (cores[0], cores[-1])
    caller, engine = {"one core": ({one}, {one}), "caller pinned": ({one}, everywhere),
                      "adjacent cores": ({one}, {other})}.get(name, (everywhere, everywhere))
    os.sched_setaffinity(0, caller)
    pin_engine_thread(engine, device)
    try:
        with torch.autograd.set_multithreading_enabled(name != "calling thread"):
            yield
    finally:
        os.sched_setaffinity(0, everywhere)
        pin_engine_thread(everywhere, device)


def placement_table(rows: list) -> None:
    """Every contender's backward call at both shapes under each placement, best of two rounds
    (wall time a call at the small shape, do_bench's median at the suite's)."""
    import triton.testing

    calls = {f"{name} [{SMALL_SHAPE[0]}x{SMALL_SHAPE[1]}]": fn for name, fn in floors(SMALL_SHAPE).items()}
    timed_by_bench = {}
    for kernel in rows:
        calls |= {f"{kernel}[{SMALL_SHAPE[0]}x{SMALL_SHAPE[1]}] {n}": fn for n, fn in runners(kernel, SMALL_SHAPE).items()}
        timed_by_bench |= {f"{kernel}[{SUITE_SHAPE[0]}x{SUITE_SHAPE[1]}] {n}": fn
                           for n, fn in runners(kernel, SUITE_SHAPE).items()}
    found: dict = {}
    for _ in range(2):
        for where in PLACEMENTS:
            with placement(where, DEVICE):
                for label, fn in calls.items():
                    found.setdefault((label, where), []).append(wall_us(fn, 1000))
                for label, fn in timed_by_bench.items():
                    us = triton.testing.do_bench(fn, return_mode="median") * 1e3
                    found.setdefault((label, where), []).append(us)
    print("| us a call | " + " | ".join(PLACEMENTS) + " |")
    print("| --- |" + " --- |" * len(PLACEMENTS))
    for label in [*calls, *timed_by_bench]:
        print(f"| {label} | " + " | ".join(f"{min(found[(label, w)]):.1f}" for w in PLACEMENTS) + " |", flush=True)


def tables(rows: list, how: str) -> None:
    """The launch-bound and suite-shape tables of `rows`; `how` says how the engine runs."""
    import triton.testing

    print(f"== launch-bound: wall time a call at {list(SMALL_SHAPE)}{how}")
    for kernel in rows:
        for name, fn in {**floors(SMALL_SHAPE), **runners(kernel, SMALL_SHAPE)}.items():
            print(f"{kernel:14s} {name:30s} {wall_us(fn):8.1f} us", flush=True)
    print(f"== {SUITE_SHAPE[0]}x{SUITE_SHAPE[1]}: do_bench median / back-to-back a call{how}")
    for kernel in rows:
        for name, fn in {**floors(SUITE_SHAPE), **runners(kernel, SUITE_SHAPE)}.items():
            median = triton.testing.do_bench(fn, return_mode="median") * 1e3
            print(f"{kernel:14s} {name:30s} {median:8.1f} us {back_to_back_us(fn):8.1f} us", flush=True)


def main() -> None:
    import triton

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="rmsnorm_bwd,layernorm_bwd,gelu_bwd",
                   help="comma-separated backward kernels of the suite")
    p.add_argument("--suite-order", action="store_true", help="run the forward rows first, as the bench does")
    p.add_argument("--profile", action="store_true", help="cProfile each contender's launch-bound call")
    p.add_argument("--threads", action="store_true",
                   help="time fuser.jit's backward program on the main thread, a worker thread and in a node")
    p.add_argument("--single-thread", action="store_true",
                   help="the tables again with the engine on the calling thread "
                        "(torch.autograd.set_multithreading_enabled(False))")
    p.add_argument("--bench-loop", action="store_true", help="do_bench's loop by hand for fuser.jit at 16384x4096")
    p.add_argument("--busy", action="store_true",
                   help="the host's time a call with the GPU held busy, and fuser.jit's node's share of it")
    p.add_argument("--placement", action="store_true",
                   help="every contender's call with the caller and the engine's thread pinned to cores")
    opts = p.parse_args()
    rows = opts.rows.split(",")
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    with functorch_config.patch(donated_buffer=False):  # (retain_graph=True, as the harness)
        if opts.suite_order:
            run_forward_rows(SUITE_SHAPE)
        tables(rows, "")
        if opts.single_thread:
            with torch.autograd.set_multithreading_enabled(False):
                tables(rows, ", the engine on the calling thread")
        if opts.profile:
            for kernel in rows:
                for name, fn in runners(kernel, SMALL_SHAPE).items():
                    print(f"== cProfile {kernel} {name}, 2000 calls\n{profile(fn)}")
        if opts.threads:
            for shape in (SMALL_SHAPE, SUITE_SHAPE):
                print(f"== fuser.jit's backward program by thread, {shape[0]}x{shape[1]}, wall time a call")
                for kernel in rows:
                    thread_table(kernel, shape)
        if opts.bench_loop:
            print("== do_bench's loop by hand, 16384x4096 (medians)")
            for kernel in rows:
                bench_loop(kernel, SUITE_SHAPE)
        if opts.busy:
            print("== the host's time a call, the GPU held busy (best of 5 rounds of 200 calls; us)")
            print("| call | host | fuser.jit's node (engine's thread) | its program on the main thread |")
            print("| --- | --- | --- | --- |")
            for label, host, node, alone in busy_table(rows):
                cells = [f"{v:.1f}" if v is not None else "" for v in (host, node, alone)]
                print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
        if opts.placement:
            print("== the calling thread and the engine's thread placed on cores")
            placement_table(rows)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("backward_host.py needs a CUDA GPU")
    main()

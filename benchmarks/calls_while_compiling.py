"""Calls made while a launch's other forms compile in the background (lead 13 of
docs/performance.md): the jitted cross entropy of the llama example, forward and backward over
[8, 1024, 32000] bf16 logits, called back to back from its second call (which starts the
background compiles) until they are done, each call synchronized and timed; then the call
that times the forms, and 100 calls once the fastest is kept. Prints the calls' times in
quarter seconds, and what the background threads spent in this process: their jobs' CPU time
(`time.thread_time`, the GIL's share of it included) beside their wall time, and the compile
worker's counts (`compile_pool.STATS`).

Each run should start cold, so that the forms compile: a new process with empty caches.
`--switch S` sets `sys.setswitchinterval(S)` first (Python's default 0.005 s: how long a thread
holding the GIL keeps it while another waits), to tell the GIL's share from the host's
processors'.

    FUSER_SYSTEM_PYTHON=1 TRITON_CACHE_DIR=$(mktemp -d) FUSER_CACHE_DIR=$(mktemp -d) \\
        PYTHONPATH=. python3 benchmarks/calls_while_compiling.py [--switch 0.0002]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

import torch
import torch.nn.functional as F

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

import fuser  # noqa: E402
from fuser.codegen import compile_pool, tuning  # noqa: E402
from fuser.schedulers import heuristics  # noqa: E402


def cross_entropy(logits, target):
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten())


class JobClock:
    """The CPU and wall seconds of the background compile jobs, summed (each job's thread CPU
    time: a profiler cannot run on two threads at once on Python 3.12)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cpu = self.wall = 0.0
        self.jobs = 0
        queue = tuning._background.queue
        run = queue.run

        def timed(item):
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                run(item)
            finally:
                with self.lock:
                    self.cpu += time.thread_time() - cpu
                    self.wall += time.perf_counter() - wall
                    self.jobs += 1
        queue.run = timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switch", type=float, help="sys.setswitchinterval first (seconds)")
    parser.add_argument("--limit", type=float, default=25.0, help="seconds of calls at most while compiles run")
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("calls_while_compiling.py times GPU calls: no CUDA device here")
    if opts.switch:
        sys.setswitchinterval(opts.switch)
    clock = JobClock()
    torch.manual_seed(0)
    x = torch.randn(8, 1024, 32000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 32000, (8, 1024), device="cuda")
    jitted = fuser.jit(cross_entropy)

    def call() -> float:
        start = time.perf_counter()
        torch.autograd.grad(jitted(x, target), [x])
        torch.cuda.synchronize()
        return time.perf_counter() - start

    print(f"first call {call():.2f} s", flush=True)
    start, calls = time.perf_counter(), []
    while True:
        at = time.perf_counter() - start
        calls.append((at, call() * 1e6))
        if tuning.wait_for_compiles(0) and len(calls) > 3:
            break
        if at > opts.limit:
            print(f"compiles still running after {opts.limit} s", flush=True)
            break
    done = time.perf_counter() - start
    print(f"the call that times the forms {call() * 1e3:.0f} ms")
    steady = statistics.median(call() * 1e6 for _ in range(100))
    print(f"switch interval {sys.getswitchinterval()} s; compiles done {done:.2f} s after the second call; "
          f"{len(calls)} calls meanwhile, median {statistics.median(us for _, us in calls):.0f} us; "
          f"once tuned {steady:.0f} us" + ("" if heuristics.autotuning() else " (FUSER_AUTOTUNE=0: the default forms)"))
    for k in range(int(done / 0.25) + 1):
        inside = [us for at, us in calls if k * 0.25 <= at < (k + 1) * 0.25]
        if inside:
            print(f"  {k * 0.25:5.2f}-{(k + 1) * 0.25:5.2f} s: {len(inside):3d} calls, "
                  f"median {statistics.median(inside):6.0f} us, max {max(inside):6.0f}")
    print(f"background jobs {clock.jobs}: CPU {clock.cpu:.2f} s, wall {clock.wall:.2f} s; "
          f"compile worker {compile_pool.STATS}")


if __name__ == "__main__":
    main()

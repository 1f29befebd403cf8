"""Host cost per call: how long the CPU spends between `fn(*args)` and the kernel launch.

Times a small launch-bound function (4 ops on [8, 32], BENCHMARKS.md) through eager,
torch.compile, fuser.jit and an equivalent FusionDefinition, as calls per second of wall time
with the GPU far from busy. With --row NAME it also profiles one suite row (e.g.
add_rmsnorm_fwd) through fuser.jit and its hand-written definition, listing the kernels each
launches and their GPU time, to tell host overhead from kernel time.

Run on the GPU machine: FUSER_SYSTEM_PYTHON=1 python3 scripts/host_overhead.py [--row NAME]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

# steady-state timings: each launch times its forms at its first call, as the bench's settled
# calls run them (with background compiles, do_bench's calls would all run the default form)
os.environ.setdefault("FUSER_BACKGROUND_COMPILE", "0")

import torch

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

import fuser  # noqa: E402
from fuser import DataType, FusionDefinition  # noqa: E402


def small(x, y):
    return torch.relu(x * y + 1.0).sum(-1)


def small_fd():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        y = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
        fd.add_output(fd.ops.sum(fd.ops.relu(fd.ops.add(fd.ops.mul(x, y), 1.0)), [-1]))
    return lambda a, b: fd.execute([a, b])[0]


def per_call_us(fn, args, calls: int = 2000) -> float:
    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def host_table() -> None:
    x, y = (torch.randn(8, 32, device="cuda") for _ in range(2))
    versions = {"eager": small, "torch.compile": torch.compile(small, dynamic=False),
                "fuser.jit": fuser.jit(small), "fuser FusionDefinition": small_fd()}
    ref = small(x, y)
    for fn in versions.values():
        torch.testing.assert_close(fn(x, y), ref, rtol=1e-5, atol=1e-5)
    # the best of 5 rounds that alternate the versions: the host's speed drifts within a
    # process, and one round each gave whichever version ran in a slow stretch its time
    times = {name: float("inf") for name in versions}
    for _ in range(5):
        for name, fn in versions.items():
            times[name] = min(times[name], per_call_us(fn, (x, y)))
    # the target of issue 6: at most half of torch.compile's host time in the same run
    print("| version | us per call | of torch.compile's |\n| --- | --- | --- |")
    for name, us in times.items():
        print(f"| {name} | {us:.1f} | {us / times['torch.compile']:.2f}x |")
    jitted = versions["fuser.jit"]
    # a call that misses the direct path goes through Dynamo's whole wrapper: say how many hit
    print(f"fuser.jit: {jitted._direct.hits} of {jitted.cache_info().calls} calls took the direct path")


def cprofile(name: str, fn, args: tuple, calls: int, top: int = 14) -> None:
    """Where the host time of `fn(*args)` goes (cProfile, top entries by own time, in us per
    call)."""
    import cProfile
    import pstats

    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(*args)
    prof.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(prof)
    print(f"== {name}: {stats.total_tt / calls * 1e6:.1f} us per call under cProfile")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (file, line, func), (_, ncalls, tottime, cumtime, _) in rows:
        print(f"   {tottime / calls * 1e6:6.2f} own {cumtime / calls * 1e6:7.2f} cum  x{ncalls / calls:g}"
              f"  {os.path.basename(file)}:{line}({func})")


def cpu_events(name: str, fn, calls: int = 200, top: int = 12) -> None:
    """The CPU side of `fn()` as torch.profiler sees it (ATen ops, CUDA runtime and driver calls),
    top entries by own CPU time, in us per call."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    print(f"== {name}: CPU events (own us per call)")
    for e in events:
        print(f"   {e.self_cpu_time_total / calls:6.2f}  x{e.count / calls:g}  {e.key[:80]}")


def profile_host(calls: int = 3000) -> None:
    x, y = (torch.randn(8, 32, device="cuda") for _ in range(2))
    for name, fn in (("fuser FusionDefinition", small_fd()), ("fuser.jit", fuser.jit(small))):
        cprofile(name, fn, (x, y), calls)


def _host_us(fn, args, calls: int = 20) -> float:
    """CPU time per call with the GPU queue far from full: the host cost alone."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def profile_row(name: str, shape: tuple = (16384, 4096), with_cprofile: bool = False,
                with_compile: bool = False) -> None:
    """One suite row through fuser.jit and its hand-written definitions: wall time per call and
    host time per call (the best of three rounds that alternate the two, since the host's speed
    drifts within a process), and the kernels launched with their GPU time. Backward rows time
    `torch.autograd.grad` as the benchmark does."""
    from benchmarks import fuser_defs, suite

    case = next(c for c in suite.build_suite() if c.kernel == name and c.shape == shape)
    args = case.make_inputs("cuda")
    calls = {}
    versions = [("fuser.jit", fuser.jit(case.fn)), ("fuser-fd", fuser_defs.implementation(name)), ("eager", case.fn)]
    if with_compile:
        versions.append(("torch.compile", torch.compile(case.fn, dynamic=False)))
    for label, fn in versions:
        if fn is not None:
            runner = suite.make_runner(case, fn, args)
            for _ in range(20):
                runner()
            calls[label] = runner
    torch.cuda.synchronize()
    wall = {label: [] for label in calls}
    host = {label: [] for label in calls}
    for _ in range(3):
        for label, call in calls.items():
            wall[label].append(per_call_us(call, (), 50))
            host[label].append(_host_us(call, ()))
    direct = _backward_definition(name, args)
    if direct is not None:  # our share of a backward call: its definition alone, no autograd
        print(f"== the backward definition alone ({case.name}): host "
              f"{min(_host_us(direct, ()) for _ in range(3)):.1f} us per call, wall "
              f"{per_call_us(direct, (), 50):.1f} us per call")
        if with_cprofile:
            cprofile(f"the backward definition alone {case.name}", direct, (), 200, top=25)
            cpu_events(f"the backward definition alone {case.name}", direct)
    for label, call in calls.items():
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                call()
            torch.cuda.synchronize()
        kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(f"== {label}: {case.name}: wall {min(wall[label]):.1f} us per call, host "
              f"{min(host[label]):.1f} us per call (best of 3 alternating rounds)")
        for e in sorted(kernels, key=lambda e: -e.device_time_total)[:6]:
            print(f"   {e.key[:70]:70s} x{e.count / 10:g} {e.device_time_total / 10:.1f} us")
        if with_cprofile:
            cprofile(f"{label} {case.name}", call, (), 200, top=25)


def _backward_definition(name: str, args: tuple):
    """The hand-written backward definition of a norm row called directly on its inputs (x, w
    and a random dy), or None for other rows."""
    from benchmarks import fuser_defs

    build = {"rmsnorm_bwd": fuser_defs.rmsnorm_bwd, "layernorm_bwd": fuser_defs.layernorm_bwd}.get(name)
    if build is None:
        return None
    x, w = args[0].detach(), args[1].detach()
    dy = torch.randn_like(x)
    fd = build()
    return lambda: fd.execute([x, w, dy])


class _NoWork(torch.autograd.Function):
    """A backward that launches nothing: it returns gradients made beforehand."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.grads = (torch.empty_like(x), torch.empty_like(w))
        return x.clone()

    @staticmethod
    def backward(ctx, dy):
        return ctx.grads


def autograd_floor(shape: tuple = (16384, 4096)) -> None:
    """What `torch.autograd.grad` costs a backward row of the suite before any kernel: the
    suite's timing (do_bench, median, cache flushed before each call) of a backward that
    launches nothing, against the copy time of the row's bytes (x, dy read, dx written)."""
    import triton.testing

    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(shape[1], device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = _NoWork.apply(x, w)
    dy = torch.randn_like(y)
    floor = triton.testing.do_bench(lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True),
                                    return_mode="median") * 1e3
    src = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    gbps = 2 * src.nbytes / triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6
    ideal = 3 * x.numel() * x.element_size() / gbps / 1e3
    print(f"== torch.autograd.grad with a backward that launches nothing ({shape[0]}x{shape[1]}): "
          f"{floor:.1f} us under do_bench; the row's bytes at copy speed take {ideal:.1f} us, so a "
          f"backward whose kernels ran at copy speed after it would read at most "
          f"{ideal / (ideal + floor):.2f} of copy")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--row", action="append", default=[],
                   help="suite row to profile: NAME (at 16384x4096) or NAME@MxN")
    p.add_argument("--profile", action="store_true", help="cProfile the fuser calls of the table and of each --row")
    p.add_argument("--compile", action="store_true", help="also profile each --row through torch.compile")
    p.add_argument("--autograd-floor", action="store_true",
                   help="time torch.autograd.grad of a backward that launches nothing, as the suite times backward rows")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("host_overhead: needs a CUDA GPU")
    host_table()
    if args.autograd_floor:
        for shape in ((16384, 4096), (16384, 8192), (4096, 32768)):
            autograd_floor(shape)
    if args.profile:
        profile_host()
    for row in args.row:
        name, _, shape = row.partition("@")
        profile_row(name, tuple(int(v) for v in shape.split("x")) if shape else (16384, 4096),
                    args.profile, args.compile)


if __name__ == "__main__":
    main()

"""Benchmark harness: the kernel suite against eager, torch.compile, Liger and fuser.

What it measures (see /work/shared/BENCHMARKS.md):

1. The machine's reference bandwidth: a device-to-device copy of a large bf16 tensor, charged
   for the bytes read plus the bytes written.
2. For every case of `suite.py` and every contender: first the contender's result is checked
   against eager PyTorch on the same fresh random inputs (dtype-aware tolerances; where the
   two disagree, against the same computation in float64, which judges eager's roundings
   too); only a contender that passes is timed, with the median of `triton.testing.do_bench` (a plain
   wall-clock median on the CPU smoke test).
3. Each time becomes GB/s (the case's bytes over the time) and a share of the copy bandwidth;
   1.0 means the kernel moves its bytes as fast as a copy does.
4. On the GPU, where each timed cell's time goes (`call_costs`): the GPU's busy time a call
   (`kernel_ms`, by the profiler, without do_bench's L2 flush) and the host's time a call with
   the GPU kept busy (`host_ms`). A row below the target names the share its kernels alone
   would read, which tells a slow kernel from a host that cannot keep up.

Contenders: "eager"; "torch.compile" (static shapes, compiled afresh per case);
"compile+cd" (the same with Inductor's coordinate-descent tuning); "compile dynamic"
(dynamic=True); "liger" (rmsnorm, layernorm and cross entropy, when liger_kernel imports);
"fuser" (`fuser.jit(fn)` on the plain eager function) and "fuser-fd" (the same computation written
by hand as FusionDefinitions, benchmarks/fuser_defs.py).

A contender that raises or disagrees with both gets "error: ..." in its cell; the run goes on.
Output (benchmarks/report.py): a markdown table on stdout (rows = cases, columns = contenders,
cells = share of copy), plus in --out: the same table (.md), every raw figure (.json) and a
grouped bar chart (.png, when matplotlib imports).

Run it through scripts/bench; `scripts/bench --help` lists the flags.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import functools
import gc
import io
import json
import math
import platform
import pstats
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Optional

import torch

try:
    from benchmarks import suite
    from benchmarks.report import (add_best_peer, bench_seconds, breakdown, column_geomeans, format_cell, log,
                                   merge_reports, output_stem, part_of, table_with_targets, write_outputs,
                                   write_partial)
except ImportError:  # run as a plain script without the repo on the path
    import suite
    from report import (add_best_peer, bench_seconds, breakdown, column_geomeans, format_cell, log, merge_reports,
                        output_stem, part_of, table_with_targets, write_outputs, write_partial)

COPY_NUMEL = {"cuda": 1 << 28, "cpu": 1 << 24}  # bf16 elements: 512 MiB on the GPU
TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 1e-2, torch.float32: 1e-3,
             torch.float64: 1e-6}
COMPILE_CONTENDERS = ("torch.compile", "compile+cd", "compile dynamic")


# ---------------------------------------------------------------------------------------------
# Contenders: each maps a Case to an Impl (or None: not applicable, an empty cell)
# ---------------------------------------------------------------------------------------------

@dataclass
class Impl:
    """How one contender computes one case: a drop-in replacement of `case.fn`."""

    fn: Callable
    context: Callable[[], ContextManager] = contextlib.nullcontext  # held while compiling/timing
    forward_in_timing: bool = False  # backward rows: time forward + grad (gradient made in fwd)


def eager_contender(case: suite.Case) -> Impl:
    return Impl(case.fn)


def compile_contender(dynamic: bool, coordinate_descent: bool = False):
    def contender(case: suite.Case) -> Impl:
        torch._dynamo.reset()  # compiled afresh for every case: no kernel reused across shapes
        return Impl(torch.compile(case.fn, dynamic=dynamic),
                    lambda: compile_config(coordinate_descent))

    return contender


@contextlib.contextmanager
def compile_config(coordinate_descent: bool):
    """Inductor settings held while a compiled contender compiles and runs.

    Donated buffers are turned off: they make a compiled backward refuse retain_graph=True,
    which the backward rows need to call it repeatedly. They only save memory, not time.
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    with contextlib.ExitStack() as stack:
        if hasattr(functorch_config, "donated_buffer"):
            stack.enter_context(functorch_config.patch(donated_buffer=False))
        if coordinate_descent:
            stack.enter_context(inductor_config.patch(coordinate_descent_tuning=True))
        yield


def liger_available() -> bool:
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        return False
    return True


def liger_contender(case: suite.Case) -> Impl | None:
    from liger_kernel.transformers import functional as lf

    if case.kernel.startswith("rmsnorm_"):
        def rmsnorm(x, weight):
            # "gemma" casting = all math in fp32, as suite.rmsnorm; not in place, like the others.
            try:
                return lf.liger_rms_norm(x, weight, suite.RMS_EPS, 0.0, "gemma", False)
            except TypeError:  # releases without the in_place argument
                return lf.liger_rms_norm(x, weight, suite.RMS_EPS, 0.0, "gemma")
        return Impl(rmsnorm)
    if case.kernel.startswith("layernorm_"):
        return Impl(lambda x, w, b: lf.liger_layer_norm(x, w, b, suite.LAYERNORM_EPS))
    if case.kernel == "cross_entropy_bwd":
        def cross_entropy(logits, target):
            loss = lf.liger_cross_entropy(logits, target)
            return loss[0] if isinstance(loss, tuple) else loss
        # Liger writes the gradient into the logits during the forward; its backward only
        # scales it. Timing the backward alone would hide the work, so forward + grad is timed.
        return Impl(cross_entropy, forward_in_timing=True)
    return None


def fuser_contender(case: suite.Case) -> Callable | None:
    """fuser's implementation of `case.fn`, or None while the package has no `jit` yet.

    Assumes `fuser.jit(fn)` returns a drop-in callable (same arguments, same outputs), and, for
    backward rows, outputs that autograd can differentiate.
    """
    try:
        import fuser
    except ImportError:
        return None
    jit = getattr(fuser, "jit", None)
    return None if jit is None else jit(case.fn)


def fuser_fd_contender(case: suite.Case) -> Callable | None:
    """The same computation written by hand as FusionDefinitions (benchmarks/fuser_defs.py)."""
    try:
        from benchmarks import fuser_defs
    except ImportError:
        import fuser_defs
    return fuser_defs.implementation(case.kernel)


def _fuser_impl(case: suite.Case) -> Impl | None:
    fn = fuser_contender(case)
    # fuser.jit compiles through AOTAutograd too: the same donated-buffer setting as torch.compile
    return None if fn is None else Impl(fn, lambda: compile_config(False))


def _fuser_fd_impl(case: suite.Case) -> Impl | None:
    fn = fuser_fd_contender(case)
    return None if fn is None else Impl(fn)


CONTENDERS: dict[str, Callable[[suite.Case], Impl | None]] = {
    "eager": eager_contender,
    "torch.compile": compile_contender(dynamic=False),
    "compile+cd": compile_contender(dynamic=False, coordinate_descent=True),
    "compile dynamic": compile_contender(dynamic=True),
    "liger": liger_contender,
    "fuser": _fuser_impl,
    "fuser-fd": _fuser_fd_impl,
}


# ---------------------------------------------------------------------------------------------
# Validation and timing
# ---------------------------------------------------------------------------------------------

class Mismatch(Exception):
    pass


def check_close(got: tuple, want: tuple) -> None:
    """Raise Mismatch unless every output matches eager's in shape, dtype and value.

    |got - want| <= tol * (|want| + rms(want)) elementwise, tol by dtype: the relative part
    covers rounding, the part scaled by the tensor's RMS covers summation order and keeps tiny
    tensors (softmax probabilities, cross-entropy gradients) from passing trivially.
    """
    if len(got) != len(want):
        raise Mismatch(f"{len(got)} outputs, eager has {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, torch.Tensor):
            raise Mismatch(f"output {i} is a {type(g).__name__}, not a tensor")
        if g.shape != w.shape or g.dtype != w.dtype:
            raise Mismatch(f"output {i} is {g.dtype} {list(g.shape)}, "
                           f"eager {w.dtype} {list(w.shape)}")
        tol = TOLERANCE.get(w.dtype, 1e-3)
        g32, w32 = g.detach().float(), w.detach().float()
        rms = max(w32.pow(2).mean().sqrt().item(), 1e-30)
        close = torch.isclose(g32, w32, rtol=tol, atol=tol * rms, equal_nan=True)
        if not bool(close.all()):
            diff = (g32 - w32).abs().nan_to_num(nan=math.inf).max().item()
            bad = int((~close).sum())
            raise Mismatch(f"output {i}: {bad}/{w.numel()} off, max abs diff {diff:.3g} "
                           f"(eager rms {rms:.3g})")


def measure_ms(fn: Callable, device: torch.device) -> float:
    """Median time of one call in milliseconds."""
    if device.type == "cuda":
        import triton.testing
        return triton.testing.do_bench(fn, return_mode="median")
    return _cpu_median_ms(fn)


def _cpu_median_ms(fn: Callable, min_reps: int = 5, budget_s: float = 0.2) -> float:
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def profile_calls(fn: Callable, device: torch.device, calls: int = 200, top: int = 15) -> str:
    """cProfile's `top` functions by their own time over `calls` calls of `fn`."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    synchronize(device)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def busy_times(fn, device: torch.device, calls: int = 200, rounds: int = 5, timer=None,
               seconds_a_call: float = 2.5e-3) -> tuple:
    """(the host's time a call in us, `timer.mean_us()` in that round), the best of `rounds`
    rounds of `calls` calls, with the GPU held busy by a sleep queued ahead of them so that none
    waits on it. A round whose sleep ended before its calls did (calls slower than
    `seconds_a_call`, or a launch queue filled by many kernels a call) timed waiting, not the
    host: it is not counted, and where none counts the host time is NaN. `timer` (optional):
    an object with `reset()` and `mean_us()`, read per round (backward_host.NodeTimer)."""
    best = (float("nan"), float("nan"))
    for _ in range(rounds):
        slept = None
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda._sleep(int(2e9 * calls * seconds_a_call))  # (cycles, at about 2 GHz)
            slept = torch.cuda.Event()
            slept.record()
        if timer is not None:
            timer.reset()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        us = (time.perf_counter() - start) / calls * 1e6
        covered = slept is None or not slept.query()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if covered and not us >= best[0]:  # (NaN: none counted yet)
            best = (us, timer.mean_us() if timer is not None else float("nan"))
    return best


KERNEL_NAME_CHARS = 80  # (ATen's and cuBLAS's kernel names run to hundreds of characters)


def kernel_times(fn: Callable, device: torch.device, calls: int = 5) -> dict[str, float]:
    """The GPU's busy time a call of `fn` by kernel name (us; copies and fills included, each
    under its own name), as the profiler records them: no L2 flush before each call, as do_bench
    has, and none of the host's time, which do_bench's figure counts where the host lags."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        synchronize(device)
    times: dict[str, float] = {}
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            name = e.name[:KERNEL_NAME_CHARS]
            times[name] = times.get(name, 0.0) + e.time_range.elapsed_us() / calls
    return times


def call_costs(fn: Callable, device: torch.device) -> dict:
    """Where a cell's time goes, on the GPU: `kernel_ms` (the GPU busy a call), `kernels` (the
    same by kernel, us) and `host_ms` (the host's time a call, the GPU kept busy). A call whose
    do_bench time is well above its kernel time is host-bound (or waits on something else):
    the report says so."""
    if device.type != "cuda":
        return {}
    host_us = busy_times(fn, device, calls=50, rounds=3, seconds_a_call=1e-3)[0]
    kernels = kernel_times(fn, device)
    costs = {"kernel_ms": sum(kernels.values()) / 1e3, "kernels": {k: round(v, 2) for k, v in kernels.items()}}
    if not math.isnan(host_us):  # (NaN: no round's calls fit under the sleep)
        costs["host_ms"] = host_us / 1e3
    return costs


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copy_bandwidth(device: torch.device) -> dict:
    """GB/s of dst.copy_(src) on a large bf16 tensor, counting bytes read plus written."""
    src = torch.randn(COPY_NUMEL[device.type], dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    ms = measure_ms(lambda: dst.copy_(src), device)
    moved = 2 * src.nbytes
    return {"bytes": moved, "ms": ms, "gbps": moved / ms / 1e6}


def short_error(exc: BaseException, limit: int = 80) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    if isinstance(exc, Mismatch):
        text = "mismatch: " + (lines[0] if lines else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def eager_reference(case: suite.Case, device: torch.device, seed: int) -> tuple:
    args = case.make_inputs(device, seed)
    out = suite.make_runner(case, case.fn, args, seed)()
    return tuple(t.detach() for t in out)


def exact_reference(case: suite.Case, device: torch.device, seed: int) -> tuple:
    """The case's outputs with its float inputs (and a backward row's dy, drawn as the runner
    draws it) in float64: the math that eager's roundings and a contender's both approximate,
    the judge where the two disagree (the CPU's bf16 LayerNorm backward sums db in steps
    rounded to bf16: 4 of its units from the exact sum where fuser's was within 1)."""
    args = case.make_inputs(device, seed)
    wide = [a.detach().double().requires_grad_(a.requires_grad)
            if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    if not case.backward:
        return tuple(t.detach() for t in suite.as_tuple(case.fn(*wide)))
    with torch.no_grad():
        grads = [g.double() for g in suite.random_like(suite.as_tuple(case.fn(*args)), seed)]
    outputs = suite.as_tuple(case.fn(*wide))
    return torch.autograd.grad(outputs, [wide[i] for i in case.grad_args], grad_outputs=grads)


def exact_when_asked(case: suite.Case, device: torch.device, seed: int) -> Callable[[], tuple]:
    """`exact_reference`, computed at the first call (where eager disagrees) and kept."""
    return functools.cache(lambda: exact_reference(case, device, seed))


def check_output(got: tuple, reference: tuple, exact: Callable[[], tuple]) -> None:
    """`check_close` against eager's outputs or, where those disagree, against the exact ones
    (`exact()`, rounded to each output's type): a wrong output is far from both."""
    try:
        check_close(got, reference)
    except Mismatch as eager_says:
        try:
            check_close(got, tuple(e.to(r.dtype) for e, r in zip(exact(), reference)))
        except Mismatch:
            raise eager_says from None


def run_contender(case: suite.Case, impl: Impl, reference: tuple, device: torch.device,
                  copy_gbps: float, seed: int, exact: Optional[Callable[[], tuple]] = None) -> dict:
    """Validate, then time, one contender on one case. Raises on error or mismatch. `exact`:
    the case's exact outputs where eager's disagree (default: `exact_reference`, computed then)."""
    exact = exact or exact_when_asked(case, device, seed)
    with impl.context():
        args = case.make_inputs(device, seed)  # fresh: a contender may write into its inputs
        t0 = time.perf_counter()
        runner = suite.make_runner(case, impl.fn, args, seed, impl.forward_in_timing)
        out = runner()
        synchronize(device)
        first_call_s = time.perf_counter() - t0  # includes compilation for compilers
        check_output(out, reference, exact)
        del out
        if impl.forward_in_timing:  # (it may have written into its inputs, as Liger's cross
            args = case.make_inputs(device, seed)  # entropy writes dx into the logits: the
            runner = suite.make_runner(case, impl.fn, args, seed, True)  # settled call reads fresh ones)
        tuned_s, out = settle(runner, device)
        check_output(out, reference, exact)  # (what fuser runs once its launch forms are timed, too)
        del out
        t0 = time.perf_counter()
        ms = measure_ms(runner, device)
        try:
            costs = call_costs(runner, device)
        except Exception as exc:  # (a diagnostic: the profiler's failure must not fail the cell)
            costs = {"costs_error": short_error(exc)}
        timing_s = time.perf_counter() - t0  # (do_bench and the kernel and host times)
    gbps = case.bytes_moved / ms / 1e6
    return {"ms": ms, "gbps": gbps, "share": gbps / copy_gbps, "first_call_s": first_call_s, "tuned_s": tuned_s,
            "timing_s": timing_s, **costs}


def settle(runner: Callable, device: torch.device) -> tuple[float, tuple]:
    """(seconds, the outputs of) a second call, made once fuser's launch forms compiling in the
    background are compiled (`fuser.finish_tuning`): the call that times them and runs the
    fastest (codegen/tuning.py). The timing that follows runs the chosen forms, and do_bench does
    not count that call in its estimate of a call's time."""
    start = time.perf_counter()
    try:
        import fuser
        fuser.finish_tuning()
    except ImportError:
        pass
    out = runner()
    synchronize(device)
    return time.perf_counter() - start, out


def run_cell(case, name, reference, device, copy_gbps, seed, verbose, exact=None) -> dict:
    """One contender's cell, with `cell_s`: the seconds the bench spent on it (its compile,
    checks and timing), which `report.bench_seconds` adds up by contender."""
    start = time.perf_counter()
    try:
        impl = CONTENDERS[name](case)
        if impl is None:
            return {"skipped": "no implementation for this case"}
        cell = run_contender(case, impl, reference, device, copy_gbps, seed, exact)
    except Exception as exc:  # one contender's failure must not end the run
        if verbose:
            traceback.print_exc(file=sys.stderr)
        cell = {"error": short_error(exc)}
    finally:
        free_memory(device)
    return {**cell, "cell_s": time.perf_counter() - start}


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_case(case, contenders, device, copy_gbps, seed, verbose) -> dict:
    reference = eager_reference(case, device, seed)
    exact = exact_when_asked(case, device, seed)  # (one for the row's contenders)
    results = {}
    for name in contenders:
        results[name] = run_cell(case, name, reference, device, copy_gbps, seed, verbose, exact)
        log(f"  {case.name:32s} {name:16s} {format_cell(results[name], detail=True)}")
    del reference
    free_memory(device)
    return {"name": case.name, "kernel": case.kernel, "shape": list(case.shape),
            "backward": case.backward, "bytes": case.bytes_moved, "results": results}


# ---------------------------------------------------------------------------------------------
def environment(device: torch.device) -> dict:
    info = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "device": device_name(device), "torch": torch.__version__,
            "python": platform.python_version(), "host": platform.node()}
    for module in ("triton", "liger_kernel"):
        try:
            info[module] = __import__(module).__version__
        except Exception:
            info[module] = None
    return info


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()})"


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Time the BENCHMARKS.md kernel suite as a share of device-to-device copy "
                    "bandwidth, for eager, torch.compile, Liger and fuser side by side.")
    p.add_argument("--cases", default="",
                   help="only cases whose name contains this substring (comma = or), "
                        "e.g. 'rmsnorm' or 'bwd[16384x8192],cross'; a whole name of a kernel at "
                        "a shape the suite lacks adds that row, e.g. 'softmax_fwd[4096x50257]'")
    p.add_argument("--contenders", default="",
                   help="comma-separated subset of: " + ", ".join(CONTENDERS)
                        + " (default: all that apply)")
    p.add_argument("--quick", action="store_true",
                   help="tiny shapes (256x512, cross entropy 64x1000): a smoke test")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu only with --quick (a smoke test of the eager path)")
    p.add_argument("--out", default="bench_out", help="folder for .json/.md/.png (bench_out/)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--part", default="",
                   help="K/N: the K-th of N runs of consecutive cases, so that N calls share the "
                        "suite (a device call's time limit); --merge joins their .json files")
    p.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                   help="join the .json files of parts of one lease into one table, .json and "
                        ".png in --out (no device needed); each row keeps its part's copy")
    p.add_argument("--allow-partial", action="store_true",
                   help="with --merge: take a part cut off before its end (its .partial.json), "
                        "the rows it did not reach named as missing")
    p.add_argument("--breakdown", nargs="+", default=[], metavar="JSON",
                   help="print each cell's time beside its kernels' and its host's, kernel by kernel, "
                        "from reports written on a GPU, then exit")
    p.add_argument("--tune-under-flush", action="store_true",
                   help="fuser's autotuner times each launch form as the suite times a call (do_bench, "
                        "L2 flushed before each), not back to back: a probe of forms that differ "
                        "in how they meet a dirty L2")
    p.add_argument("--list", action="store_true", help="list the cases and contenders, then exit")
    p.add_argument("--verbose", action="store_true", help="print tracebacks of failing cells")
    return p.parse_args(argv)


_CASE_NAME = re.compile(r"(\w+)\[(\d+)x(\d+)\]")


def select_cases(quick: bool, pattern: str, part: str = "") -> list[suite.Case]:
    """The suite's cases whose names contain a comma-separated part of `pattern` (all for
    none), then a case for each part that names a kernel at a shape the suite lacks
    (`kernel[MxN]`, off-suite shapes: a model's hidden sizes and vocabularies)."""
    cases = suite.build_suite(quick)
    subs = [s for s in pattern.split(",") if s]
    cases = [c for c in cases if not subs or any(s in c.name for s in subs)]
    for sub in subs:
        named = _CASE_NAME.fullmatch(sub)
        if named and sub not in {c.name for c in cases}:
            kernel, m, n = named.group(1), int(named.group(2)), int(named.group(3))
            if kernel not in suite.ROW_KERNELS + ("cross_entropy_bwd",):
                sys.exit(f"bench: --cases {sub!r}: no kernel {kernel!r}; expected one of "
                         f"{', '.join(suite.ROW_KERNELS + ('cross_entropy_bwd',))}")
            cases.append(suite.make_case(kernel, m, n))
    if part:
        k, n = parse_part(part)
        # (contiguous, as many cases each: a part takes whole shapes, each with every kind)
        cases = cases[(k - 1) * len(cases) // n:k * len(cases) // n]
    return cases


def parse_part(part: str) -> tuple[int, int]:
    found = part_of(part)
    if found is None:
        sys.exit(f"bench: --part {part!r}: expected K/N with 1 <= K <= N, e.g. 1/2")
    return found


def select_contenders(requested: str, device: torch.device) -> list[str]:
    names = [n.strip() for n in requested.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        sys.exit(f"bench: unknown contender(s) {unknown}; choose from {list(CONTENDERS)}")
    if not names:
        names = ["eager"] if device.type == "cpu" else list(CONTENDERS)
    if device.type == "cpu":
        dropped = [n for n in names if n in COMPILE_CONTENDERS or n == "liger"]
        if dropped:
            log(f"bench: skipping {dropped} on the CPU (GPU-only or too slow for a smoke test)")
        names = [n for n in names if n not in dropped]
    if "liger" in names and not liger_available():
        log("bench: liger_kernel is not importable: no liger column")
        names.remove("liger")
    return names


def check_device(args: argparse.Namespace) -> torch.device:
    if args.device == "cpu":
        if not args.quick:
            sys.exit("bench: --device cpu is only a smoke test; run it as "
                     "'scripts/bench --quick --device cpu'. The real benchmark needs a CUDA GPU.")
        torch.set_num_threads(1)  # a smoke test: steadier on a shared machine than a thread pool
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("bench: this benchmark needs a CUDA GPU, and torch.cuda.is_available() is False "
                 f"here (torch {torch.__version__}). For a CPU smoke test of the harness run "
                 "'scripts/bench --quick --device cpu'.")
    try:
        import triton.testing  # noqa: F401
    except ImportError:
        sys.exit("bench: triton is not importable; it is needed for triton.testing.do_bench.")
    return torch.device("cuda", torch.cuda.current_device())


def tune_under_flush() -> None:
    """fuser's autotuner, timing each candidate by do_bench's median (`--tune-under-flush`)."""
    import triton.testing
    from fuser.codegen import autotune

    autotune.cuda_time_ms = lambda launch, device: triton.testing.do_bench(launch, return_mode="median")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.merge:
        return merge_reports(args.merge, args.out, args.allow_partial)
    if args.breakdown:
        for path in args.breakdown:
            found = json.loads(Path(path).read_text())
            print("\n".join(part for part in (breakdown(found), bench_seconds(found)) if part))
        return 0
    if args.list:
        for case in select_cases(args.quick, args.cases, args.part):
            print(f"{case.name:36s} {case.bytes_moved / 1e6:10.1f} MB")
        print("contenders:", ", ".join(CONTENDERS))
        return 0
    device = check_device(args)
    if args.tune_under_flush:
        tune_under_flush()
    cases = select_cases(args.quick, args.cases, args.part)
    if not cases:
        sys.exit(f"bench: no case name contains {args.cases!r}; see --list")
    contenders = select_contenders(args.contenders, device)

    env = environment(device)
    copy = copy_bandwidth(device)
    log(f"bench: {env['device']}, copy {copy['gbps']:.0f} GB/s; {len(cases)} cases x "
        f"{len(contenders)} contenders ({', '.join(contenders)})")
    stem = output_stem(Path(args.out))
    report = {**env, "quick": args.quick, "seed": args.seed, "copy": copy, "part": args.part,
              "contenders": contenders, "planned": [c.name for c in cases]}
    rows = []
    for c in cases:
        rows.append(run_case(c, contenders, device, copy["gbps"], args.seed, args.verbose))
        write_partial(stem, {**report, "cases": rows})

    columns = contenders + (["best peer"] if add_best_peer(rows, contenders) else [])
    means = column_geomeans(rows, columns)
    table = table_with_targets(rows, columns, means)
    title = (f"{env['device']}: copy {copy['gbps']:.0f} GB/s; torch {env['torch']}, "
             f"triton {env['triton']}")
    header = f"{title}; {env['date']}; cells = share of copy bandwidth"
    print(header + "\n\n" + table)

    report = {**report, "columns": columns, "geomean": means, "cases": rows}
    for note in write_outputs(Path(args.out), report, table, header, title, stem):
        log("bench: " + note)
    log(bench_seconds(report))
    stem.with_name(stem.name + ".partial.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

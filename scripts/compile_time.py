"""Compile time: how long the first call of a new fusion takes, cold and with a warm kernel cache.

For each row (a suite kernel written as FusionDefinitions, `fd:<kernel>`, or `fuser.jit` on the
suite's eager function, `jit:<kernel>`) two fresh subprocesses run the first call (forward rows:
one call; backward rows: the forward, then the first gradient):

- cold: empty FUSER_CACHE_DIR and TRITON_CACHE_DIR (temporary), nothing compiled before;
- warm: a new process with the same cache directories, so kernels come from the disk caches.

The first call is split by phase with fuser's phase timer (fuser/timing.py, FUSER_PHASE_TIMES=1;
each phase counts its own time, so the phases add up to the call): definition (building the
FusionDefinitions; for jit rows the lowering of the ATen graphs), passes, segmentation,
planning (the scheduler's accept/refuse calls made by the segmenter), codegen (Triton source),
load (disk cache, module import, triton.jit), compile ahead (Triton compiling the kernels of a
fusion's launches side by side before the first of them, on the GPU), first launch (Triton's
compile of what was not compiled ahead on the GPU; on the CPU the interpreter runs the
kernel), autotune (on the GPU, where a bucket's launch forms are timed the first time it is
seen: compiling every form side by side, with the first part's kernels of a two-part launch
whose second part is timed, then timing them; nothing where the disk remembers the choice), runtime (fuser's remaining work: binding, runtime setup, launch preparation, ATen
segments) and Dynamo+AOT (jit rows: AOTAutograd, and Dynamo's tracing
with whatever else is outside fuser). Imports (torch, fuser, and Triton where fuser does not
import it), Triton's driver module (with the Gluon package its first specialization imports)
and Triton's installation digest (the "Triton key") are paid once per process: they are done
before the first call and reported apart. Targets (issue 6):
cold first call <= 1 s; warm <= 0.1 s per kernel (fuser's time, Dynamo+AOT excluded). After
the first call, "until tuned" is the wait for launch forms compiling in the background
(codegen/tuning.py: `fuser.finish_tuning()`) and the call that times them, then "next call" is
one call more. A row
of two fusions (a backward row's forward and backward) also shows each fusion's first
`FusionExecutorCache.execute` apart: what one new fusion costs, its compiles included, in a process
that ran another first (for jit rows, without Dynamo's and AOTAutograd's tracing and the lowering).

    FUSER_SYSTEM_PYTHON=1 python3 scripts/compile_time.py            # GPU machine
    .venv/bin/python scripts/compile_time.py --device cpu            # CPU, Triton's interpreter
    ... --rows 'fd:rms|jit:softmax' --json out.json --profile fd:layernorm_bwd
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FD_KERNELS = ("rmsnorm_fwd", "layernorm_fwd", "softmax_fwd", "gelu_bias_fwd", "add_rmsnorm_fwd",
              "colsum_fwd", "rmsnorm_bwd", "layernorm_bwd", "softmax_bwd", "gelu_bwd")
JIT_KERNELS = ("rmsnorm_fwd", "add_rmsnorm_fwd", "softmax_bwd", "layernorm_bwd", "rmsnorm_bwd")
DEFAULT_ROWS = tuple(f"fd:{k}" for k in FD_KERNELS) + tuple(f"jit:{k}" for k in JIT_KERNELS)
# the table's phase columns, in pipeline order; "Dynamo+AOT" and "runtime" are filled in below
PHASES = ("definition", "passes", "segmentation", "planning", "codegen", "load", "compile ahead", "first launch",
          "autotune", "runtime", "Dynamo+AOT")
_COMPILING = PHASES.index("autotune") + 1  # the phases up to the (Triton) column: those that may compile kernels
COLD_TARGET_MS, WARM_TARGET_MS = 1000.0, 100.0


# ---------------------------------------------------------------------------------------------
# The child: one row, one first call, in a process of its own
# ---------------------------------------------------------------------------------------------

def _definitions(kernel: str) -> list:
    """The FusionDefinitions a fd row runs (built once each, cached by fuser_defs)."""
    from benchmarks import fuser_defs as d

    built = {"rmsnorm_bwd": [d.rmsnorm_fwd, d.rmsnorm_bwd],
             "layernorm_bwd": [d.layernorm_fwd, d.layernorm_bwd],
             "softmax_bwd": [d.softmax_fwd, d.softmax_dx], "gelu_bwd": [d.gelu_dx]}
    return [make() for make in built[kernel]] if kernel in built else [getattr(d, kernel)()]


def _timed_method(owner, name: str, phase_name: str) -> None:
    """Count `owner.name` as the phase `phase_name` (the script's own hooks: no phase timer on
    fuser's per-call path or in the frontend)."""
    from fuser import timing

    original = getattr(owner, name)

    def timed(*args, **kwargs):
        with timing.phase(phase_name):
            return original(*args, **kwargs)

    setattr(owner, name, timed)


def _time_first_executes(firsts: list) -> None:
    """Append each fusion's first `FusionExecutorCache.execute` (its compiles, first launches
    and autotuning: "the first call of a new fusion") to `firsts`, in ms, in call order. Not in
    it: building the cache (`FusionDefinition.execute` runs the passes first, the "passes" phase,
    well under a millisecond for these rows)."""
    from fuser.runtime import FusionExecutorCache

    original, seen = FusionExecutorCache.execute, set()

    def timed(self, *args, **kwargs):
        if id(self) in seen:
            return original(self, *args, **kwargs)
        seen.add(id(self))
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            firsts.append((time.perf_counter() - start) * 1e3)

    FusionExecutorCache.execute = timed


def _start_backend(device) -> tuple[float, float]:
    """CUDA: Triton's driver module (compiled into the Triton cache when cold), the Gluon
    package that Triton's first argument specialization imports, and Triton's installation
    digest (hashed, or read back from fuser's cache), all once per process; the first call
    then shows what a new fusion costs in a process that has compiled before."""
    import torch

    if device.type != "cuda":
        return 0.0, 0.0
    torch.cuda.synchronize()
    start = time.perf_counter()
    try:
        from triton.runtime import driver

        driver.active.utils  # noqa: B018 - loads the launcher module
        driver.active.get_current_device()
    except Exception:  # an older or newer Triton: its first launch pays instead
        pass
    try:  # Triton 3.6's first argument specialization imports Gluon (0.12 s on the H200 machine)
        import triton.experimental.gluon  # noqa: F401
    except Exception:
        pass
    middle = time.perf_counter()
    try:
        from triton.runtime import cache as triton_cache

        from fuser.codegen import compile as kcompile
        getattr(kcompile, "_keep_triton_key", lambda: None)()
        triton_cache.triton_key()
    except Exception:
        pass
    return middle - start, time.perf_counter() - middle


def _listen_to_triton(compiles: list, stages: dict) -> None:
    """Record each `triton.compile` (time, cache hit) where Triton has a compilation listener,
    and the time of each of its stages summed over the compiles (`stages`, seconds by name:
    "ast" for the front end, then ttir, ttgir, llir, ptx, cubin, "store")."""
    try:
        from triton import knobs

        def listener(**kw):
            try:  # never let a measurement break a compile
                t = kw["times"]
                us = t.ir_initialization + sum(d for _, d in t.lowering_stages) + t.store_results
                compiles.append((us / 1e6, bool(kw.get("cache_hit"))))
                for name, d in [("ast", t.ir_initialization), *t.lowering_stages, ("store", t.store_results)]:
                    stages[name] = stages.get(name, 0.0) + d / 1e6
            except Exception:
                pass

        knobs.compilation.listener = listener
    except Exception:  # a Triton without the hook: the column stays empty
        pass


def _time_launcher_builds(builds: list) -> None:
    """Record each C module Triton builds for a launch (its launchers, one a kernel signature;
    fuser's one launcher), compiled or read from Triton's cache, as (seconds, built): the C
    compiler runs outside `triton.compile`."""
    try:
        from triton.backends.nvidia import driver as nvidia_driver
        from triton.runtime import build
    except Exception:
        return
    original = build.compile_module_from_src

    def timed(src, name, *args, **kwargs):
        before = len(list(_cache_files()))
        start = time.perf_counter()
        module = original(src, name, *args, **kwargs)
        builds.append((time.perf_counter() - start, len(list(_cache_files())) > before))
        return module

    nvidia_driver.compile_module_from_src = timed  # Triton's launchers, one a signature
    build.compile_module_from_src = timed          # fuser's one launcher (codegen/launcher.py)


def _cache_files():
    root = os.environ.get("TRITON_CACHE_DIR")
    return os.scandir(root) if root and os.path.isdir(root) else iter(())


def _import_dynamo() -> float:
    """Seconds to import Dynamo and AOTAutograd, which a process's first fuser.jit call imports
    (0.7 s on the development CPU: more than a small function's tracing and compile)."""
    start = time.perf_counter()
    import torch._dynamo  # noqa: F401
    import torch._functorch.aot_autograd  # noqa: F401
    return time.perf_counter() - start


def _start_dynamo(device) -> float:
    """Dynamo's and AOTAutograd's start in a process (their imports, first tracing, caches),
    paid here through fuser.jit on another function (torch's `aot_eager` backend would also import
    Inductor, which fuser.jit does not), so that a jit row's first call shows what one more
    function costs in a process that has compiled one before (a model with several jit
    functions, a training loop)."""
    import torch

    import fuser

    from unittest import mock

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fuser-warm-dynamo-") as elsewhere, \
            mock.patch.dict(os.environ, {"FUSER_CACHE_DIR": elsewhere}):  # (its kernel is not the row's)
        other = fuser.jit(lambda a, b: torch.relu(a * b).sum(-1))
        other(torch.randn(4, 8, device=device), torch.randn(4, 8, device=device))
    return time.perf_counter() - start


def run_child(row: str, device_name: str, shape: tuple[int, int], profile: bool,
              warm_dynamo: bool = False) -> dict:
    start = time.perf_counter()
    import torch
    after_torch = time.perf_counter()
    import fuser
    after_fuser = time.perf_counter()
    import triton  # noqa: F401 - what fuser's first kernel would import (per process)
    after_triton = time.perf_counter()
    from fuser import timing
    from fuser.codegen import compile as kcompile
    from fuser.frontend import backend
    from fuser.runtime import FusionExecutorCache

    from benchmarks import fuser_defs, harness, suite

    kind, kernel = row.split(":")
    device = torch.device(device_name)
    case = suite.make_case(kernel, *shape)
    args = case.make_inputs(device)
    driver_s, key_s = _start_backend(device)
    compiles: list = []
    stages: dict = {}
    launchers: list = []
    if device.type == "cuda":
        _listen_to_triton(compiles, stages)
        _time_launcher_builds(launchers)
    timing.enable()
    _timed_method(FusionExecutorCache, "execute", "runtime")
    _timed_method(backend.FuserBackend, "__call__", "aot autograd")
    _timed_method(backend, "plan_graph", "definition")
    # a jit row's process imports Dynamo and AOTAutograd before its first call, as any first
    # fuser.jit call does; timed here because the row's context (harness.compile_config, which
    # imports Inductor's config and so Dynamo) would otherwise import them untimed
    dynamo_import_s = _import_dynamo() if kind == "jit" else 0.0
    dynamo_s = _start_dynamo(device) if warm_dynamo and kind == "jit" else 0.0
    fusion_firsts: list = []
    _time_first_executes(fusion_firsts)  # (after the warm-up's, which is not this row's)
    if kind == "jit":
        fn, context = fuser.jit(case.fn), harness.compile_config(False)
    else:
        fn, context = fuser_defs.implementation(kernel), contextlib.nullcontext()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    profiler = None
    if profile:
        import cProfile
        profiler = cProfile.Profile()
    with context:
        timing.reset()
        begin = time.perf_counter()
        if profiler:
            profiler.enable()
        with timing.phase("other"):
            if kind == "fd":
                with timing.phase("definition"):
                    _definitions(kernel)
            runner = suite.make_runner(case, fn, args)
            runner()
            sync()
        if profiler:
            profiler.disable()
        first = time.perf_counter() - begin
        phases = timing.totals()
        firsts = list(fusion_firsts)
        kernels = len(list(kcompile.cache_dir().glob("*.py")))  # this row's cache directory
        triton_compiles = list(compiles)
        triton_stages, launcher_builds = dict(stages), list(launchers)
        from fuser.codegen import compile_pool, launcher
        workers = {k: (dict(v) if isinstance(v, dict) else v) for k, v in compile_pool.STATS.items()}
        launcher_status = launcher.status()
        begin = time.perf_counter()  # the background compiles of launch forms, and the call that times them
        fuser.finish_tuning()
        runner()
        sync()
        tuned = time.perf_counter() - begin
        begin = time.perf_counter()
        runner()
        sync()
        second = time.perf_counter() - begin
    result = {"row": row, "import_torch": after_torch - start, "import_fuser": after_fuser - after_torch,
              "import_triton": after_triton - after_fuser,
              "triton_driver": driver_s, "triton_key": key_s, "dynamo_import": dynamo_import_s,
              "dynamo_start": dynamo_s,
              "first_call": first, "tuned_call": tuned, "second_call": second, "fusion_firsts_ms": firsts,
              "phases": phases, "kernels": kernels,
              "triton": sum(t for t, _ in triton_compiles) if triton_compiles else None,
              "triton_hits": sum(hit for _, hit in triton_compiles),
              "triton_stages": triton_stages,
              "launchers": {"count": len(launcher_builds), "built": sum(b for _, b in launcher_builds),
                            "seconds": sum(t for t, _ in launcher_builds)},
              "workers": workers, "generic_launcher": launcher_status}
    if profiler:
        import io
        import pstats
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(60)
        result["profile"] = out.getvalue()
    return result


# ---------------------------------------------------------------------------------------------
# The parent: fresh processes, the table
# ---------------------------------------------------------------------------------------------

def spawn(row: str, device: str, shape: tuple[int, int], cache: str, profile: bool = False,
          warm_dynamo: bool = False) -> dict:
    env = dict(os.environ, FUSER_CACHE_DIR=os.path.join(cache, "fuser"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), FUSER_PHASE_TIMES="1")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", row, "--device", device,
           "--shape", f"{shape[0]}x{shape[1]}"] + (["--profile", row] if profile else []) \
        + (["--warm-dynamo"] if warm_dynamo else [])
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"row": row, "error": tail[0][:160]}
    return json.loads(lines[-1])


def summarize(result: dict) -> dict:
    """Phase columns in ms: "runtime" is fuser's work outside the named phases; for jit rows
    the time outside fuser (the "other" phase) and AOTAutograd make "Dynamo+AOT"."""
    if "error" in result:
        return result
    p = {k: v * 1e3 for k, v in result["phases"].items()}
    ms = {k: p.get(k, 0.0) for k in PHASES[:-2]}
    ms["runtime"] = p.get("runtime", 0.0)
    outside = p.get("other", 0.0) + p.get("aot autograd", 0.0)
    if result["row"].startswith("jit:"):
        ms["Dynamo+AOT"] = outside
    else:
        ms["runtime"] += outside  # autograd.Function glue around fuser's calls
        ms["Dynamo+AOT"] = 0.0
    first = result["first_call"] * 1e3
    fuser_ms = first - ms["Dynamo+AOT"]
    kernels = result["kernels"]
    return dict(result, ms=ms, first_ms=first, fuser_ms=fuser_ms,
                per_kernel_ms=fuser_ms / kernels if kernels else None)


def fmt(v, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def table(rows: list[tuple[str, dict, dict]]) -> str:
    head = ["row", "run", "kernels", "first call", "each fusion's first execute", *PHASES[:_COMPILING], "(Triton)",
            *PHASES[_COMPILING:], "fuser/kernel", "until tuned", "next call"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row, cold, warm in rows:
        for run, r in (("cold", cold), ("warm", warm)):
            if "error" in r:
                lines.append(f"| {row} | {run} | error: {r['error']} |")
                continue
            target = COLD_TARGET_MS if run == "cold" else None
            first = fmt(r["first_ms"]) + (" !" if target and r["first_ms"] > target else "")
            per = r["per_kernel_ms"]
            per_s = fmt(per, 1) + (" !" if run == "warm" and per and per > WARM_TARGET_MS else "")
            kernels = str(r["kernels"]) + (f" ({r['triton_hits']} hit)" if r.get("triton_hits") else "")
            triton = None if r.get("triton") is None else r["triton"] * 1e3
            each = " / ".join(fmt(ms) + (" !" if target and ms > target else "") for ms in r.get("fusion_firsts_ms", []))
            cells = ([row, run, kernels, first, each or "-"] + [fmt(r["ms"][k], 1) for k in PHASES[:_COMPILING]]
                     + [fmt(triton, 1)] + [fmt(r["ms"][k], 1) for k in PHASES[_COMPILING:]])
            tuned = r.get("tuned_call")
            lines.append("| " + " | ".join(cells + [per_s, fmt(None if tuned is None else tuned * 1e3, 1),
                                                    fmt(r["second_call"] * 1e3, 1)]) + " |")
    return "\n".join(lines)


def stage_table(rows: list[tuple[str, dict, dict]]) -> str:
    """Where the cold runs' Triton time went: each compile stage summed over the compiles (and
    over the threads that compile side by side), and the launcher modules built by the C
    compiler (count built of count asked, seconds)."""
    names: list[str] = []
    for _, cold, _ in rows:
        names += [n for n in cold.get("triton_stages", {}) if n not in names]
    head = ["row (cold)", *names, "launchers built / asked", "launcher s", "worker compiles (missed, failed)",
            "worker ms", "worker start ms", "kept while starting"]
    lines = ["Triton's compile by stage in this process, summed over compiles (ms); the compile workers' "
             "(codegen/compile_pool.py) apart\n", "| " + " | ".join(head) + " |",
             "|" + " --- |" * len(head)]
    statuses = sorted({cold.get("generic_launcher", "-") for _, cold, _ in rows if "error" not in cold})
    lines.insert(1, f"(fuser's generic launcher, codegen/launcher.py: {', '.join(statuses)})\n")
    for row, cold, _ in rows:
        if "error" in cold:
            continue
        st, ln = cold.get("triton_stages", {}), cold.get("launchers", {})
        cells = [row] + [fmt(st.get(n, 0.0) * 1e3, 1) for n in names]
        cells += [f"{ln.get('built', 0)} / {ln.get('count', 0)}", fmt(ln.get("seconds", 0.0) * 1e3, 1)]
        wk = cold.get("workers", {})
        cells += [f"{wk.get('compiled', 0)} ({wk.get('missed', 0)}, {wk.get('failed', 0)})",
                  fmt(wk.get("seconds", 0.0) * 1e3, 1),
                  fmt(wk.get("start_s", 0.0) * 1e3), str(wk.get("in_process", 0))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def header(results: list[tuple[str, dict, dict]]) -> str:
    def per_process(key: str, column: int) -> str:
        rows = [r for r in results if "error" not in r[column]]
        if key.startswith("dynamo"):  # (jit rows' alone)
            rows = [r for r in rows if r[0].startswith("jit:")]
        return fmt(median([r[column][key] * 1e3 for r in rows]))

    items = [("import torch", "import_torch"), ("import fuser after torch", "import_fuser"),
             ("import triton after fuser", "import_triton"), ("Triton driver and Gluon", "triton_driver"),
             ("Triton key", "triton_key"), ("import Dynamo and AOTAutograd (jit rows)", "dynamo_import"),
             ("Dynamo and AOTAutograd start (--warm-dynamo)", "dynamo_start")]
    costs = ", ".join(f"{label} {per_process(key, 1)} / {per_process(key, 2)}" for label, key in items)
    return (f"Per process, median of the cold / warm runs: {costs} (the Triton ones before the first "
            f"call). '!' marks a miss of the targets: cold first call <= {COLD_TARGET_MS:.0f} ms, warm "
            f"<= {WARM_TARGET_MS:.0f} ms of fuser time (first call less Dynamo+AOT) per kernel. "
            "(Triton): the part of compile ahead, first launch and autotune spent in triton.compile, cache hits included "
            "(summed over the threads that compile side by side).")


def median_run(runs: list[dict]) -> dict:
    """The run whose first call is the median (an error if any run failed)."""
    failed = [r for r in runs if "error" in r]
    return failed[0] if failed else sorted(runs, key=lambda r: r["first_ms"])[len(runs) // 2]


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else 0.0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    p.add_argument("--rows", default="", help="regex selecting rows, e.g. 'fd:rms|jit:'")
    p.add_argument("--shape", default=None, help="MxN (default 16384x4096 on cuda, 16x128 on cpu)")
    p.add_argument("--repeat", type=int, default=1, help="cold/warm pairs per row; the median is shown")
    p.add_argument("--json", default=None, help="write every figure to this file")
    p.add_argument("--profile", default=None, metavar="ROW",
                   help="also cProfile ROW's cold and warm first calls and print the top functions")
    p.add_argument("--warm-dynamo", action="store_true",
                   help="jit rows: start Dynamo and AOTAutograd on another function first (reported apart)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    device = args.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    shape = tuple(int(s) for s in (args.shape or ("16384x4096" if device == "cuda" else "16x128")).split("x"))
    if args.child:
        print(json.dumps(run_child(args.child, device, shape, bool(args.profile), args.warm_dynamo)))
        return 0
    rows = [r for r in DEFAULT_ROWS if re.search(args.rows, r)]
    results = []
    for row in rows:
        colds, warms = [], []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="fuser-compile-time-") as cache:
                colds.append(summarize(spawn(row, device, shape, cache, warm_dynamo=args.warm_dynamo)))
                warms.append(summarize(spawn(row, device, shape, cache, warm_dynamo=args.warm_dynamo)))
        cold, warm = median_run(colds), median_run(warms)
        results.append((row, cold, warm))
        print(f"{row}: cold {fmt(cold.get('first_ms'))} ms, warm {fmt(warm.get('first_ms'))} ms",
              file=sys.stderr, flush=True)
    print(f"# Compile time, {device}, shape {shape[0]}x{shape[1]} (ms)\n\n{header(results)}\n")
    print(table(results))
    print("\n" + stage_table(results))
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="fuser-compile-time-") as cache:
            for run in ("cold", "warm"):  # the warm one reads what the cold one compiled
                prof = spawn(args.profile, device, shape, cache, profile=True)
                print(f"\n## cProfile of {args.profile}, {run} first call\n\n```\n{prof.get('profile', prof)}\n```")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "shape": shape,
                       "rows": [{"row": r, "cold": c, "warm": w} for r, c, w in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

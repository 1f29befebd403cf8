"""Forms of the shared-row kernel (fuser/codegen/shared_row.py) for the norm backward rows at
4096x32768, beside the two-kernel form, as fuser.jit captures them (the forward's statistics
given): which inputs are staged in shared memory, and whether a column sum's accumulator lives
in registers or in shared memory (not part of the suite).

LayerNorm's backward has two column sums (dw, db): with x and dy staged, their register
accumulators would need 128 of a thread's 128 registers at 16 warps, so fuser keeps two
kernels. The forms here stage dy alone (x read twice, the second time from L2) and keep one of
the sums in shared memory, or stage both with both sums in registers on 32 warps.

    .venv/bin/python benchmarks/sweep_shared_row.py --compile    # no GPU: sm_90 resource usage
    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_shared_row.py [--only=KIND,...]  # H100 / H200
    python3 benchmarks/sweep_shared_row.py --run-only=KIND    # fuser's own form, 3 calls (for ncu)

Each GPU row is checked against a float64 reference before it is timed (fd.execute, median of
triton.testing.do_bench), as a share of the copy measured in the same run (x and dy read once,
dx written once).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from typing import Optional

import torch

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from fuser import DataType, FusionDefinition  # noqa: E402
from fuser.codegen import launch  # noqa: E402
from fuser.codegen.layout import Layout  # noqa: E402
from fuser.codegen.shared_row import SharedRowConfig, generate_shared_row  # noqa: E402
from fuser.ir import TensorView  # noqa: E402

F32, BF16 = DataType.Float, DataType.BFloat16
ROWS, COLS = 4096, 32768
EXTRA_OPTIONS: dict = {}  # more Triton options for compile_for_sm90 (a probe's)


def rmsnorm_bwd_given_rstd() -> FusionDefinition:
    """The RMSNorm backward as fuser.jit captures it: rstd saved by the forward, one row sum."""
    with FusionDefinition() as fd:
        x, w, dy = (fd.define_tensor(shape=shape, contiguity=True, dtype=BF16) for shape in ([-1, -1], [-1], [-1, -1]))
        rstd = fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=F32)
        n = x.shape()[1]
        dyf = fd.ops.cast(dy, F32)
        xhat, g = fd.ops.mul(fd.ops.cast(x, F32), rstd), fd.ops.mul(dyf, fd.ops.cast(w, F32))
        proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), [-1], True), n)
        fd.add_output(fd.ops.cast(fd.ops.mul(rstd, fd.ops.sub(g, fd.ops.mul(xhat, proj))), BF16))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(dyf, xhat), [0]), BF16))
    return fd


def layernorm_bwd_given_stats(with_db: bool = True) -> FusionDefinition:
    """The LayerNorm backward with mean and rstd saved by the forward: two row sums, dw and db
    (without db: one column sum, as RMSNorm's; db apart, below)."""
    with FusionDefinition() as fd:
        x, w, dy = (fd.define_tensor(shape=shape, contiguity=True, dtype=BF16) for shape in ([-1, -1], [-1], [-1, -1]))
        mean, rstd = (fd.define_tensor(shape=[-1, 1], contiguity=True, dtype=F32) for _ in range(2))
        n = x.shape()[1]
        dyf = fd.ops.cast(dy, F32)
        xhat = fd.ops.mul(fd.ops.sub(fd.ops.cast(x, F32), mean), rstd)
        g = fd.ops.mul(dyf, fd.ops.cast(w, F32))
        mg = fd.ops.div(fd.ops.sum(g, [-1], True), n)
        proj = fd.ops.div(fd.ops.sum(fd.ops.mul(g, xhat), [-1], True), n)
        fd.add_output(fd.ops.cast(fd.ops.mul(rstd, fd.ops.sub(fd.ops.sub(g, mg), fd.ops.mul(xhat, proj))), BF16))
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.mul(dyf, xhat), [0]), BF16))
        if with_db:
            fd.add_output(fd.ops.cast(fd.ops.sum(dyf, [0]), BF16))
    return fd


def column_sum_of_dy() -> FusionDefinition:
    """db = sum over rows of dy: a split column sum reading dy once more."""
    with FusionDefinition() as fd:
        dy = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=BF16)
        fd.add_output(fd.ops.cast(fd.ops.sum(fd.ops.cast(dy, F32), [0]), BF16))
    return fd


def make_inputs(kind: str, rows: int, cols: int, device: str) -> list[torch.Tensor]:
    x, dy = (torch.randn(rows, cols, device=device, dtype=torch.bfloat16) for _ in range(2))
    w = torch.randn(cols, device=device, dtype=torch.bfloat16)
    xf = x.float()
    if kind == "rmsnorm":
        return [x, w, dy, torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)]
    var, mean = torch.var_mean(xf, -1, correction=0, keepdim=True)
    return [x, w, dy, mean, torch.rsqrt(var + 1e-5)]


def reference(kind: str, args: list[torch.Tensor]) -> list[torch.Tensor]:
    x, w, dy = (a.double() for a in args[:3])
    if kind == "rmsnorm":
        rstd = args[3].double()
        xhat, g = x * rstd, dy * w
        return [rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True)), (dy * xhat).sum(0)]
    mean, rstd = args[3].double(), args[4].double()
    xhat, g = (x - mean) * rstd, dy * w
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return [dx, (dy * xhat).sum(0), dy.sum(0)]


DEFINITIONS = {"rmsnorm": rmsnorm_bwd_given_rstd, "layernorm": layernorm_bwd_given_stats,
               "layernorm_db_apart": lambda: layernorm_bwd_given_stats(with_db=False)}
# a kind timed with a second definition after it: (its definition, its inputs from the kind's);
# db apart reads dy twice (4 reads and writes of a row's size against 5 for two kernels): the
# shared-row kernel for dx and dw fits as RMSNorm's does
SECOND = {"layernorm_db_apart": (column_sum_of_dy, lambda args: [args[2]])}
# (kernel, label, staged inputs by name, column sums in shared memory by position, per thread,
# warps[, the first chunks held twice[, chunks a wait or round of copies[, each row split over a
# pair of programs]]]); fuser runs the plain schedule (none ahead, 1 chunk a barrier) unless
# heuristics.SHARED_ROW_SCHEDULES names more, and splits rows over pairs only where one
# program's column sums do not fit (the LayerNorm backward: codegen/shared_row_pair.py)
FORMS = [
    ("rmsnorm", "x, w, dy staged, 4 chunks ahead", ("x", "w", "dy"), (), 4, 16, 4),
    ("rmsnorm", "x, w, dy staged, none ahead (run 21's form)", ("x", "w", "dy"), (), 4, 16, 0),
    ("rmsnorm", "x, w, dy staged, 32 warps, 4 a thread", ("x", "w", "dy"), (), 4, 32),
    ("rmsnorm", "x, w, dy staged, 32 warps, 2 a thread", ("x", "w", "dy"), (), 2, 32),
    ("rmsnorm", "x, w, dy staged, 32 warps, 4 a thread, 2 ahead", ("x", "w", "dy"), (), 4, 32, 2),
    ("rmsnorm", "x, w, dy staged, 32 warps, 8 a thread", ("x", "w", "dy"), (), 8, 32),
    ("rmsnorm", "x, w, dy staged, none ahead, 2 chunks a barrier", ("x", "w", "dy"), (), 4, 16, 0, 2),
    ("rmsnorm", "x, w, dy staged, 4 chunks ahead, 2 chunks a barrier", ("x", "w", "dy"), (), 4, 16, 4, 2),
    ("rmsnorm", "x, w, dy staged, none ahead, 4 chunks a barrier", ("x", "w", "dy"), (), 4, 16, 0, 4),
    ("rmsnorm", "x, dy staged, w from L2", ("x", "dy"), (), 4, 16),
    ("layernorm", "x, w, dy staged, dw and db in registers, 32 warps", ("x", "w", "dy"), (), 2, 32),
    ("layernorm", "dy staged, db in shared memory", ("dy",), (1,), 4, 16),
    ("layernorm", "dy staged, dw in shared memory", ("dy",), (0,), 4, 16),
    ("layernorm", "x staged, db in shared memory", ("x",), (1,), 4, 16),
    ("layernorm", "dy staged, db in shared memory, 32 warps", ("dy",), (1,), 2, 32),
    ("layernorm", "dy staged, db in shared memory, 8 warps", ("dy",), (1,), 8, 8),
    ("layernorm_db_apart", "x, w, dy staged, db by a column sum of dy", ("x", "w", "dy"), (), 4, 16),
    ("layernorm_db_apart", "the same, 4 chunks ahead", ("x", "w", "dy"), (), 4, 16, 4),
    ("layernorm_db_apart", "the same, 2 chunks a barrier", ("x", "w", "dy"), (), 4, 16, 0, 2),
    ("layernorm", "each row over a pair of programs, 8 a thread (fuser's)", ("x", "w", "dy"), (), 8, 16, 0, 1, True),
    ("layernorm", "each row over a pair of programs, 4 a thread", ("x", "w", "dy"), (), 4, 16, 0, 1, True),
    ("layernorm", "each row over a pair of programs, 32 warps, 4 a thread", ("x", "w", "dy"), (), 4, 32, 0, 1, True),
    ("layernorm", "each row over a pair of programs, 32 warps, 2 a thread", ("x", "w", "dy"), (), 2, 32, 0, 1, True),
    ("rmsnorm", "each row over a pair of programs, 8 a thread", ("x", "w", "dy"), (), 8, 16, 0, 1, True),
    ("rmsnorm", "each row over a pair of programs, 4 a thread", ("x", "w", "dy"), (), 4, 16, 0, 1, True),
]
INPUT_NAMES = ("x", "w", "dy", "stat0", "stat1")


def plan_of(kind: str):
    """The inner-outer plan of a definition, planned on small CPU tensors, and the positions of
    its tensor inputs by name (the plan orders them by first use)."""
    fd = DEFINITIONS[kind]()
    fd.execute(make_inputs(kind, 8, 2048, "cpu"))
    (launcher,) = [k for k in fd.cache.last_runtime.launchers.values() if k.plan.parts is not None]
    inputs = fd.fusion.inputs() if callable(getattr(fd.fusion, "inputs", None)) else fd.fusion.inputs
    names = {id(v): INPUT_NAMES[k] for k, v in enumerate(inputs)}
    tensors = [v for v in launcher.plan.inputs if isinstance(v, TensorView)]
    return launcher.plan, {names[id(v)]: k for k, v in enumerate(tensors) if id(v) in names}


def config_for(kind: str, staged: tuple, in_shared: tuple, per_thread: int, warps: int, ahead: int = 0,
               batch: int = 1, pair: bool = False, cols: int = COLS):
    plan, position = plan_of(kind)
    chunks = -(-(cols // 2 if pair else cols) // (per_thread * 32 * warps))
    return plan, SharedRowConfig(per_thread, warps, chunks, tuple(sorted(position[n] for n in staged)), in_shared,
                                 ahead, batch, pair)


NO_CUOBJDUMP = "(this Triton ships no cuobjdump)"


def compile_for_sm90(ks, config: SharedRowConfig, int64: bool = False, sass: Optional[list] = None,
                    compiled_kernels: Optional[list] = None) -> tuple[int, str]:
    """(shared memory bytes, cuobjdump's resource line) of a generated shared-row kernel compiled
    for sm_90 as the launch specializes it (16-byte aligned pointers and strides, unit column
    strides; 64-bit offsets with `int64`), without a GPU; `sass`: a list to append the
    kernel's disassembly to (where this Triton ships cuobjdump); `compiled_kernels`: a list to
    append Triton's compiled kernel to."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from fuser.codegen.compile import load_canonical
    from fuser.codegen.steps import compile_options

    _, fn = load_canonical(ks.name, ks.source, "cuda", ks.scalar_params)
    constexprs = dict(BLOCK0=1, BLOCK1=config.block1, INT64=int(int64), SPT=config.per_thread, WARPS=config.warps,
                      EVEN0=1, EVEN1=1)
    signature, attrs = {}, {}
    for k, (name, spec) in enumerate(zip(fn.arg_names, ks.args)):
        if spec.kind in ("tensor", "workspace"):
            signature[name] = {"tl.float32": "*fp32"}.get(_storage(spec), "*bf16")
            attrs[(k,)] = [["tt.divisibility", 16]]
        elif spec.kind == "scalar":
            signature[name] = "fp32"
        elif spec.kind == "semaphore":  # (the pair form's exchanged words)
            signature[name] = "*i32"
            attrs[(k,)] = [["tt.divisibility", 16]]
        elif name.endswith("stride1"):
            constexprs[name] = 1  # (Triton specializes an int equal to 1)
        elif name not in constexprs:
            signature[name] = "i32"
            if name != "X0":  # (the rows need not be a multiple of 16)
                attrs[(k,)] = [["tt.divisibility", 16]]
    # (in the order of the parameters: Triton reads the signature by position)
    signature = {name: signature.get(name, "constexpr") for name in fn.arg_names}
    source = GluonASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": config.warps, **compile_options(), **EXTRA_OPTIONS})
    if compiled_kernels is not None:
        compiled_kernels.append(compiled)
    cubin = os.path.join(tempfile.mkdtemp(), "k.cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return compiled.metadata.shared, NO_CUOBJDUMP
    if sass is not None:
        sass.append(subprocess.run([tool, "-sass", cubin], capture_output=True, text=True).stdout)
    done = subprocess.run([tool, "--dump-resource-usage", cubin], capture_output=True, text=True)
    found = re.search(r"REG:\d+ STACK:\d+", done.stdout)
    if done.returncode or found is None:
        raise RuntimeError(f"cuobjdump gave no resource usage: {done.stderr or done.stdout}")
    return compiled.metadata.shared, found.group(0)


def main_loop(sass: str) -> list[str]:
    """The instructions of a disassembled kernel's main loop: those between the target of its
    longest backward branch and the branch."""
    lines = [line for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    at = [int(re.search(r"/\*([0-9a-f]{4})\*/", line).group(1), 16) for line in lines]
    spans = [(int(m.group(1), 16), a) for line, a in zip(lines, at)
             if (m := re.search(r"BRA (?:U?P\d, )?0x([0-9a-f]+)", line)) and int(m.group(1), 16) < a]
    lo, hi = max(spans, key=lambda span: span[1] - span[0])
    return [line for line, a in zip(lines, at) if lo <= a <= hi]


def _storage(spec) -> str:
    from fuser.codegen.types import STORAGE

    return "tl.float32" if spec.kind == "workspace" else STORAGE[spec.val.dtype]


def generate(kind: str, staged, in_shared, per_thread, warps, ahead=0, batch=1, pair=False):
    plan, cfg = config_for(kind, staged, in_shared, per_thread, warps, ahead, batch, pair)
    return generate_shared_row(plan, Layout(((0,),), ((1,),)), f"fuser_{kind}_probe", cfg), cfg


def time_form(kind: str, config: Optional[SharedRowConfig], args, copy: float) -> str:
    """Run the definition with the launch's shared-row form fixed to `config` (None: two
    kernels), check it, time it."""
    import triton

    real = launch.shared_row_config
    launch.shared_row_config = lambda *a, **k: config  # noqa: E731 (a probe fixes the gate's choice)
    try:
        fd = DEFINITIONS[kind]()
        second, second_args = SECOND.get(kind, (FusionDefinition, None))
        second = second() if second_args else None

        def run() -> list:
            return fd.execute(args) + (second.execute(second_args(args)) if second else [])
        outs = run()
        torch.cuda.synchronize()
        code = fd.last_triton_code()
        if ("row in shared memory" in code or "two Gluon programs a row" in code) != (config is not None):
            return "not run: the launch took another form (a declined kernel?)"
        errors = [((o.double() - r).abs().max() / r.abs().max().clamp_min(1e-6)).item()
                  for o, r in zip(outs, reference(kind, args), strict=True)]
        ms = triton.testing.do_bench(run, return_mode="median")
    finally:
        launch.shared_row_config = real
    share = 3 * args[0].nbytes / ms / 1e6 / copy
    verdict = "ok" if max(errors) < 2e-2 else f"BAD (relative errors {[round(e, 4) for e in errors]})"
    return f"{ms * 1e3:8.1f} us {share:5.2f}  {verdict}"


def run_only(kind: str) -> None:
    """Three calls of the definition with the form fuser chooses, nothing timed: a target for a
    profiler (gpu_check's `ncu` stage profiles the third call's shared-row kernel). The first
    call compiles every form it runs: with background compiles the first calls would run the
    two-kernel form while the Gluon kernel compiles, and the profiler find no shared-row kernel
    (forty-fifth session)."""
    os.environ["FUSER_BACKGROUND_COMPILE"] = "0"
    args = make_inputs(kind, ROWS, COLS, "cuda")
    fd = DEFINITIONS[kind]()
    for _ in range(3):
        fd.execute(args)
    torch.cuda.synchronize()


def main(compile_only: bool, kinds: list[str]) -> None:
    if compile_only:
        for kind, label, *form in FORMS:
            ks, cfg = generate(kind, *form)
            if ks is None:
                print(f"{kind:9s} {label:52s} declined (names what Gluon lacks)")
                continue
            shared, usage = compile_for_sm90(ks, cfg)
            print(f"{kind:9s} {label:52s} shared {shared // 1024} KB, {usage}", flush=True)
        return
    import triton

    from benchmarks.sweep_pointwise import copy_gbps

    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for kind in kinds:
        args = make_inputs(kind, ROWS, COLS, "cuda")
        print(f"{kind:9s} {'two kernels':52s} {time_form(kind, None, args, copy)}", flush=True)
        for form_kind, label, *form in FORMS:
            if form_kind != kind:
                continue
            _, cfg = config_for(kind, *form)
            try:
                print(f"{kind:9s} {label:52s} {time_form(kind, cfg, args, copy)}", flush=True)
            except Exception as e:  # noqa: BLE001 (a form that does not compile is a row, not a stop)
                print(f"{kind:9s} {label:52s} error: {type(e).__name__}: {str(e).strip().splitlines()[0][:100]}")


if __name__ == "__main__":
    if "--compile" not in sys.argv and not torch.cuda.is_available():
        sys.exit("sweep_shared_row.py needs a CUDA GPU (or --compile, which compiles only)")
    target = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--run-only=")), "")
    if target:
        run_only(target)
        sys.exit(0)
    only = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), "")
    main("--compile" in sys.argv, only.split(",") if only else list(DEFINITIONS))

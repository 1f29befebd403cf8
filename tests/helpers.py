"""Helpers for comparing fusions against eager PyTorch.

Inputs are fresh random tensors (never zeros); tolerances depend on the dtype; every comparison
checks dtype and shape before values.
"""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Optional, Sequence

import pytest
import torch

from fuser import DataType, FusionDefinition

TORCH_TO_DT = {
    torch.float64: DataType.Double, torch.float32: DataType.Float, torch.float16: DataType.Half,
    torch.bfloat16: DataType.BFloat16, torch.int64: DataType.Int, torch.int32: DataType.Int32,
    torch.bool: DataType.Bool,
}

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ALL_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool)

# (rtol, atol) per dtype: fp32 ~1e-5, bf16 ~1e-2 relative
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}


def dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def make(shape: Sequence[int], dtype: torch.dtype = torch.float32, *, nonzero: bool = False,
         positive: bool = False) -> torch.Tensor:
    """A fresh random tensor: randn for floats, randint for integers, random bits for bool."""
    shape = tuple(shape)
    if dtype.is_floating_point:
        t = torch.randn(shape, dtype=torch.float32)
        if positive:
            t = t.abs() + 0.1
        elif nonzero:
            t = torch.where(t.abs() < 0.1, torch.full_like(t, 0.5), t)
        return t.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape).bool() if not nonzero else torch.ones(shape, dtype=torch.bool)
    low = 1 if positive else -7
    t = torch.randint(low, 8, shape, dtype=torch.int64)
    if nonzero or positive:
        t = torch.where(t == 0, torch.full_like(t, 3), t)
    return t.to(dtype)


def covering(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A random tensor that contains every integer in [-7, 7] (ints) or both truth values (bool),
    for tests whose outcome must not depend on which values the draw happened to contain."""
    n = 1
    for s in shape:
        n *= s
    assert n >= 15
    base = torch.cat([torch.arange(-7, 8), torch.randint(-7, 8, (n - 15,))])
    t = base[torch.randperm(n)].reshape(shape)
    if dtype == torch.bool:
        return (t % 2 == 0)
    return t.to(dtype)


def define(fd: FusionDefinition, t: torch.Tensor, *, stride_order=None, contiguity=True,
           static: bool = False, size1_broadcast: bool = True):
    """Declare a tensor input like `t`: -1 for each dim, 1 for size-1 dims (nvFuser's broadcast;
    with size1_broadcast=False they are symbolic -1 too), or the sizes themselves if static."""
    shape = [s if (static or (s == 1 and size1_broadcast)) else -1 for s in t.shape]
    return fd.define_tensor(shape=shape, contiguity=contiguity, dtype=TORCH_TO_DT[t.dtype],
                            stride_order=stride_order)


# "aten": every op through the ATen evaluator (the reference, invariant 5);
# "kernel": the default path, generated Triton kernels (through the interpreter on CPU).
BACKENDS = ("aten", "kernel")


@contextlib.contextmanager
def backend_env(backend: Optional[str]):
    """Select the CPU execution path for runtimes created inside the block."""
    if backend is None:
        yield
        return
    assert backend in BACKENDS, backend
    old = os.environ.get("FUSER_CPU_KERNELS")
    os.environ["FUSER_CPU_KERNELS"] = "aten" if backend == "aten" else "interpreter"
    try:
        yield
    finally:
        if old is None:
            del os.environ["FUSER_CPU_KERNELS"]
        else:
            os.environ["FUSER_CPU_KERNELS"] = old


def cases(params, known_bug: Optional[Callable[..., Optional[str]]] = None, backends=BACKENDS,
          every_xfail: bool = False):
    """Cross parameter tuples with the backends (backend last). `known_bug(*values, backend)`
    returns a reason for the combinations that expose a known fuser bug: they become strict
    xfails, so fixing the bug turns them into failures that ask for the marker's removal.
    Unless every_xfail, only the first combination per (reason, backend) is kept: the others
    would fail the same way, and a failing interpreted kernel is slow to report."""
    out, seen = [], set()
    for p in params:
        values, marks, pid = (p.values, p.marks, p.id) if hasattr(p, "values") else (tuple(p), (), None)
        for b in backends:
            reason = known_bug(*values, b) if known_bug else None
            if reason and not every_xfail:
                if (reason, b) in seen:
                    continue
                seen.add((reason, b))
            m = list(marks) + ([pytest.mark.xfail(strict=True, reason=reason)] if reason else [])
            out.append(pytest.param(*values, b, marks=m, id=None if pid is None else f"{pid}-{b}"))
    return out


def run(build: Callable, inputs: Sequence, *, decl: Optional[Sequence[dict]] = None,
        backend: Optional[str] = None):
    """Define a fusion whose inputs are declared like `inputs` and whose outputs are what `build`
    returns (one value or a list), execute it (on `backend`), and return (fd, outputs)."""
    with FusionDefinition() as fd:
        vals = []
        for k, t in enumerate(inputs):
            kw = dict(decl[k]) if decl is not None and decl[k] is not None else {}
            if isinstance(t, torch.Tensor):
                vals.append(define(fd, t, **kw))
            else:
                vals.append(fd.define_scalar(dtype=kw.get("dtype")))
        outs = build(fd, *vals)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        for o in outs:
            fd.add_output(o)
    with backend_env(backend):
        return fd, fd.execute(list(inputs))


def explained_plans(report, kind: Optional[str] = None) -> list[str]:
    """The "# Plan" line of every kernel a `fuser.explain` report generated, in order; `kind`:
    only the programs of that kind ("forward", "backward", "inference")."""
    return [line for g in report.graphs for p in g.programs if kind is None or p.kind == kind
            for f in p.fusions for code in f.triton for line in code.splitlines() if line.startswith("# Plan")]


def assert_eager(actual: torch.Tensor, expected: torch.Tensor, *, rtol=None, atol=None) -> None:
    """dtype and shape exactly as eager; values within the dtype's tolerance (NaNs equal)."""
    assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual).__name__}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype}, eager gives {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)}, eager gives {tuple(expected.shape)}"
    assert actual.device == expected.device
    if expected.dtype.is_floating_point:
        r, a = TOLERANCES[expected.dtype]
        torch.testing.assert_close(actual, expected, rtol=rtol if rtol is not None else r,
                                   atol=atol if atol is not None else a, equal_nan=True)
    else:
        assert torch.equal(actual, expected), f"values differ:\n{actual}\nvs eager\n{expected}"


def run_and_check(build: Callable, reference: Callable, inputs: Sequence, *, decl=None, rtol=None,
                  atol=None, backend: Optional[str] = None):
    """Execute the fusion and compare each output with `reference(*inputs)` (one or a list)."""
    fd, outs = run(build, inputs, decl=decl, backend=backend)
    expected = reference(*inputs)
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        assert_eager(o, e, rtol=rtol, atol=atol)
    return fd, outs


def row_reduction_forwards(rows: int, cols: int) -> list[tuple[Callable, list, torch.Tensor]]:
    """The suite's softmax, layernorm and rmsnorm forward definitions (their builders, uncached)
    on fresh bf16 inputs of [rows, cols], each with eager's fp32 result: (build, args, want)."""
    import torch.nn.functional as F

    from benchmarks import fuser_defs

    x = torch.randn(rows, cols, dtype=torch.bfloat16)
    w, b = (torch.randn(cols, dtype=torch.bfloat16) for _ in range(2))
    xf = x.float()
    rms = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + fuser_defs.RMS_EPS) * w.float()
    return [
        (fuser_defs.softmax_fwd.__wrapped__, [x], torch.softmax(xf, -1)),
        (fuser_defs.layernorm_fwd.__wrapped__, [x, w, b],
         F.layer_norm(xf, (cols,), w.float(), b.float(), eps=fuser_defs.LN_EPS)),
        (fuser_defs.rmsnorm_fwd.__wrapped__, [x, w], rms),
    ]


def sm90_ptx(source: str, constexprs: dict, pointer_types: dict, tmp_path, num_warps: int = 16,
             divisible: tuple = ()) -> str:
    """PTX of a generated kernel compiled for an H100/H200 (sm_90), which needs no GPU: what the
    interpreter cannot show, whether loads and stores are 16-byte vectors."""
    import importlib.util
    import inspect

    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name = next(line.split("(")[0][4:] for line in source.splitlines() if line.startswith("def fuser_"))
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = triton.jit(getattr(module, name))
    params = list(inspect.signature(kernel.fn).parameters)
    signature = {p: "constexpr" if p in constexprs else pointer_types.get(p, "i32") for p in params}
    attrs = {(k,): [["tt.divisibility", 16]] for k, p in enumerate(params) if p in pointer_types or p in divisible}
    try:
        src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    except TypeError as err:  # (another Triton's ASTSource)
        pytest.skip(f"this Triton's ASTSource takes other arguments: {err}")
    try:
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["ptx"]
    except RuntimeError as err:  # (no ptxas in this Triton)
        if "ptxas" in str(err):
            pytest.skip(str(err))
        raise


def prefer_the_last_form_timed(monkeypatch, tmp_path):
    """Autotune on the interpreter too (a choices file of the test's own), each form timed
    faster than the one before: the last candidate wins. Returns the choices file."""
    from fuser.codegen import autotune, launch

    monkeypatch.setattr(launch, "TUNED_TARGETS", ("interpreter",))
    monkeypatch.setattr(autotune, "CHOICES", autotune.Choices(tmp_path / "autotune.json"))
    times = []

    def timer(launch_once, device):
        launch_once()
        times.append(None)
        return 10.0 - len(times)
    monkeypatch.setattr(autotune, "cuda_time_ms", timer)
    return tmp_path / "autotune.json"


class OptimizerTwins:
    """A jitted optimizer step (`make_optimizer` over parameters of `shapes`) beside the same
    optimizer run eagerly on copies: `step()` gives both fresh gradients and steps both;
    `assert_same()` compares parameters and state."""

    def __init__(self, make_optimizer: Callable, shapes: Sequence[Sequence[int]]):
        import fuser

        # (each test's optimizer adds entries to Dynamo's cache of torch's own step frames: past
        # its recompile limit, in a process that ran many such tests, the step runs eagerly)
        torch._dynamo.reset()
        self.ours = [torch.nn.Parameter(make(s)) for s in shapes]
        self.theirs = [torch.nn.Parameter(p.detach().clone()) for p in self.ours]
        self.opt_ours, self.opt_theirs = make_optimizer(self.ours), make_optimizer(self.theirs)
        self.jitted = fuser.jit(lambda: self.opt_ours.step())

    def step(self) -> None:
        for a, b in zip(self.ours, self.theirs):
            g = make(a.shape)
            a.grad, b.grad = g.clone(), g.clone()
        self.jitted()
        self.opt_theirs.step()

    def assert_same(self, state: bool = True) -> None:
        for a, b in zip(self.ours, self.theirs):
            torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-5, atol=1e-6)
            for key, value in (self.opt_theirs.state[b].items() if state else ()):
                torch.testing.assert_close(self.opt_ours.state[a][key], value, rtol=1e-5, atol=1e-6)


def fresh_jit(fn: Callable) -> Callable:
    """`fuser.jit(fn)` with Dynamo's caches emptied first (each test traces afresh)."""
    import fuser

    torch._dynamo.reset()
    return fuser.jit(fn)


def fresh_compile(fn: Callable) -> Callable:
    """`torch.compile(fn, backend="fuser")` with Dynamo's caches emptied first."""
    torch._dynamo.reset()
    return torch.compile(fn, backend="fuser")


# the two ways into fuser from a PyTorch function, by name (for parametrized tests)
COMPILERS = {"jit": fresh_jit, "torch.compile": fresh_compile}


def assert_raises_as_eager(compiler: str, fn: Callable, *args) -> None:
    """`fn` compiled by COMPILERS[compiler] raises eager's error (its type, and the first line of
    its message); torch.compile wraps an error raised while its backend compiles in its
    BackendCompilerFailed, a RuntimeError, so only fuser.jit must raise eager's type itself."""
    import pytest

    with pytest.raises(Exception) as eager:
        fn(*args)
    with pytest.raises(Exception) as ours:
        COMPILERS[compiler](fn)(*args)
    assert str(eager.value).splitlines()[0] in str(ours.value)
    assert isinstance(ours.value, type(eager.value))
    if compiler == "jit":
        assert type(ours.value) is type(eager.value)

"""The kernel suite of /work/shared/BENCHMARKS.md as plain eager PyTorch.

Each `Case` is one row of the benchmark table: a kernel (rmsnorm_fwd, softmax_bwd, ...) at one
shape. It carries the eager function, a maker of fresh random inputs (bf16, `torch.randn`, never
zeros), and the bytes the row is charged for, from which the harness derives GB/s and the share of
a device-to-device copy:

- forward rows: every input read once and every output written once;
- backward rows: x and dy read and dx written (weights and their gradients are not counted, as in
  BENCHMARKS.md; they are a single row's worth of bytes).

Backward rows time `torch.autograd.grad` alone: `make_runner` runs the forward once, outside the
timing, and returns a callable that takes the gradient with `retain_graph=True`, so it can be
called again and again. All math is fp32 (inputs upcast inside the functions); outputs are bf16,
except the fp32 column sum and the fp32 loss, which are what the definitions return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

DTYPE = torch.bfloat16
RMS_EPS = 1e-6
LAYERNORM_EPS = 1e-5  # F.layer_norm's default

# Row shapes of the full suite and of --quick (a smoke test that runs anywhere in seconds).
FULL_SHAPES = ((16384, 4096), (16384, 8192), (4096, 32768))
FULL_CROSS_ENTROPY = (8192, 128256)
QUICK_SHAPES = ((256, 512),)
QUICK_CROSS_ENTROPY = (64, 1000)


# ---------------------------------------------------------------------------------------------
# The eager definitions
# ---------------------------------------------------------------------------------------------

def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm in fp32 math, cast back to the input dtype."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return (xf * rstd * weight.float()).to(x.dtype)


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=LAYERNORM_EPS)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of the fp32 upcast along the last dim, cast back to the input dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def gelu_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + bias, approximate="tanh")


def gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    """Residual add, then RMSNorm of the sum; returns (normalized, sum)."""
    h = x + residual
    return rmsnorm(h, weight), h


def colsum(x: torch.Tensor) -> torch.Tensor:
    """Column sum (reduce over rows) in fp32; the result stays fp32."""
    return x.float().sum(0)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of fp32 logits against int64 class indices."""
    return F.cross_entropy(logits.float(), target)


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One row of the table.

    `make_inputs(device, seed)` returns the positional arguments of `fn`, fresh and random;
    for backward rows the arguments listed in `grad_args` already require grad.
    """

    name: str                      # e.g. "rmsnorm_fwd[16384x4096]"
    kernel: str                    # e.g. "rmsnorm_fwd"
    shape: tuple[int, int]
    fn: Callable
    make_inputs: Callable[..., tuple]
    bytes_moved: int
    backward: bool = False
    grad_args: tuple[int, ...] = ()


def _randn(shape, device, gen, dtype=DTYPE, requires_grad=False) -> torch.Tensor:
    t = torch.randn(shape, device=device, dtype=dtype, generator=gen)
    return t.requires_grad_(requires_grad)


def _generator(device, seed: int) -> torch.Generator:
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(seed)
    return gen


def _input_maker(specs: Sequence[str], m: int, n: int, grad_args: tuple[int, ...]):
    """Inputs from a list of kinds: "mat" is [m, n] bf16, "row" is [n] bf16 (a weight or bias),
    "target" is [m] int64 class indices in [0, n)."""

    def make_inputs(device, seed: int = 0) -> tuple:
        gen = _generator(device, seed)
        args = []
        for i, kind in enumerate(specs):
            grad = i in grad_args
            if kind == "mat":
                args.append(_randn((m, n), device, gen, requires_grad=grad))
            elif kind == "row":
                args.append(_randn((n,), device, gen, requires_grad=grad))
            elif kind == "target":
                args.append(torch.randint(0, n, (m,), device=device, generator=gen))
            else:
                raise ValueError(f"unknown input kind {kind!r}")
        return tuple(args)

    return make_inputs


# kernel -> (fn, input kinds, bytes of outputs as a function of (m, n))
_FORWARD = {
    "rmsnorm_fwd": (rmsnorm, ("mat", "row"), lambda m, n: m * n * 2),
    "layernorm_fwd": (layernorm, ("mat", "row", "row"), lambda m, n: m * n * 2),
    "softmax_fwd": (softmax, ("mat",), lambda m, n: m * n * 2),
    "gelu_bias_fwd": (gelu_bias, ("mat", "row"), lambda m, n: m * n * 2),
    "add_rmsnorm_fwd": (add_rmsnorm, ("mat", "mat", "row"), lambda m, n: 2 * m * n * 2),
    "colsum_fwd": (colsum, ("mat",), lambda m, n: n * 4),
}

# kernel -> (fn, input kinds, indices of the inputs that require grad). The first input is x.
_BACKWARD = {
    "rmsnorm_bwd": (rmsnorm, ("mat", "row"), (0, 1)),
    "layernorm_bwd": (layernorm, ("mat", "row", "row"), (0, 1, 2)),
    "softmax_bwd": (softmax, ("mat",), (0,)),
    "gelu_bwd": (gelu, ("mat",), (0,)),
    "cross_entropy_bwd": (cross_entropy, ("mat", "target"), (0,)),
}

_INPUT_BYTES = {"mat": lambda m, n: m * n * 2, "row": lambda m, n: n * 2,
                "target": lambda m, n: m * 8}


def forward_case(kernel: str, m: int, n: int) -> Case:
    fn, kinds, out_bytes = _FORWARD[kernel]
    read = sum(_INPUT_BYTES[k](m, n) for k in kinds)
    return Case(name=f"{kernel}[{m}x{n}]", kernel=kernel, shape=(m, n), fn=fn,
                make_inputs=_input_maker(kinds, m, n, ()), bytes_moved=read + out_bytes(m, n))


def backward_case(kernel: str, m: int, n: int) -> Case:
    fn, kinds, grad_args = _BACKWARD[kernel]
    x_bytes = m * n * 2
    # dy has the shape of the output: [m, n] bf16, or a fp32 scalar for the mean loss.
    dy_bytes = 4 if kernel == "cross_entropy_bwd" else x_bytes
    return Case(name=f"{kernel}[{m}x{n}]", kernel=kernel, shape=(m, n), fn=fn,
                make_inputs=_input_maker(kinds, m, n, grad_args),
                bytes_moved=x_bytes + dy_bytes + x_bytes, backward=True, grad_args=grad_args)


ROW_KERNELS = ("rmsnorm_fwd", "layernorm_fwd", "softmax_fwd", "gelu_bias_fwd", "add_rmsnorm_fwd",
               "colsum_fwd", "rmsnorm_bwd", "layernorm_bwd", "softmax_bwd", "gelu_bwd")


def make_case(kernel: str, m: int, n: int) -> Case:
    return backward_case(kernel, m, n) if kernel in _BACKWARD else forward_case(kernel, m, n)


def build_suite(quick: bool = False) -> list[Case]:
    """All rows in the order of BENCHMARKS.md (31 rows; 11 with quick=True)."""
    shapes = QUICK_SHAPES if quick else FULL_SHAPES
    ce_m, ce_n = QUICK_CROSS_ENTROPY if quick else FULL_CROSS_ENTROPY
    cases = [make_case(k, m, n) for m, n in shapes for k in ROW_KERNELS]
    cases.append(make_case("cross_entropy_bwd", ce_m, ce_n))
    return cases


# ---------------------------------------------------------------------------------------------
# The timed callable
# ---------------------------------------------------------------------------------------------

def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def make_runner(case: Case, fn: Callable, args: tuple, seed: int = 0,
                forward_in_timing: bool = False) -> Callable[[], tuple]:
    """The callable the harness validates and times; it returns a tuple of tensors.

    Forward rows: `fn(*args)`. Backward rows: the forward runs once here, and the callable is
    `torch.autograd.grad(outputs, grad inputs, grad_outputs=dy, retain_graph=True)`, with dy
    random. `forward_in_timing=True` puts the forward inside the callable instead, for
    implementations that compute the gradient inside their forward (Liger's cross entropy).
    """
    if not case.backward:
        return lambda: as_tuple(fn(*args))

    wrt = [args[i] for i in case.grad_args]
    if forward_in_timing:
        # Only dy's shapes are needed here. Eager without grad leaves the inputs untouched,
        # whereas such implementations may overwrite their inputs (Liger writes dx into x).
        with torch.no_grad():
            grads = random_like(as_tuple(case.fn(*args)), seed)
        return lambda: torch.autograd.grad(as_tuple(fn(*args)), wrt, grad_outputs=grads)
    outputs = as_tuple(fn(*args))
    grads = random_like(outputs, seed)
    return lambda: torch.autograd.grad(outputs, wrt, grad_outputs=grads, retain_graph=True)


def random_like(outputs: tuple, seed: int) -> list[torch.Tensor]:
    """Random gradients dy for the outputs, the same for every contender."""
    gen = _generator(outputs[0].device, seed + 1)
    return [_randn(o.shape, o.device, gen, dtype=o.dtype) for o in outputs]

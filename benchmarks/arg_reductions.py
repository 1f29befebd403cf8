"""Arg reductions on the GPU (argmax, argmin, max / min along a dim): fuser.jit against eager and
torch.compile. First exactness on ties, NaN and -0.0 / 0.0 at looped and split sizes (each
result equal to eager's, the zeros' signs too), then each case timed by do_bench (median, the
L2 flushed) as microseconds and the input's bytes over that time: rows of a vocabulary (one
pass of running (value, position) pairs reads each row once), a few long rows and a whole
tensor (split across programs), a greedy decode's logits, and columns. Not suite rows.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/arg_reductions.py
"""
import torch
import triton

import fuser

CASES = [
    ("argmax rows fp32 [8192, 32000]", lambda x: x.argmax(-1), (8192, 32000), torch.float32),
    ("argmax rows bf16 [8192, 32000]", lambda x: x.argmax(-1), (8192, 32000), torch.bfloat16),
    ("max dim rows fp32 [16384, 4096]", lambda x: torch.max(x, -1), (16384, 4096), torch.float32),
    ("argmax whole fp32 [4096, 4096]", lambda x: x.argmax(), (4096, 4096), torch.float32),
    ("argmax few rows fp32 [4, 1048576]", lambda x: x.argmax(-1), (4, 1 << 20), torch.float32),
    ("greedy decode argmax bf16 [8, 128256]", lambda x: x.argmax(-1), (8, 128256), torch.bfloat16),
    ("argmin cols fp32 [32768, 256]", lambda x: x.argmin(0), (32768, 256), torch.float32),
]
# exactness on ties, NaN and ±0 at the looped and split sizes, before the timings
g = torch.Generator(device="cuda").manual_seed(0)
for shape in ((64, 50000), (3, 1 << 20), (40000, 5)):
    x = torch.randint(-3, 4, shape, device="cuda", generator=g).float()
    x.view(-1)[torch.randint(0, x.numel(), (5,), device="cuda", generator=g)] = float("nan")
    x[1] = -0.0
    x[2, :3] = 0.0
    for fname, f in (("argmax", lambda t: t.argmax(-1)), ("max dim", lambda t: torch.max(t, -1)),
                     ("argmin all", lambda t: t.argmin()), ("min dim0", lambda t: torch.min(t, 0))):
        got, want = fuser.jit(f)(x), f(x)
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        same = all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) and torch.equal(torch.signbit(a.float()), torch.signbit(b.float())) for a, b in zip(got, want))
        print(f"exact {fname} {shape}: {same}", flush=True)
for name, fn, shape, dtype in CASES:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    nbytes = x.numel() * x.element_size()
    jit, comp = fuser.jit(fn), torch.compile(fn)
    got, want = jit(x), fn(x)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    ok = all(torch.equal(g, w) for g, w in zip(got, want))
    comp(x)
    row = [name, "ok" if ok else "MISMATCH"]
    for label, f in (("eager", fn), ("torch.compile", comp), ("fuser.jit", jit)):
        ms = triton.testing.do_bench(lambda: f(x), warmup=25, rep=200)
        row.append(f"{label} {ms * 1e3:.1f} us ({nbytes / ms / 1e6:.0f} GB/s)")
    print(" | ".join(row), flush=True)

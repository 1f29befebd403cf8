"""Hand-written bf16 RMSNorm forward kernels in the forms an inner reduction can take, to see
which property of a kernel moves it (not part of the suite): the row loaded twice (the second
time from cache) against held in registers, with and without masks. It found the one-pass form
that `fuser.codegen.kernel` writes (`one_pass`) and the autotuner times: on the H200
(2026-11-30) the reloading kernel without masks or a loop reached 1.00 of copy at 16384x8192
(8 warps), 0.94 at 16384x4096 and, with its sizes constant (as Inductor compiles it), 0.97 at
4096x32768, where the persistent kernel read 0.96 / 0.92 / 0.90 and the same reloading kernel
with a loop of one iteration 0.58-0.67.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_rmsnorm_forms.py
"""
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402
@triton.jit
def k_reload(x_ptr, w_ptr, o_ptr, R, C, stride, RB: tl.constexpr, MASK: tl.constexpr):
    row = tl.program_id(0)
    base = tl.arange(0, RB)[None, :]
    acc = tl.full([1, RB], 0, tl.float32)
    for off in tl.range(0, C, RB):
        i = off + base
        if MASK:
            m = i < C
            x = tl.load(x_ptr + (i + stride * row), m, eviction_policy='evict_last', other=0.0).to(tl.float32)
            acc = tl.where(m, acc + x * x, acc)
        else:
            x = tl.load(x_ptr + (i + stride * row), eviction_policy='evict_last').to(tl.float32)
            acc = acc + x * x
    s = tl.sum(acc, 1)[:, None]
    for off in tl.range(0, C, RB):
        i = off + base
        if MASK:
            m = i < C
            x = tl.load(x_ptr + (i + stride * row), m, eviction_policy='evict_first', other=0.0).to(tl.float32)
            w = tl.load(w_ptr + i, m, eviction_policy='evict_last', other=0.0).to(tl.float32)
        else:
            x = tl.load(x_ptr + (i + stride * row), eviction_policy='evict_first').to(tl.float32)
            w = tl.load(w_ptr + i, eviction_policy='evict_last').to(tl.float32)
        y = x * tl.rsqrt(s / C + 1e-6) * w
        if MASK:
            tl.store(o_ptr + (i + stride * row), y.to(tl.bfloat16), m)
        else:
            tl.store(o_ptr + (i + stride * row), y.to(tl.bfloat16))

@triton.jit
def k_persist(x_ptr, w_ptr, o_ptr, R, C, stride, RB: tl.constexpr, MASK: tl.constexpr, CC: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, RB)[None, :]
    if CC > 0:
        n = CC
        st = CC
    else:
        n = C
        st = stride
    if MASK:
        m = i < n
        x = tl.load(x_ptr + (i + st * row), m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + i, m, eviction_policy='evict_last', other=0.0).to(tl.float32)
    else:
        x = tl.load(x_ptr + (i + st * row)).to(tl.float32)
        w = tl.load(w_ptr + i, eviction_policy='evict_last').to(tl.float32)
    s = tl.sum(x * x, 1)[:, None]
    y = x * tl.rsqrt(s / n + 1e-6) * w
    if MASK:
        tl.store(o_ptr + (i + st * row), y.to(tl.bfloat16), m)
    else:
        tl.store(o_ptr + (i + st * row), y.to(tl.bfloat16))


def main() -> None:
    copy = copy_gbps()
    for (R, C) in ((4096, 32768), (16384, 8192), (16384, 4096)):
        x = torch.randn(R, C, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(C, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(x)
        ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
        def bw(f):  # share of copy, after checking the result
            o.zero_()
            f()
            torch.testing.assert_close(o, ref, atol=2e-2, rtol=2e-2)
            ms = triton.testing.do_bench(f, return_mode="median")
            return 2 * x.nbytes / ms / 1e6 / copy
        res = []
        for wps in (4, 8, 16, 32):
            if C // (32 * wps) > 64:
                continue  # spills
            for mk in (1, 0):
                res.append(f"reload{'' if mk else '_nomask'} w{wps} {bw(lambda: k_reload[(R,)](x, w, o, R, C, C, RB=C, MASK=mk, num_warps=wps, num_stages=1)):.2f}")
                res.append(f"persist{'' if mk else '_nomask'} w{wps} {bw(lambda: k_persist[(R,)](x, w, o, R, C, C, RB=C, MASK=mk, CC=0, num_warps=wps)):.2f}")
            res.append(f"persist_static w{wps} {bw(lambda: k_persist[(R,)](x, w, o, R, C, C, RB=C, MASK=0, CC=C, num_warps=wps)):.2f}")
        print(f"{R}x{C}: " + "  ".join(res), flush=True)


if __name__ == "__main__":
    main()

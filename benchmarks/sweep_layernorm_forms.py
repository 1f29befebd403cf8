"""Hand-written bf16 LayerNorm forward kernels, one program a row, in the forms its statistics
can take (not part of the suite): which property moves the row of 32768 columns, where the
generated one-pass kernel and torch.compile read about 0.75 of copy while RMSNorm reads 0.98.

- regs: the row loaded once for both statistics (mean, then the squared deviations from the
  registers), loaded again from cache for the output (the generated one-pass form);
- reload_var: the squared deviations from a second load, so the row is not held across the
  first reduction;
- shifted: both statistics in one reduction step, sums of x - K and (x - K)^2 with K the row's
  first element (no dependent second reduction; exact enough unless |mean - K| >> std);
- persist / persist_shifted: as regs / shifted, the output computed from the registers;
- sums_branch: the generated form: sums of x and x^2 in one step (no shift), the two-pass
  deviations in a branch taken only where the mean is large against the spread.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_layernorm_forms.py
"""
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402

FORMS = ("regs", "reload_var", "shifted", "persist", "persist_shifted", "sums_branch")


@triton.jit
def k_layernorm(x_ptr, w_ptr, b_ptr, o_ptr, C, RB: tl.constexpr, FORM: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, RB)[None, :]
    ptr = x_ptr + row * RB + i
    x = tl.load(ptr, eviction_policy="evict_last").to(tl.float32)
    if FORM == 5:
        s1 = tl.sum(x, 1)[:, None]
        mean = s1 / RB
        m2 = tl.sum(x * x, 1)[:, None] - s1 * mean
        if tl.max(tl.where((m2 * 4 >= s1 * mean) & (m2 < float("inf")), 0, 1)) != 0:
            dev = x - mean
            m2 = tl.sum(dev * dev, 1)[:, None]
        var = m2 / RB
    elif FORM == 2 or FORM == 4:  # shifted: one reduction step
        k = tl.load(x_ptr + row * RB).to(tl.float32)
        d = x - k
        s1 = tl.sum(d, 1)[:, None]
        s2 = tl.sum(d * d, 1)[:, None]
        mean = k + s1 / RB
        var = tl.maximum(s2 / RB - (s1 / RB) * (s1 / RB), 0.0)
    else:
        mean = tl.sum(x, 1)[:, None] / RB
        if FORM == 1:
            x = tl.load(ptr, eviction_policy="evict_last").to(tl.float32)
        dev = x - mean
        var = tl.sum(dev * dev, 1)[:, None] / RB
    rstd = tl.rsqrt(var + 1e-5)
    if FORM < 3 or FORM == 5:
        x = tl.load(ptr, eviction_policy="evict_first").to(tl.float32)
    w = tl.load(w_ptr + i, eviction_policy="evict_last").to(tl.float32)
    b = tl.load(b_ptr + i, eviction_policy="evict_last").to(tl.float32)
    tl.store(o_ptr + row * RB + i, ((x - mean) * rstd * w + b).to(tl.bfloat16))


def main() -> None:
    copy = copy_gbps()
    print(f"copy {copy:.0f} GB/s; torch {torch.__version__}, triton {triton.__version__}")
    for (R, C) in ((4096, 32768), (16384, 8192), (16384, 4096)):
        x = torch.randn(R, C, device="cuda", dtype=torch.bfloat16) + 0.5  # the sums form needs no fallback
        w = torch.randn(C, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(C, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(x)
        ref = torch.nn.functional.layer_norm(x.float(), (C,), w.float(), b.float(), 1e-5).to(x.dtype)
        for stages in (1,):  # 2 measured the same (2026-12-01)
            res = []
            for wps in (8, 16, 32):
                if C // (32 * wps) > 128:
                    continue  # spills
                for form, name in enumerate(FORMS):
                    def run():
                        k_layernorm[(R,)](x, w, b, o, C, RB=C, FORM=form, num_warps=wps, num_stages=stages)
                    o.zero_()
                    run()
                    torch.testing.assert_close(o, ref, atol=5e-2, rtol=2e-2)
                    ms = triton.testing.do_bench(run, return_mode="median")
                    res.append(f"{name} w{wps} {2 * x.nbytes / ms / 1e6 / copy:.2f}")
            print(f"{R}x{C} stages {stages}: " + "  ".join(res), flush=True)


if __name__ == "__main__":
    main()

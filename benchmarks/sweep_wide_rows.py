"""Hand-written bf16 LayerNorm forward kernels for wide rows (not part of the suite): which form
hides the per-row load -> cross-warp reduction -> store chain at 4096x32768, where one program a
row fills a multiprocessor and sweep_layernorm_forms.py's best form read 0.82 of copy
(torch.compile 0.75, the RMSNorm row kernel 0.98); 16384x8192 is run too, to see that nothing
regresses there. Each config is checked against torch once, then timed (do_bench, median); the
figures are shares of the copy bandwidth measured in the same run, counting x read once and y
written once (weight and bias left out).

Statistics: every LayerNorm form takes sums of x - K and (x - K)^2 with K the row's first element
(one reduction step; exact enough unless |mean - K| >> std), rstd = rsqrt(var + 1e-5), var
biased, in fp32. Config keys: w warps; tup 1: both sums in one two-operand tl.reduce (one
exchange between warps), 0: two tl.sum; pack 1: only the bf16 row stays live across the
reduction, widened again for the output (half the registers; no spills at 32 warps); p:
programs a multiprocessor of a persistent grid (P = p * SMs; at 32768 columns only one program
fits, so p 2 runs as two waves); r: register cap (maxnreg) so that p programs fit.

- row_regs: one program a row, the row held in registers, y computed from them;
- persist_prefetch: persistent, program i takes rows i, i + P, ...; the next row (half 1: only
  its first half) is loaded as bf16 into registers before this row's reduction, so its HBM load
  overlaps this row's reduction and stores;
- persist_stages: the same loop written plainly as tl.range(..., num_stages=s), Triton's
  pipeliner prefetching x through shared memory (cp.async); hide 0: w and b are loaded in the
  loop and pipelined too (3 x 64 KB of shared memory at 32768), 1: loaded under an always-true
  `if`, out of the pipeliner's reach;
- two_rows: one program takes two rows as a [2, C] tile (w and b loaded once for both); reload 1
  loads x again (from cache) for the output instead of holding it;
- chunk_reload: one program a row, a loop over column chunks of ch accumulates the sums (x kept
  in L2 with evict_last), a second loop reloads x for the output; registers small, so several
  programs share a multiprocessor and hide each other's reductions (if the rows stay in L2);
- rms 1: RMSNorm forward (y = x * rstd * w, rstd = rsqrt(mean(x^2) + 1e-5)) in the row_regs and
  persist_prefetch forms, a sanity check against the RMSNorm row kernel's 0.98.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_wide_rows.py
    PYTHONPATH=. python3 benchmarks/sweep_wide_rows.py --check   # CPU: interpreter, small sizes
"""
import os
import sys

CHECK = "--check" in sys.argv
if CHECK:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)


@triton.jit
def _add2(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def _sums(a, q, TUP: tl.constexpr, RMS: tl.constexpr):
    """Row sums ([M, N] -> [M, 1]) of a and q (RMS: of q only, a is not used)."""
    if RMS:
        s2 = tl.sum(q, 1, keep_dims=True)
        s1 = s2
    elif TUP:
        s1, s2 = tl.reduce((a, q), 1, _add2, keep_dims=True)
    else:
        s1 = tl.sum(a, 1, keep_dims=True)
        s2 = tl.sum(q, 1, keep_dims=True)
    return s1, s2


@triton.jit
def _stats(s1, s2, k, C: tl.constexpr, RMS: tl.constexpr):
    """(mean, rstd) from the sums of d = x - k and d^2 (RMS: s2 is the sum of x^2, mean 0)."""
    if RMS:
        mean = s2 * 0.0  # not used
        rstd = tl.rsqrt(s2 / C + 1e-5)
    else:
        m1 = s1 / C
        mean = k + m1
        rstd = tl.rsqrt(tl.maximum(s2 / C - m1 * m1, 0.0) + 1e-5)
    return mean, rstd


@triton.jit
def _store(x, mean, rstd, w_ptr, b_ptr, y_ptr, i, mask, RMS: tl.constexpr):
    """y = (x - mean) * rstd * w + b (RMS: x * rstd * w) at columns i of the row at y_ptr."""
    w = tl.load(w_ptr + i, eviction_policy="evict_last").to(tl.float32)
    if RMS:
        y = x * rstd * w
    else:
        b = tl.load(b_ptr + i, eviction_policy="evict_last").to(tl.float32)
        y = (x - mean) * rstd * w + b
    tl.store(y_ptr + i, y.to(tl.bfloat16), mask)


@triton.jit
def _row(x, k, C: tl.constexpr, TUP: tl.constexpr, RMS: tl.constexpr):
    d = x if RMS else x - k
    s1, s2 = _sums(d, d * d, TUP, RMS)
    return _stats(s1, s2, k, C, RMS)


@triton.jit
def _widen(h, PACK: tl.constexpr):
    """bf16 -> fp32 for the output; PACK: through integer bits, a conversion that the compiler
    does not merge with the one for the statistics, so only the bf16 row stays live across the
    reduction (half the registers)."""
    if PACK:
        return (h.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    return h.to(tl.float32)


@triton.jit
def k_row_regs(x_ptr, w_ptr, b_ptr, y_ptr, C: tl.constexpr, PACK: tl.constexpr, TUP: tl.constexpr,
               RMS: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, C)[None, :]
    xh = tl.load(x_ptr + row * C + i, eviction_policy="evict_first")
    k = tl.load(x_ptr + row * C).to(tl.float32)
    mean, rstd = _row(xh.to(tl.float32), k, C, TUP, RMS)
    _store(_widen(xh, PACK), mean, rstd, w_ptr, b_ptr, y_ptr + row * C, i, None, RMS)


@triton.jit
def k_persist_prefetch(x_ptr, w_ptr, b_ptr, y_ptr, R, C: tl.constexpr, HALF: tl.constexpr,
                       PACK: tl.constexpr, TUP: tl.constexpr, RMS: tl.constexpr):
    H: tl.constexpr = C // 2  # the row as two halves, so that only the first may be prefetched
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    i = tl.arange(0, H)[None, :]
    ok0 = (i * 0 + pid) < R  # a row mask as a tensor (the interpreter takes no scalar mask for a block)
    xa_n = tl.load(x_ptr + pid * C + i, mask=ok0, eviction_policy="evict_first")  # bf16
    if not HALF:
        xb_n = tl.load(x_ptr + pid * C + H + i, mask=ok0, eviction_policy="evict_first")
    k_n = tl.load(x_ptr + pid * C, mask=pid < R)
    for row in range(pid, R, P):
        xa_h = xa_n
        if HALF:
            xb_h = tl.load(x_ptr + row * C + H + i, eviction_policy="evict_first")
        else:
            xb_h = xb_n
        k = k_n.to(tl.float32)
        nxt = row + P  # issue the next row's loads before this row's reduction
        ok = (i * 0 + nxt) < R
        xa_n = tl.load(x_ptr + nxt * C + i, mask=ok, eviction_policy="evict_first")
        if not HALF:
            xb_n = tl.load(x_ptr + nxt * C + H + i, mask=ok, eviction_policy="evict_first")
        k_n = tl.load(x_ptr + nxt * C, mask=nxt < R)
        da = xa_h.to(tl.float32) if RMS else xa_h.to(tl.float32) - k
        db = xb_h.to(tl.float32) if RMS else xb_h.to(tl.float32) - k
        s1, s2 = _sums(da + db, da * da + db * db, TUP, RMS)
        mean, rstd = _stats(s1, s2, k, C, RMS)
        _store(_widen(xa_h, PACK), mean, rstd, w_ptr, b_ptr, y_ptr + row * C, i, None, RMS)
        _store(_widen(xb_h, PACK), mean, rstd, w_ptr, b_ptr, y_ptr + row * C, H + i, None, RMS)


@triton.jit
def k_persist_stages(x_ptr, w_ptr, b_ptr, y_ptr, R, C: tl.constexpr, STAGES: tl.constexpr,
                     HIDE: tl.constexpr, PACK: tl.constexpr, TUP: tl.constexpr, RMS: tl.constexpr):
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    i = tl.arange(0, C)[None, :]
    for row in tl.range(pid, R, P, num_stages=STAGES):
        xh = tl.load(x_ptr + row * C + i, eviction_policy="evict_first")
        k = tl.load(x_ptr + row * C).to(tl.float32)
        mean, rstd = _row(xh.to(tl.float32), k, C, TUP, RMS)
        x = _widen(xh, PACK)
        if not HIDE:
            _store(x, mean, rstd, w_ptr, b_ptr, y_ptr + row * C, i, None, RMS)
        elif row < R:  # always true: the loads in this region are not the loop's, the pipeliner leaves them
            _store(x, mean, rstd, w_ptr, b_ptr, y_ptr + row * C, i, None, RMS)


@triton.jit
def k_two_rows(x_ptr, w_ptr, b_ptr, y_ptr, R, C: tl.constexpr, EVEN: tl.constexpr,
               RELOAD: tl.constexpr, PACK: tl.constexpr, TUP: tl.constexpr, RMS: tl.constexpr):
    rows = tl.program_id(0) * 2 + tl.arange(0, 2)[:, None]
    i = tl.arange(0, C)[None, :]
    m = None if EVEN else rows < R
    z = None if EVEN else 0.0
    p = x_ptr + rows * C + i
    if RELOAD:
        xh = tl.load(p, mask=m, other=z, eviction_policy="evict_last")
    else:
        xh = tl.load(p, mask=m, other=z, eviction_policy="evict_first")
    k = tl.load(x_ptr + rows * C, mask=m, other=z).to(tl.float32)
    mean, rstd = _row(xh.to(tl.float32), k, C, TUP, RMS)
    if RELOAD:
        xh = tl.load(p, mask=m, other=z, eviction_policy="evict_first")
    _store(_widen(xh, PACK), mean, rstd, w_ptr, b_ptr, y_ptr + rows * C, i, m, RMS)


@triton.jit
def k_chunk_reload(x_ptr, w_ptr, b_ptr, y_ptr, C: tl.constexpr, CH: tl.constexpr,
                   TUP: tl.constexpr, RMS: tl.constexpr):
    base = tl.program_id(0) * C
    j = tl.arange(0, CH)[None, :]
    k = tl.load(x_ptr + base).to(tl.float32)
    a1 = tl.zeros([1, CH], tl.float32)
    a2 = tl.zeros([1, CH], tl.float32)
    for off in range(0, C, CH):
        d = tl.load(x_ptr + base + off + j, eviction_policy="evict_last").to(tl.float32)
        if not RMS:
            d = d - k
        a1 += d
        a2 += d * d
    s1, s2 = _sums(a1, a2, TUP, RMS)
    mean, rstd = _stats(s1, s2, k, C, RMS)
    for off in range(0, C, CH):
        x = tl.load(x_ptr + base + off + j, eviction_policy="evict_first").to(tl.float32)
        _store(x, mean, rstd, w_ptr + off, b_ptr + off, y_ptr + base + off, j, None, RMS)


def plan(form: str, c: dict, R: int, C: int, sms: int):
    """(kernel, grid, runtime arguments after the four pointers, constexprs, launch options) of
    one form with config c: w warps, tup, pack, rms, p programs a multiprocessor (P = p * SMs),
    r register cap (maxnreg), s num_stages, half, hide, reload, ch (see the docstring)."""
    consts = dict(C=C, PACK=c.get("pack", 0), TUP=c.get("tup", 1), RMS=c.get("rms", 0))
    opts = dict(num_warps=c["w"], num_stages=1)
    if "r" in c:
        opts["maxnreg"] = c["r"]
    if form == "row_regs":
        return k_row_regs, (R,), (), consts, opts
    if form == "persist_prefetch":
        return k_persist_prefetch, (min(R, c["p"] * sms),), (R,), dict(consts, HALF=c["half"]), opts
    if form == "persist_stages":
        return (k_persist_stages, (min(R, c["p"] * sms),), (R,), dict(consts, STAGES=c["s"], HIDE=c["hide"]),
                dict(opts, num_stages=3))
    if form == "two_rows":
        return k_two_rows, (-(-R // 2),), (R,), dict(consts, EVEN=R % 2 == 0, RELOAD=c["reload"]), opts
    if form == "chunk_reload":
        del consts["PACK"]
        return k_chunk_reload, (R,), (), dict(consts, CH=min(c["ch"], C)), opts
    raise ValueError(form)


def bind(form: str, c: dict, x, w, b, y, sms: int):
    """The launch of one form and config on these tensors, as a function of no arguments."""
    kernel, grid, args, consts, opts = plan(form, c, *x.shape, sms)
    if CHECK:
        opts.pop("maxnreg", None)
    return lambda: kernel[grid](x, w, b, y, *args, **consts, **opts)


def label(c: dict) -> str:
    return " ".join(f"{k}{v}" for k, v in c.items())


# (form, config), keys as in plan()
WIDE = ([("row_regs", dict(w=w, tup=t, pack=k))
         for w, t, k in ((16, 0, 0), (32, 0, 0), (32, 1, 0), (32, 1, 1), (16, 1, 1))]
        + [("persist_prefetch", dict(p=p, w=w, half=h, pack=k, tup=t)) for p, w, h, k, t in
           ((1, 32, 0, 0, 1), (1, 32, 0, 1, 1), (1, 32, 1, 1, 1), (1, 16, 0, 1, 1), (1, 16, 1, 1, 1), (1, 32, 0, 1, 0),
            (2, 32, 1, 1, 1))]
        + [("persist_stages", dict(p=1, w=w, s=s, hide=h, pack=k)) for w, s, h, k in
           ((32, 2, 0, 0), (32, 2, 1, 0), (32, 2, 1, 1), (32, 3, 1, 1), (16, 2, 1, 1), (16, 3, 1, 1))]
        + [("two_rows", dict(w=w, reload=r, pack=k)) for w, r, k in ((32, 0, 1), (16, 0, 1), (32, 1, 0))]
        + [("chunk_reload", dict(ch=ch, w=w)) for ch, w in ((4096, 8), (8192, 8), (8192, 16))]
        + [("row_regs", dict(w=32, rms=1))]
        + [("persist_prefetch", dict(p=1, w=32, half=h, pack=1, rms=1)) for h in (0, 1)])
MID = ([("row_regs", dict(w=w, pack=k)) for w, k in ((8, 0), (16, 0), (8, 1))]
       + [("persist_prefetch", dict(p=2, w=8, half=0, pack=1)),
          ("persist_prefetch", dict(p=4, w=8, half=0, pack=1, r=64)),
          ("persist_prefetch", dict(p=2, w=16, half=0, pack=1))]
       + [("persist_stages", dict(p=2, w=8, s=2, hide=1, pack=1)),
          ("persist_stages", dict(p=4, w=8, s=2, hide=1, pack=1, r=64))]
       + [("two_rows", dict(w=16, reload=0, pack=1)), ("chunk_reload", dict(ch=4096, w=8))]
       + [("row_regs", dict(w=8, rms=1)), ("persist_prefetch", dict(p=4, w=8, half=0, pack=1, r=64, rms=1))])


def make_inputs(R: int, C: int, device: str):
    g = torch.Generator(device=device).manual_seed(R * 7 + C)
    x = torch.randn(R, C, generator=g, device=device)
    x[1::3] += 50.0  # |mean| >> std: the statistics' shift is exercised
    x[5::7] = x[5::7] * 2.0 + 1000.0  # plain sums of x and x^2 in fp32 fail here (err/tol ~2)
    w = torch.randn(C, generator=g, device=device)
    b = torch.randn(C, generator=g, device=device)
    return [t.to(torch.bfloat16) for t in (x, w, b)]


def reference(x, w, b, rms: int, dtype):
    x, w, b = x.to(dtype), w.to(dtype), b.to(dtype)
    if rms:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5) * w + b


def check() -> None:
    """Every form and config under the interpreter at small sizes against a float64 reference."""
    failed = 0
    for R, C in ((37, 1024), (16, 2048)):
        x, w, b = make_inputs(R, C, "cpu")
        refs = {rms: reference(x, w, b, rms, torch.float64) for rms in (0, 1)}
        seen = set()
        for form, c in WIDE + MID:
            c = dict(c, ch=256) if form == "chunk_reload" else c
            key = (form, label({k: v for k, v in c.items() if k not in ("w", "r")}))
            if key in seen:
                continue  # warps do not matter to the interpreter
            seen.add(key)
            for sms in (4, 5):  # P = p * sms programs: R is not a multiple, the loop has a tail
                if sms == 5 and form not in ("persist_prefetch", "persist_stages"):
                    continue
                y = torch.full_like(x, float("nan"))
                bind(form, c, x, w, b, y, sms)()
                ref = refs[c.get("rms", 0)]  # the interpreter truncates to bf16: err/tol ~0.6 when right
                err = ((y.double() - ref).abs() / (1e-2 + 1e-2 * ref.abs())).max()
                ok = bool(err <= 1.0)
                failed += not ok
                print(f"{R}x{C} P/SM {sms} {form:16s} {label(c):28s} {'ok' if ok else 'FAIL'} (err/tol {err:.2f})",
                      flush=True)
    print("all passed" if not failed else f"{failed} FAILED")
    sys.exit(1 if failed else 0)


def main() -> None:
    from benchmarks.sweep_pointwise import copy_gbps

    copy = copy_gbps()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s; {sms} SMs; torch {torch.__version__}, triton {triton.__version__}")
    for (R, C), configs in (((4096, 32768), WIDE), ((16384, 8192), MID)):
        x, w, b = make_inputs(R, C, "cuda")
        y = torch.empty_like(x)
        refs = {rms: reference(x, w, b, rms, torch.float32).to(torch.bfloat16) for rms in (0, 1)}
        best = {}
        for form, c in configs:
            head = f"{R}x{C} {form:16s} {label(c):32s}"
            try:
                run = bind(form, c, x, w, b, y, sms)
                y.fill_(float("nan"))
                run()
                torch.testing.assert_close(y, refs[c.get("rms", 0)], atol=5e-2, rtol=2e-2)
                ms = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
                share = 2 * x.nbytes / ms / 1e6 / copy
                print(f"{head} {ms * 1e3:8.1f} us  {share:.2f} of copy", flush=True)
                kind = "rmsnorm" if c.get("rms") else "layernorm"
                best[kind] = max(best.get(kind, (0.0, "")), (share, f"{form} {label(c)}"))
            except Exception as e:  # out of resources, compile failure, wrong result: a row, not a stop
                msg = " ".join(str(e).split())[:160]
                print(f"{head} error {type(e).__name__}: {msg}", flush=True)
        for kind, (share, name) in best.items():
            print(f"{R}x{C} best {kind}: {name} {share:.2f} of copy", flush=True)


if __name__ == "__main__":
    check() if CHECK else main()

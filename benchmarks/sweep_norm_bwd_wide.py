"""Hand-written bf16 RMSNorm / LayerNorm backward kernels for wide rows (not part of the suite):
which form reads x and dy from HBM once and still produces dw (db) without a second pass.
Traffic counted as x and dy read once and dx written once (3 * rows * cols * 2 bytes; weight,
dw, db and the fp32 workspace ignored), as a share of the copy bandwidth measured in the same run.
The statistics are recomputed from x (LayerNorm: sums of d = x - x[row, 0], d^2, g, g*d in one
step, g = dy * w), nothing is saved from the forward.

- two_kernel: one program a row, the row in registers, writes dx and the row's mean/rstd; then
  a column kernel re-reads x and dy in 2-D tiles (fp32 partials over S row splits) and a combine
  kernel sums the S partials to dw (db). What the compiler generates today; the reference.
- chunked_ws: persistent grid of P = k * SMs programs, row blocks pid, pid + P, ... (RB rows a
  step); pass 1 over column chunks of CH loads x, dy (evict_last) for the sums, pass 2 reloads
  them (L2), stores dx (evict_first) and adds the dw (db) terms into the program's fp32
  workspace row ws[pid, :] (load + add + store; the program's first block stores, so no zeroing);
  a combine kernel sums the P workspace rows. stages > 1 software-pipelines pass 1 (tl.range).
- skewed_ws: chunked_ws with the two passes of consecutive blocks fused in one chunk loop: pass 1
  of block i (HBM) next to pass 2 of block i - P (L2), so the HBM stream does not stop while a
  block's dx and workspace update run.
- regs_ws: the whole row block loaded once into registers (fp32, or bf16 kept until used with
  bf16=1), both passes from registers, one whole-row workspace read-modify-write; prefetch=1
  loads the next block into registers before the current block's reductions.
- regacc_ws: chunked_ws with dw's (db's) partial kept in registers across the program's rows,
  one accumulator per chunk of CH columns (the chunk loop of pass 2 unrolled in generated
  source), stored to ws[pid] once; only the partial stays on chip, x and dy are streamed
  (tenth session, H200: RMSNorm at 4096x32768 331 us at best, a tie with fuser's two kernels;
  LayerNorm's twice as many accumulators spill, 854 us at best).

Each row: median time of all the form's kernels (do_bench), share of copy, registers/spills of
the main kernel, and a loose check against a float64 reference made once per shape and norm.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_norm_bwd_wide.py
    TRITON_INTERPRET=1 PYTHONPATH=. .venv/bin/python benchmarks/sweep_norm_bwd_wide.py --check

--check runs every config on the CPU interpreter at [48, 1024] and [37, 768] (column counts not
a multiple of the chunk and row counts not a multiple of RB are masked), chunk sizes divided by
16 and 3 "SMs", against a float64 autograd reference.
"""
import os
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.sweep_pointwise import copy_gbps  # noqa: E402

F32 = tl.float32


@triton.jit
def _up(v):
    """bf16 -> fp32 by shifting the bits: not merged (CSE) with an earlier .to(float32) of v."""
    return (v.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _coef(s1, s2, sg, sgd, k, C, eps, LN: tl.constexpr):
    """From the row sums of d, d^2, g, g*d (d = x - k; k = 0, s1 = sg = 0 for RMSNorm):
    mean, rstd, cg, cgx with dx = rstd * (g - cg - xhat * cgx), xhat = (x - mean) * rstd."""
    m1 = s1 / C
    rstd = tl.rsqrt(tl.maximum(s2 / C - m1 * m1, 0.0) + eps)
    cg = sg / C
    return k + m1, rstd, cg, rstd * (sgd / C - m1 * cg)


@triton.jit
def _load_block(x_ptr, dy_ptr, blk, R, C, RB: tl.constexpr, cols, cm, BF16: tl.constexpr):
    rows = blk * RB + tl.arange(0, RB)[:, None]
    m = (rows < R) & cm
    x = tl.load(x_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_first")
    dy = tl.load(dy_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_first")
    if not BF16:
        x = x.to(F32)
        dy = dy.to(F32)
    return x, dy


@triton.jit
def k_regs(x_ptr, dy_ptr, w_ptr, dx_ptr, ws_ptr, st_ptr, R, C, P, eps, LN: tl.constexpr,
           RB: tl.constexpr, BLOCK: tl.constexpr, BF16: tl.constexpr, PREFETCH: tl.constexpr,
           DW: tl.constexpr):
    """Row blocks pid, pid + P, ... whole in registers. DW: dw (db) terms into ws[pid] (ws[P +
    pid]); else (the two_kernel row kernel, P = blocks) mean and rstd into st[row, 0:2]."""
    pid = tl.program_id(0)
    nblk = tl.cdiv(R, RB)
    cols = tl.arange(0, BLOCK)[None, :]
    cm = cols < C
    if PREFETCH:
        xn, dyn = _load_block(x_ptr, dy_ptr, pid, R, C, RB, cols, cm, BF16)
    for blk in range(pid, nblk, P):
        rows = blk * RB + tl.arange(0, RB)[:, None]
        rm = rows < R
        if PREFETCH:
            xb, dyb = xn, dyn
            xn, dyn = _load_block(x_ptr, dy_ptr, blk + P, R, C, RB, cols, cm, BF16)
        else:
            xb, dyb = _load_block(x_ptr, dy_ptr, blk, R, C, RB, cols, cm, BF16)
        x = xb.to(F32)
        g = dyb.to(F32) * tl.load(w_ptr + cols, mask=cm, other=0.0, eviction_policy="evict_last").to(F32)
        if LN:
            k = tl.load(x_ptr + rows * C, mask=rm, other=0.0).to(F32)
            d = tl.where(cm, x - k, 0.0)
            mean, rstd, cg, cgx = _coef(tl.sum(d, 1)[:, None], tl.sum(d * d, 1)[:, None], tl.sum(g, 1)[:, None],
                                        tl.sum(g * d, 1)[:, None], k, C, eps, LN)
        else:
            mean, rstd, cg, cgx = _coef(0.0, tl.sum(x * x, 1)[:, None], 0.0, tl.sum(g * x, 1)[:, None],
                                        0.0, C, eps, LN)
        if BF16:  # convert again (and reload w from L2) instead of holding fp32 across the sums
            x = _up(xb)
            dy = _up(dyb)
            g = dy * tl.load(w_ptr + cols, mask=cm, other=0.0).to(F32)
        else:
            dy = dyb
        xhat = (x - mean) * rstd
        tl.store(dx_ptr + rows * C + cols, (rstd * (g - cg - xhat * cgx)).to(tl.bfloat16), mask=rm & cm)
        if DW:  # one whole-row read-modify-write (the first block stores)
            c1 = tl.arange(0, BLOCK)
            old_lim = tl.where(blk != pid, C, 0)  # (limits, not scalar & tensor: the interpreter mis-types it)
            wsw = ws_ptr + pid * C + c1
            old = tl.load(wsw, mask=c1 < old_lim, other=0.0, eviction_policy="evict_last")
            tl.store(wsw, old + tl.sum(dy * xhat, 0), mask=c1 < C, eviction_policy="evict_last")
            if LN:
                wsb = ws_ptr + (P + pid) * C + c1
                old = tl.load(wsb, mask=c1 < old_lim, other=0.0, eviction_policy="evict_last")
                tl.store(wsb, old + tl.sum(dy, 0), mask=c1 < C, eviction_policy="evict_last")
        else:
            tl.store(st_ptr + rows * 2, mean + tl.zeros_like(rstd), mask=rm)
            tl.store(st_ptr + rows * 2 + 1, rstd, mask=rm)


@triton.jit
def k_cols(x_ptr, dy_ptr, st_ptr, part_ptr, R, C, S, LN: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """two_kernel's column kernel: program (column block, split s) sums dy * xhat (and dy) over
    rows s*BR, s*BR + S*BR, ... into part[s] (part[S + s])."""
    s = tl.program_id(1)
    c1 = tl.program_id(0) * BC + tl.arange(0, BC)
    cols = c1[None, :]
    accw = tl.zeros([BR, BC], F32)
    accb = tl.zeros([BR, BC], F32)
    for r0 in range(s * BR, R, S * BR):
        rows = r0 + tl.arange(0, BR)[:, None]
        m = (rows < R) & (cols < C)
        x = tl.load(x_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_first").to(F32)
        dy = tl.load(dy_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_first").to(F32)
        mean = tl.load(st_ptr + rows * 2, mask=rows < R, other=0.0)
        rstd = tl.load(st_ptr + rows * 2 + 1, mask=rows < R, other=0.0)
        accw += dy * (x - mean) * rstd
        if LN:
            accb += dy
    tl.store(part_ptr + s * C + c1, tl.sum(accw, 0), mask=c1 < C)
    if LN:
        tl.store(part_ptr + (S + s) * C + c1, tl.sum(accb, 0), mask=c1 < C)


@triton.jit
def k_combine(ws_ptr, out_ptr, n, C, BP: tl.constexpr, BC: tl.constexpr):
    """out[j, c] = sum over p < n of ws[j, p, c] (j = program_id(1): dw, db), as bf16."""
    c1 = tl.program_id(0) * BC + tl.arange(0, BC)
    base = ws_ptr + tl.program_id(1) * n * C
    acc = tl.zeros([BP, BC], F32)
    for p0 in range(0, n, BP):
        p = p0 + tl.arange(0, BP)[:, None]
        acc += tl.load(base + p * C + c1[None, :], mask=(p < n) & (c1[None, :] < C), other=0.0,
                       eviction_policy="evict_first")
    tl.store(out_ptr + tl.program_id(1) * C + c1, tl.sum(acc, 0).to(tl.bfloat16), mask=c1 < C)


@triton.jit
def _pass2_chunk(x_ptr, dy_ptr, w_ptr, dx_ptr, ws_ptr, rows, rm, c0, C, P, pid, has, first, mean, rstd, cg, cgx,
                 LN: tl.constexpr, CH: tl.constexpr):
    """Reload a chunk (L2), store its dx; if has, add its dw (db) terms into ws[pid] (ws[P + pid]),
    storing them without the load where first."""
    c1 = c0 + tl.arange(0, CH)
    cols = c1[None, :]
    m = rm & (cols < C)
    x = tl.load(x_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_first").to(F32)
    dy = tl.load(dy_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_first").to(F32)
    w = tl.load(w_ptr + cols, mask=cols < C, other=0.0, eviction_policy="evict_last").to(F32)
    xhat = (x - mean) * rstd
    tl.store(dx_ptr + rows * C + cols, (rstd * (dy * w - cg - xhat * cgx)).to(tl.bfloat16), mask=m)
    wm = c1 < tl.where(has, C, 0)  # (limits, not scalar & tensor: the interpreter mis-types it)
    om = c1 < tl.where(has & (first == 0), C, 0)
    old = tl.load(ws_ptr + pid * C + c1, mask=om, other=0.0, eviction_policy="evict_last")
    tl.store(ws_ptr + pid * C + c1, old + tl.sum(dy * xhat, 0), mask=wm, eviction_policy="evict_last")
    if LN:
        old = tl.load(ws_ptr + (P + pid) * C + c1, mask=om, other=0.0, eviction_policy="evict_last")
        tl.store(ws_ptr + (P + pid) * C + c1, old + tl.sum(dy, 0), mask=wm, eviction_policy="evict_last")


@triton.jit
def k_chunked(x_ptr, dy_ptr, w_ptr, dx_ptr, ws_ptr, R, C, P, eps, LN: tl.constexpr, RB: tl.constexpr,
              CH: tl.constexpr, SKEW: tl.constexpr, STAGES: tl.constexpr):
    """chunked_ws (SKEW=0) and skewed_ws (SKEW=1); see the module docstring."""
    pid = tl.program_id(0)
    nblk = tl.cdiv(R, RB)
    r_off = tl.arange(0, RB)[:, None]
    c_off = tl.arange(0, CH)[None, :]
    mean = tl.zeros([RB, 1], F32)  # the statistics of the block pass 2 works on (SKEW: carried)
    rstd = tl.zeros([RB, 1], F32)
    cg = tl.zeros([RB, 1], F32)
    cgx = tl.zeros([RB, 1], F32)
    for blk in range(pid, nblk + SKEW * P, P):
        rows = blk * RB + r_off
        rm = rows < R  # false for blk >= nblk (SKEW's last step)
        prows = (blk - P) * RB + r_off  # SKEW: the block whose pass 2 runs in this loop
        prm = (prows >= 0) & (prows < R)  # false for blk == pid
        if LN:
            k = tl.load(x_ptr + rows * C, mask=rm, other=0.0).to(F32)
        else:
            k = 0.0
        a1 = tl.zeros([RB, CH], F32)
        a2 = tl.zeros([RB, CH], F32)
        a3 = tl.zeros([RB, CH], F32)
        a4 = tl.zeros([RB, CH], F32)
        for c0 in tl.range(0, C, CH, num_stages=STAGES):
            cols = c0 + c_off
            cm = cols < C
            m = rm & cm
            x = tl.load(x_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_last").to(F32)
            dy = tl.load(dy_ptr + rows * C + cols, mask=m, other=0.0, eviction_policy="evict_last").to(F32)
            g = dy * tl.load(w_ptr + cols, mask=cm, other=0.0, eviction_policy="evict_last").to(F32)
            if LN:
                d = tl.where(m, x - k, 0.0)
                a1 += d
                a3 += g
            else:
                d = x
            a2 += d * d
            a4 += g * d
            if SKEW:
                _pass2_chunk(x_ptr, dy_ptr, w_ptr, dx_ptr, ws_ptr, prows, prm, c0, C, P, pid, blk > pid,
                             (blk == pid + P).to(tl.int32), mean, rstd, cg, cgx, LN, CH)
        if LN:
            s1 = tl.sum(a1, 1)[:, None]
            sg = tl.sum(a3, 1)[:, None]
        else:
            s1 = tl.zeros([RB, 1], F32)
            sg = tl.zeros([RB, 1], F32)
        mean, rstd, cg, cgx = _coef(s1, tl.sum(a2, 1)[:, None], sg, tl.sum(a4, 1)[:, None], k, C, eps, LN)
        if not SKEW:
            for c0 in tl.range(0, C, CH, num_stages=STAGES):
                _pass2_chunk(x_ptr, dy_ptr, w_ptr, dx_ptr, ws_ptr, rows, rm, c0, C, P, pid, blk >= pid,
                             (blk == pid).to(tl.int32), mean, rstd, cg, cgx, LN, CH)


_REGACC_KERNELS: dict = {}


def regacc_kernel(nch: int):
    """regacc_ws's kernel for rows of `nch` chunks (CH columns each, the tail masked): row blocks
    pid, pid + P, ... one row at a time; pass 1 streams the row's chunks (HBM, kept in L2) for
    its sums, pass 2 reads them again (L2), stores dx and adds the dw (db) terms into one
    register accumulator per chunk (the chunk loop unrolled, so each has a name of its own),
    written to ws[pid] (ws[P + pid]) once, after the program's last row. Generated source (a
    name per accumulator), loaded from a file as Triton's JIT reads its kernels' source."""
    found = _REGACC_KERNELS.get(nch)
    if found is not None:
        return found
    accs = [f"dw{j}" for j in range(nch)] + [f"db{j}" for j in range(nch)]
    body = [
        "import triton", "import triton.language as tl",
        "from benchmarks.sweep_norm_bwd_wide import _coef", "F32 = tl.float32", "",
        "@triton.jit",
        "def k_regacc(x_ptr, dy_ptr, w_ptr, dx_ptr, ws_ptr, R, C, P, eps, LN: tl.constexpr, CH: tl.constexpr):",
        "    pid = tl.program_id(0)",
        "    c_off = tl.arange(0, CH)",
    ]
    body += [f"    {a} = tl.zeros([CH], F32)" for a in accs]
    body += [
        "    for row in range(pid, R, P):",
        "        base = row * C",
        "        if LN:",
        "            k = tl.load(x_ptr + base).to(F32)",
        "        else:",
        "            k = 0.0",
        "        a1 = tl.zeros([CH], F32)",
        "        a2 = tl.zeros([CH], F32)",
        "        a3 = tl.zeros([CH], F32)",
        "        a4 = tl.zeros([CH], F32)",
        "        for c0 in range(0, C, CH):",
        "            cols = c0 + c_off",
        "            cm = cols < C",
        "            x = tl.load(x_ptr + base + cols, mask=cm, other=0.0, eviction_policy='evict_last').to(F32)",
        "            dy = tl.load(dy_ptr + base + cols, mask=cm, other=0.0, eviction_policy='evict_last').to(F32)",
        "            g = dy * tl.load(w_ptr + cols, mask=cm, other=0.0, eviction_policy='evict_last').to(F32)",
        "            if LN:",
        "                d = tl.where(cm, x - k, 0.0)",
        "                a1 += d",
        "                a3 += g",
        "            else:",
        "                d = x",
        "            a2 += d * d",
        "            a4 += g * d",
        "        if LN:",
        "            s1 = tl.sum(a1, 0)",
        "            sg = tl.sum(a3, 0)",
        "        else:",
        "            s1 = 0.0",
        "            sg = 0.0",
        "        mean, rstd, cg, cgx = _coef(s1, tl.sum(a2, 0), sg, tl.sum(a4, 0), k, C, eps, LN)",
    ]
    for j in range(nch):
        body += [
            f"        cols = {j} * CH + c_off",
            "        cm = cols < C",
            "        x = tl.load(x_ptr + base + cols, mask=cm, other=0.0, eviction_policy='evict_first').to(F32)",
            "        dy = tl.load(dy_ptr + base + cols, mask=cm, other=0.0, eviction_policy='evict_first').to(F32)",
            "        w = tl.load(w_ptr + cols, mask=cm, other=0.0, eviction_policy='evict_last').to(F32)",
            "        xhat = tl.where(cm, (x - mean) * rstd, 0.0)",
            "        tl.store(dx_ptr + base + cols, (rstd * (dy * w - cg - xhat * cgx)).to(tl.bfloat16), mask=cm)",
            f"        dw{j} += dy * xhat",
            "        if LN:",
            f"            db{j} += dy",
        ]
    for j in range(nch):  # (a program with no row would store zeros: right for the combine)
        body += [
            f"    cols = {j} * CH + c_off",
            f"    tl.store(ws_ptr + pid * C + cols, dw{j}, mask=cols < C)",
            "    if LN:",
            f"        tl.store(ws_ptr + (P + pid) * C + cols, db{j}, mask=cols < C)",
        ]
    _REGACC_KERNELS[nch] = load_generated(f"regacc_{nch}", body).k_regacc
    return _REGACC_KERNELS[nch]


def load_generated(name: str, lines: list):
    """A module of generated source, written to a file and imported: Triton's (and Gluon's)
    JIT reads a kernel's source from its file."""
    import importlib.util
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix=f"{name}_"), f"{name}.py")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_fn(form, cfg, t):
    """A closure running all kernels of a form (the workspace needs no zeroing); it returns the
    compiled main (row) kernel, for its register and spill counts."""
    x, dy, w, dx, out = t["x"], t["dy"], t["w"], t["dx"], t["out"]
    (R, C), ln, eps, nsm = x.shape, t["ln"], t["eps"], t["nsm"]
    nout = 2 if ln else 1
    rb = cfg.get("rb", 1)
    nblk = triton.cdiv(R, rb)
    P = min(cfg.get("k", 1) * nsm, nblk)
    combine_bc = 128

    def combine(ws, n):
        k_combine[(triton.cdiv(C, combine_bc), nout)](ws, out, n, C, BP=16, BC=combine_bc, num_warps=4)

    if form == "two_kernel":
        st = torch.full((R, 2), float("nan"), device=x.device, dtype=torch.float32)
        br, bc = cfg["br"], cfg["bc"]
        S = max(1, min(triton.cdiv(R, br), 4 * nsm // triton.cdiv(C, bc)))
        part = torch.full((nout, S, C), float("nan"), device=x.device, dtype=torch.float32)

        def fn():
            kern = k_regs[(R,)](x, dy, w, dx, dx, st, R, C, R, eps, LN=ln, RB=1, BLOCK=triton.next_power_of_2(C),
                                BF16=False, PREFETCH=False, DW=False, num_warps=cfg["warps"])
            k_cols[(triton.cdiv(C, bc), S)](x, dy, st, part, R, C, S, LN=ln, BR=br, BC=bc, num_warps=cfg["cw"])
            combine(part, S)
            return kern
        return fn
    # workspace rows (dw, then db): NaN, so a kernel reading one before its first store fails the check
    ws = torch.full((nout, P, C), float("nan"), device=x.device, dtype=torch.float32)
    if form == "regs_ws":
        def fn():
            kern = k_regs[(P,)](x, dy, w, dx, ws, ws, R, C, P, eps, LN=ln, RB=rb, BLOCK=triton.next_power_of_2(C),
                                BF16=cfg.get("bf16", False), PREFETCH=cfg.get("prefetch", False), DW=True,
                                num_warps=cfg["warps"])
            combine(ws, P)
            return kern
        return fn
    if form == "regacc_ws":
        ch = cfg["ch"]
        kernel = regacc_kernel(triton.cdiv(C, ch))

        def fn():
            kern = kernel[(P,)](x, dy, w, dx, ws, R, C, P, eps, LN=ln, CH=ch, num_warps=cfg["warps"])
            combine(ws, P)
            return kern
        return fn
    assert form in ("chunked_ws", "skewed_ws"), form

    def fn():
        kern = k_chunked[(P,)](x, dy, w, dx, ws, R, C, P, eps, LN=ln, RB=rb, CH=cfg["ch"], SKEW=form == "skewed_ws",
                               STAGES=cfg.get("stages", 1), num_warps=cfg["warps"])
        combine(ws, P)
        return kern
    return fn


def two(warps, cw=8, br=32, bc=256):
    return ("two_kernel", dict(warps=warps, cw=cw, br=br, bc=bc))


def chunked(ch, warps, k=1, rb=1, stages=1, skew=False):
    return ("skewed_ws" if skew else "chunked_ws", dict(ch=ch, warps=warps, k=k, rb=rb, stages=stages))


def regs(warps, k=1, rb=1, bf16=False, prefetch=False):
    return ("regs_ws", dict(warps=warps, k=k, rb=rb, bf16=bf16, prefetch=prefetch))


def regacc(ch, warps, k=1):
    return ("regacc_ws", dict(ch=ch, warps=warps, k=k))


# (rows, cols) -> configs; run for rmsnorm and layernorm each (48 timed configs in all)
CONFIGS = {
    (4096, 32768): [two(32), two(16),
                    chunked(4096, 16), chunked(8192, 16), chunked(2048, 8, k=2), chunked(4096, 8, k=2, stages=2),
                    chunked(2048, 16, rb=2),
                    chunked(4096, 16, skew=True), chunked(2048, 8, k=2, skew=True), chunked(2048, 16, rb=2, skew=True),
                    regs(32), regs(32, bf16=True), regs(16, bf16=True),
                    regacc(4096, 32), regacc(2048, 32), regacc(4096, 16), regacc(8192, 32), regacc(2048, 16, k=2)],
    (16384, 4096): [two(8), chunked(2048, 8, k=2), chunked(2048, 8, k=2, skew=True),
                    regs(8, k=2), regs(8, k=2, prefetch=True), regs(4, k=4, rb=2, bf16=True, prefetch=True)],
}


def reference(x, dy, w, b, ln, eps):
    """dx, dw, db by autograd of the forward in float64."""
    xd, wd, bd = (v.double().requires_grad_() for v in (x, w, b))
    if ln:
        y = torch.nn.functional.layer_norm(xd, (x.shape[1],), wd, bd, eps)
    else:
        y = xd * torch.rsqrt(xd.pow(2).mean(1, keepdim=True) + eps) * wd + 0 * bd
    y.backward(dy.double())
    return xd.grad, wd.grad, bd.grad


def errors(t, ref):
    """Max of |dx error| / (atol + rtol |ref|) (<= 1 passes: atol = rtol = 2e-2), and the max dw/db
    error over the max |dw| (|db|) (one bf16 rounding of the largest is 2e-3 to 4e-3)."""
    dx_ref, dw_ref, db_ref = ref
    e_dx = ((t["dx"].double() - dx_ref).abs() / (2e-2 + 2e-2 * dx_ref.abs())).max().item()
    e_w = [((o.double() - r).abs().max() / r.abs().max()).item() for o, r in zip(t["out"], (dw_ref, db_ref))]
    return e_dx, max(e_w)


def time_checked(head: str, make, t: dict, ref, copy: float, dx_tol: float = 1.0, broken=None) -> None:
    """Print a form's row: `make()` builds the closure running it, which runs once on outputs
    filled with NaN, is checked against the float64 reference `ref` (`broken()`, if given, says
    what else went wrong, or None), then timed (do_bench's median, as a share of `copy`) and
    checked again. A form that does not compile on this Triton is a row, not a stop."""
    def run_once(fn):  # on outputs filled with NaN: what went wrong (or None), and the errors
        t["dx"].fill_(float("nan"))
        t["out"].fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        why = broken() if broken is not None else None
        return why, None if why else errors(t, ref)
    try:
        fn = make()
        why, first = run_once(fn)
        if why:
            print(f"{head} BAD: {why}", flush=True)
            return
        e_dx, e_w = first
        ms = triton.testing.do_bench(fn, return_mode="median")
        # checked again after the timed calls: a form with state across calls (the pair probe's
        # epochs) must hold from the second call on too
        why, later = run_once(fn)
        if why:
            print(f"{head} BAD after the timed calls: {why}", flush=True)
            return
        e_dx, e_w = max(e_dx, later[0]), max(e_w, later[1])
        verdict = "ok" if e_dx <= dx_tol and e_w <= 2e-2 else f"BAD dx err/tol {e_dx:.2f} dw/db {e_w:.3f}"
        print(f"{head} {ms * 1e3:8.1f} us {3 * t['x'].nbytes / ms / 1e6 / copy:5.2f}  {verdict}", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"{head} error: {type(e).__name__}: {str(e).strip().splitlines()[0][:120]}", flush=True)


def sm90_usage(source, warps: int) -> str:
    """Compile a Gluon (or Triton) source for sm_90 without a GPU: its shared memory in bytes and
    cuobjdump's resource line (registers, stack of spills)."""
    import subprocess
    import tempfile

    from triton.backends.compiler import GPUTarget

    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    cubin = os.path.join(tempfile.mkdtemp(), "k.cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    usage = subprocess.run([tool, "--dump-resource-usage", cubin], capture_output=True, text=True).stdout
    return f"shared {compiled.metadata.shared} B; " + " ".join(l.strip() for l in usage.splitlines() if "REG" in l)


def probe_shapes(shapes=((4096, 32768), (8192, 16384))):
    """A Gluon probe's GPU rows: prints the copy's rate, then yields (R, C, tensors, float64
    reference, copy GB/s, processors) for each RMSNorm shape (the caller's loop variables keep
    the last shape's tensors until the next are made: two shapes at most at once)."""
    copy = copy_gbps()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s, {nsm} SMs; torch {torch.__version__}, triton {triton.__version__}")
    for R, C in shapes:
        t = tensors(R, C, False, "cuda", nsm)
        ref = tuple(r.float() for r in reference(t["x"], t["dy"], t["w"], t["b"], False, t["eps"]))
        yield R, C, t, ref, copy, nsm
        del t, ref
        torch.cuda.empty_cache()


def run_probe(name: str, main, compile_only) -> None:
    """A Gluon probe's entry: `compile_only()` with --compile (no GPU needed), else `main()`."""
    if "--compile" in sys.argv:
        compile_only()
    elif not torch.cuda.is_available():
        sys.exit(f"{name} needs a CUDA GPU (or --compile, which compiles only)")
    else:
        main()


def tensors(R, C, ln, device, nsm):
    torch.manual_seed(0)
    x = torch.randn(R, C, device=device, dtype=torch.bfloat16)
    if ln:
        x += 0.5  # nonzero mean
    dy = torch.randn(R, C, device=device, dtype=torch.bfloat16)
    w = torch.randn(C, device=device, dtype=torch.bfloat16)
    b = torch.randn(C, device=device, dtype=torch.bfloat16)
    return dict(x=x, dy=dy, w=w, b=b, dx=torch.empty_like(x), ln=ln, eps=1e-5 if ln else 1e-6, nsm=nsm,
                out=torch.empty(2 if ln else 1, C, device=device, dtype=torch.bfloat16))


def label(form, cfg):
    return form, " ".join(f"{k}={int(v)}" for k, v in cfg.items())


def check() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1", "run --check with TRITON_INTERPRET=1"
    bad = 0
    for shape in ((48, 1024), (37, 768)):
        for ln in (False, True):
            t = tensors(*shape, ln, "cpu", nsm=3)
            ref = reference(t["x"], t["dy"], t["w"], t["b"], ln, t["eps"])
            for form, cfg in [c for cs in CONFIGS.values() for c in cs]:
                cfg = dict(cfg, ch=max(64, cfg["ch"] // 16)) if "ch" in cfg else cfg
                t["dx"].fill_(float("nan"))
                t["out"].fill_(float("nan"))
                make_fn(form, cfg, t)()
                e_dx, e_w = errors(t, ref)
                ok = e_dx <= 1 and e_w <= 1e-2
                bad += not ok
                print(f"{'layernorm' if ln else 'rmsnorm':9s} {shape[0]}x{shape[1]} {'%-10s %-36s' % label(form, cfg)} "
                      f"dx err/tol {e_dx:.3f} dw/db rel err {e_w:.4f} {'ok' if ok else 'FAIL'}", flush=True)
    print("all passed" if not bad else f"{bad} FAILED")
    sys.exit(1 if bad else 0)


def main() -> None:
    start = time.perf_counter()
    copy = copy_gbps()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s, {nsm} SMs; torch {torch.__version__}, triton {triton.__version__}")
    print(f"{'norm':9s} {'shape':10s} {'form':10s} {'config':36s} {'us':>8s} {'copy':>5s} {'regs/spill':>9s}  check")
    for (R, C), configs in CONFIGS.items():
        for ln in (False, True):
            t = tensors(R, C, ln, "cuda", nsm)
            ref = reference(t["x"], t["dy"], t["w"], t["b"], ln, t["eps"])
            ref = tuple(r.float() for r in ref)
            for form, cfg in configs:
                head = f"{'layernorm' if ln else 'rmsnorm':9s} {f'{R}x{C}':10s} {'%-10s %-36s' % label(form, cfg)}"
                try:
                    fn = make_fn(form, cfg, t)
                    kern = fn()
                    rs = f"{getattr(kern, 'n_regs', '?')}/{getattr(kern, 'n_spills', '?')}"
                    e_dx, e_w = errors(t, ref)
                    ms = triton.testing.do_bench(fn, return_mode="median")
                    verdict = "ok" if e_dx <= 2 and e_w <= 2e-2 else f"BAD dx err/tol {e_dx:.2f} dw {e_w:.3f}"
                    print(f"{head} {ms * 1e3:8.1f} {3 * t['x'].nbytes / ms / 1e6 / copy:5.2f} {rs:>9s}  {verdict}",
                          flush=True)
                except Exception as e:  # noqa: BLE001 (out of resources, compile errors: a row, not a stop)
                    print(f"{head} error: {type(e).__name__}: {str(e).strip().splitlines()[0][:80]}", flush=True)
            del t, ref
            torch.cuda.empty_cache()
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    check() if "--check" in sys.argv else main()

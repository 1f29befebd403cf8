"""A LayerNorm backward for wide rows with each row split over a pair of processors, written in
Gluon (a probe, not part of the suite; both forms measured on the H200, docs/performance-history.md).

At 32768 columns the shared-row kernel (fuser/codegen/shared_row.py) cannot hold both column
sums' partials: dw and db need 2 x 32768 fp32 a processor, its whole register file. Here the
programs come in pairs; each takes half of every row of its pair's rows (pair, pair + NPAIRS,
...) and keeps dw's and db's partials for its half (64 registers a thread at 16 warps). Each
half's x and dy sit in shared memory, three rows' halves at once (192 KB, w's half 32 KB):

- at iteration k a program starts copying row k+2's half into the buffer row k-1 left free;
- its first pass sums g = dy * w and g * xhat over row k+1's half and publishes the two partial
  sums (atomic stores, then a release exchange of the call's epoch into the half's flag);
- it then waits (acquire) for its partner's sums of row k, published an iteration before, adds
  them to its own and writes dx and the dw, db terms of row k's half.

So the exchange's latency hides behind a whole pass (the twelfth session's `tl` probe, which
waited right after publishing, lost about 2 us a row to it). The wait spins at most SPIN times
and flags a timeout in err[0] rather than hang. Programs stay resident together (one a
processor, grid <= processors), as the spin needs; nothing guarantees it where other work holds
processors (the generator would need a cooperative launch). x and dy are read from HBM once; a combine
kernel sums the pairs' partial rows of dw and db.

On the H200 this form (`pair`) reached 0.48-0.54 of copy (355 us at 4096x32768, SPT=8, 16
warps: 5.7 us a half row where about 3 would be the bandwidth's), with round trips to L2 left
exposed every row: the next row's mean and rstd, loaded as its first pass starts and used at
once (and row k's loaded again for its second pass), and the wait, an acquire poll of the flag
(one round trip even when the partner is ready) and then two acquire reads of the sums.

The second form (`pair2`, kernel(nch, v2=True)) hides them:

- each partial sum is published as one 64-bit word, the call's epoch in the high half and the
  sum's fp32 bits in the low, by one relaxed atomic exchange: no flag, no release, as the value
  and its epoch travel in one atomic word (the int64 sums buffer is zeroed once; epochs start
  at 1, so a zero never passes);
- the partner's two words of row k are loaded at the top of iteration k (volatile loads, so
  from L2, not L1), before the copies and the first pass of row k+1, and checked only after
  that pass: a word whose high half is not this call's epoch is polled again (at most SPIN
  times, err[0] on a timeout), then the sums are the low halves' bits;
- mean and rstd are carried in registers, those of row k (its second pass) and k+1 (its first
  pass); row k+2's are loaded in iteration k, after the first pass, and used an iteration later.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_layernorm_pair.py [--groups | --against-generated]
    .venv/bin/python benchmarks/sweep_layernorm_pair.py --compile   # no GPU: compile for sm_90

`--groups`: the second form over groups of G programs a row (each over 1/G of it, adding the
group's other G - 1 partial sums), one or two programs a processor, at 4096x32768. On the H100
(forty-fifth session) groups of 4 and 8 lost 12-35% to the pair, with no spill and two programs
a processor. `--against-generated`: the second form and the generator's pair form alternating
on the same tensors, each with its kernels' times and its host time a call.

After the probes of each shape, the generator's own pair form (fuser/codegen/shared_row_pair.py,
the definition given mean and rstd) runs on the same tensors, checked and timed: the probe is
the mark it is measured against.

Each form (the two pair forms side by side in each config) is checked against float64
autograd before it is timed, beside the two-kernel form of `sweep_norm_bwd_wide.py`; traffic
is x and dy read once and dx written once, as a share of the copy measured in the same run.
"""
import os
import subprocess
import sys
import tempfile

import torch
import triton

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.sweep_norm_bwd_wide import (errors, k_combine, load_generated, make_fn, reference,  # noqa: E402
                                            run_probe, tensors, time_checked, two)

BUFFERS = 3  # row halves in shared memory: row k (second pass), k+1 (first pass), k+2 (copying)
SPIN = 1 << 22  # polls of a partner's flag (pair2: words) before giving up (seconds: each poll is an L2 round trip or two)
_KERNELS: dict = {}


def kernel(nch: int, v2: bool = False, group: int = 2):
    """The kernel for halves of `nch` chunks (CH = SPT * 32 * WARPS columns each); `v2`: the
    second form (the module docstring), with no flags argument and an int64 sums buffer;
    `group` (v2 only): programs a row, each over 1/group of it, adding the group's other
    partial sums (a row's word of sum i from member h at (row * group + h) * 2 + i)."""
    assert v2 or group == 2
    if (nch, v2, group) in _KERNELS:
        return _KERNELS[nch, v2, group]
    G = group

    def copies(row: str, buf: str, indent: str) -> list:
        """Start copying `row`'s half (none past the last row) into buffer `buf`, a copy group a
        chunk; `(offs >= 0) & ...` makes the row's condition a mask of the chunk's shape."""
        lines = []
        for j in range(nch):
            at, mask = f"{row} * C + col0 + {j} * CH + offs", f"mask=(offs >= 0) & ({row} < R)"
            lines += [f"{indent}COPY(xs.index({buf} * {nch} + {j}), x_ptr + {at}, {mask})",
                      f"{indent}COPY(dys.index({buf} * {nch} + {j}), dy_ptr + {at}, {mask})",
                      f"{indent}cp.commit_group()"]
        return lines

    def loads(buf: str, j: int, indent: str) -> list:
        return [f"{indent}x = xs.index({buf} * {nch} + {j}).load(layout).to(gl.float32)",
                f"{indent}dy = dys.index({buf} * {nch} + {j}).load(layout).to(gl.float32)",
                f"{indent}w = wsm.index({j}).load(layout).to(gl.float32)"]

    def first_pass(row: str, buf: str, indent: str, stats: tuple = ()) -> list:
        """The partial sums of g and g * xhat over `row`'s half, published: the row's chunks are
        the oldest copy groups but for the next row's `nch` (committed after them). `stats`: the
        names holding the row's mean and rstd (v2), else they are loaded here."""
        mean, rstd = stats or ("mean", "rstd")
        lines = [] if stats else [f"{indent}mean = gl.load(mean_ptr + {row}, mask={row} < R, other=0.0)",
                                  f"{indent}rstd = gl.load(rstd_ptr + {row}, mask={row} < R, other=0.0)"]
        lines += [f"{indent}a1 = gl.zeros([CH], gl.float32, layout)",
                  f"{indent}a2 = gl.zeros([CH], gl.float32, layout)"]
        for j in range(nch):
            lines += [f"{indent}cp.wait_group({2 * nch - 1 - j})"] + loads(buf, j, indent)
            lines += [f"{indent}g = dy * w", f"{indent}a1 += g", f"{indent}a2 += g * ((x - {mean}) * {rstd})"]
        lines += [f"{indent}s1 = gl.sum(a1, 0)", f"{indent}s2 = gl.sum(a2, 0)",
                  f"{indent}if {row} < R:"]
        if v2:  # a word a sum: the epoch (high half) and the sum's bits (low half), one atomic each
            lines += [f"{indent}    gl.atomic_xchg(sums_ptr + ({row} * {G} + half) * 2, ep | "
                      "(s1.to(gl.int32, bitcast=True).to(gl.int64) & 0xFFFFFFFF), sem='relaxed')",
                      f"{indent}    gl.atomic_xchg(sums_ptr + ({row} * {G} + half) * 2 + 1, ep | "
                      "(s2.to(gl.int32, bitcast=True).to(gl.int64) & 0xFFFFFFFF), sem='relaxed')"]
        else:
            lines += [f"{indent}    gl.atomic_xchg(sums_ptr + ({row} * 2 + half) * 2, s1, sem='relaxed')",
                      f"{indent}    gl.atomic_xchg(sums_ptr + ({row} * 2 + half) * 2 + 1, s2, sem='relaxed')",
                      f"{indent}    gl.atomic_xchg(flags_ptr + {row} * 2 + half, epoch, sem='release')"]
        return lines

    name, flags = (f"k_ln_group{G}" if G != 2 else "k_ln_pair2", "") if v2 else ("k_ln_pair", " flags_ptr,")
    b = ["from triton.experimental import gluon",
         "from triton.experimental.gluon import language as gl",
         "from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp",
         "COPY = getattr(cp, 'async_load', None) or cp.async_copy_global_to_shared", "",
         # (v2 converts epoch to int64, which the constexpr a first call's 1 would be cannot do)
         "@gluon.jit(do_not_specialize=['epoch'])" if v2 else "@gluon.jit",
         f"def {name}(x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, ws_ptr, sums_ptr,{flags} err_ptr,",
         "              R, C, NPAIRS, epoch, CH: gl.constexpr, SPT: gl.constexpr, WARPS: gl.constexpr,",
         "              SPIN: gl.constexpr):",
         "    pid = gl.program_id(0)",
         f"    pair = pid // {G}",
         f"    half = pid % {G}",
         f"    col0 = half * (C // {G})",
         "    layout: gl.constexpr = gl.BlockedLayout([SPT], [32], [WARPS], [0])",
         "    smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])",
         f"    xs = gl.allocate_shared_memory(gl.bfloat16, [{BUFFERS * nch}, CH], smem_layout)",
         f"    dys = gl.allocate_shared_memory(gl.bfloat16, [{BUFFERS * nch}, CH], smem_layout)",
         f"    wsm = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CH], smem_layout)",
         "    offs = gl.arange(0, CH, layout=layout)"]
    b += [f"    COPY(wsm.index({j}), w_ptr + col0 + {j} * CH + offs)" for j in range(nch)]
    b += ["    cp.commit_group()"]
    b += copies("pair", "0", "    ") + copies("(pair + NPAIRS)", "1", "    ")
    if v2:  # the statistics of rows k (mean0) and k + 1 (mean1), carried; the epoch as a word's high half
        b += ["    ep = epoch.to(gl.int64) << 32",
              "    mean0 = gl.load(mean_ptr + pair, mask=pair < R, other=0.0)",
              "    rstd0 = gl.load(rstd_ptr + pair, mask=pair < R, other=0.0)",
              "    mean1 = gl.load(mean_ptr + pair + NPAIRS, mask=pair + NPAIRS < R, other=0.0)",
              "    rstd1 = gl.load(rstd_ptr + pair + NPAIRS, mask=pair + NPAIRS < R, other=0.0)"]
        b += first_pass("pair", "0", "    ", ("mean0", "rstd0"))
    else:
        b += first_pass("pair", "0", "    ")
    b += [f"    dw{j} = gl.zeros([CH], gl.float32, layout)" for j in range(nch)]
    b += [f"    db{j} = gl.zeros([CH], gl.float32, layout)" for j in range(nch)]
    b += ["    for row in range(pair, R, NPAIRS):",
          "        k = (row - pair) // NPAIRS",
          f"        this = (k % {BUFFERS}).to(gl.int32)",
          f"        nxt = ((k + 1) % {BUFFERS}).to(gl.int32)",
          f"        free = ((k + 2) % {BUFFERS}).to(gl.int32)",
          "        mine1 = s1",
          "        mine2 = s2"]
    if v2:
        # the partner's words of row k are loaded first and looked at after the first pass of
        # row k + 1: volatile loads (ld.volatile, a relaxed load at system scope, so not served by
        # the L1) by every thread, as a scalar atomic's result reaches the threads through shared
        # memory and a barrier, which would wait for it here. Row k + 2's statistics are loaded
        # after that pass (used an iteration later): loaded first, they held two registers more
        # through it, and Triton 3.9 spilled more at SPT=8, 16 warps
        others = range(1, G)  # the group's other members, j places on
        late = " | ".join(f"((o1_{j} >> 32).to(gl.int32) != epoch) | ((o2_{j} >> 32).to(gl.int32) != epoch)"
                          for j in others)  # not all this call's
        reload = [line for j in others for line in (f"o1_{j} = gl.load(other{j}, volatile=True)",
                                                     f"o2_{j} = gl.load(other{j} + 1, volatile=True)")]
        b += [f"        other{j} = sums_ptr + (row * {G} + (half + {j}) % {G}) * 2" for j in others]
        b += ["        " + line for line in reload] + ["        far = row + 2 * NPAIRS"]
        b += copies("far", "free", "        ")
        b += first_pass("(row + NPAIRS)", "nxt", "        ", ("mean1", "rstd1"))
        b += ["        mean2 = gl.load(mean_ptr + far, mask=far < R, other=0.0)",
              "        rstd2 = gl.load(rstd_ptr + far, mask=far < R, other=0.0)",
              "        polls = 0",
              f"        late = {late}",
              "        while late & (polls < SPIN):"] + ["            " + line for line in reload] + [
              f"            late = {late}",
              "            polls += 1",
              "        if late:",
              "            gl.atomic_xchg(err_ptr, 1)",
              "        cg = (mine1 + " + " + ".join(f"o1_{j}.to(gl.int32).to(gl.float32, bitcast=True)" for j in others)
              + ") / C",
              "        cgx = (mine2 + " + " + ".join(f"o2_{j}.to(gl.int32).to(gl.float32, bitcast=True)" for j in others)
              + ") / C",
              "        mean = mean0",
              "        rstd = rstd0"]
    else:
        b += copies("(row + 2 * NPAIRS)", "free", "        ")
        b += first_pass("(row + NPAIRS)", "nxt", "        ")
        b += ["        flag = flags_ptr + row * 2 + 1 - half",
              "        seen = gl.atomic_add(flag, 0, sem='acquire')",
              "        polls = 0",
              "        while (seen != epoch) & (polls < SPIN):",
              "            seen = gl.atomic_add(flag, 0, sem='acquire')",
              "            polls += 1",
              "        if seen != epoch:",
              "            gl.atomic_xchg(err_ptr, 1)",
              "        other = sums_ptr + (row * 2 + 1 - half) * 2",
              "        cg = (mine1 + gl.atomic_add(other, 0.0, sem='acquire')) / C",
              "        cgx = (mine2 + gl.atomic_add(other + 1, 0.0, sem='acquire')) / C",
              "        mean = gl.load(mean_ptr + row)",
              "        rstd = gl.load(rstd_ptr + row)"]
    for j in range(nch):
        b += loads("this", j, "        ")
        b += ["        g = dy * w",
              "        xhat = (x - mean) * rstd",
              f"        gl.store(dx_ptr + row * C + col0 + {j} * CH + offs, (rstd * (g - cg - xhat * cgx)).to(gl.bfloat16))",
              f"        dw{j} += dy * xhat",
              f"        db{j} += dy"]
    if v2:
        b += ["        mean0 = mean1", "        rstd0 = rstd1", "        mean1 = mean2", "        rstd1 = rstd2"]
    b += ["    cp.wait_group(0)"]
    for j in range(nch):
        b += [f"    gl.store(ws_ptr + pair * C + col0 + {j} * CH + offs, dw{j})",
              f"    gl.store(ws_ptr + (NPAIRS + pair) * C + col0 + {j} * CH + offs, db{j})"]
    module = load_generated(f"gluon_ln_pair{'2' if v2 else ''}_{nch}_g{G}", b)
    _KERNELS[nch, v2, G] = getattr(module, name)
    return _KERNELS[nch, v2, G]


def max_registers(cfg: dict) -> dict:
    """The launch option capping a thread's registers so that cfg's `per_sm` programs fit a
    processor's 65536 (none for one a processor)."""
    per_sm = cfg.get("per_sm", 1)
    return {} if per_sm == 1 else {"maxnreg": 65536 // (per_sm * cfg["warps"] * 32) // 8 * 8}


def shared_bytes(C: int, group: int = 2) -> int:
    return BUFFERS * 2 * 2 * (C // group) + 2 * (C // group)


def compile_only(C: int, spt: int, warps: int, v2: bool = False, group: int = 2, per_sm: int = 1) -> None:
    """Compile for sm_90 without a GPU; print the shared memory, registers and local memory."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    ch = spt * 32 * warps
    ptrs = ("x_ptr", "dy_ptr", "w_ptr", "mean_ptr", "rstd_ptr", "dx_ptr", "ws_ptr", "sums_ptr", "flags_ptr", "err_ptr")
    types = ("*bf16", "*bf16", "*bf16", "*fp32", "*fp32", "*bf16", "*fp32", "*fp32", "*i32", "*i32")
    if v2:  # int64 sums, no flags
        ptrs, types = ptrs[:8] + ptrs[9:], types[:7] + ("*i64", "*i32")
    sig = dict(zip(ptrs, types)) | {"R": "i32", "C": "i32", "NPAIRS": "i32", "epoch": "i32", "CH": "constexpr",
                                   "SPT": "constexpr", "WARPS": "constexpr", "SPIN": "constexpr"}
    # as Triton's launcher specializes them: 16-byte aligned pointers, C a multiple of 16
    attrs = {(i,): [["tt.divisibility", 16]] for i in (*range(len(ptrs)), len(ptrs) + 1)}
    source = GluonASTSource(kernel(C // group // ch, v2, group), sig, constexprs={"CH": ch, "SPT": spt, "WARPS": warps,
                                                                        "SPIN": SPIN}, attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps,
                                                                                   **max_registers(dict(warps=warps, per_sm=per_sm))})
    cubin = os.path.join(tempfile.mkdtemp(), "k.cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    usage = subprocess.run([tool, "--dump-resource-usage", cubin], capture_output=True, text=True).stdout \
        if os.path.exists(tool) else "(no cuobjdump)"
    print(f"{'pair2' if v2 else 'pair'} C={C} group={group} per_sm={per_sm} SPT={spt} warps={warps}: shared {compiled.metadata.shared} B; "
          + " ".join(line.strip() for line in usage.splitlines() if "REG" in line), flush=True)


class PairForm:
    """The pair kernel (`v2`: the second form) and its combine on tensors `t`
    (sweep_norm_bwd_wide.tensors), with the row statistics and the exchange's buffers; each call
    a new epoch. cfg's `group` (default 2) programs a row, `per_sm` (default 1) programs a
    processor: all must be resident at once."""

    def __init__(self, cfg: dict, t: dict, nsm: int, v2: bool = False):
        (self.R, self.C), self.t, self.cfg, self.v2 = t["x"].shape, t, cfg, v2
        self.group = cfg.get("group", 2)
        self.ch = cfg["spt"] * 32 * cfg["warps"]
        self.k = kernel(self.C // self.group // self.ch, v2, self.group)
        self.npairs = min(nsm * cfg.get("per_sm", 1) // self.group, self.R)
        dev = t["x"].device
        xf = t["x"].float()
        var, mean = torch.var_mean(xf, 1, correction=0)
        self.mean, self.rstd = mean.contiguous(), torch.rsqrt(var + t["eps"]).contiguous()
        self.ws = torch.full((2 * self.npairs, self.C), float("nan"), device=dev)
        if v2:  # a word a (row, half, sum), zeros once: epoch 0 is never a call's
            self.sums = torch.zeros(self.R * self.group * 2, device=dev, dtype=torch.int64)
            self.flags = ()
        else:
            self.sums = torch.zeros(self.R * 4, device=dev)
            self.flags = (torch.zeros(self.R * 2, device=dev, dtype=torch.int32),)
        self.err = torch.zeros(1, device=dev, dtype=torch.int32)
        self.epoch = 0

    def __call__(self) -> None:
        self.epoch += 1
        t, cfg = self.t, self.cfg
        self.k[(self.group * self.npairs,)](t["x"], t["dy"], t["w"], self.mean, self.rstd, t["dx"], self.ws, self.sums,
                                   *self.flags, self.err, self.R, self.C, self.npairs, self.epoch, CH=self.ch,
                                   SPT=cfg["spt"], WARPS=cfg["warps"], SPIN=SPIN, num_warps=cfg["warps"],
                                                         **max_registers(cfg))
        k_combine[(triton.cdiv(self.C, 128), 2)](self.ws, t["out"], self.npairs, self.C, BP=16, BC=128, num_warps=4)


def generated_form(t: dict):
    """The generator's pair form (fuser/codegen/shared_row_pair.py) on t's tensors, as the
    LayerNorm backward definition given mean and rstd runs it: a call of it, after one call
    whose outputs are copied into t's (for `errors`); None where the launch took another form."""
    from benchmarks.sweep_shared_row import layernorm_bwd_given_stats

    fd = layernorm_bwd_given_stats()
    var, mean = torch.var_mean(t["x"].float(), 1, correction=0, keepdim=True)
    args = [t["x"], t["w"], t["dy"], mean.contiguous(), torch.rsqrt(var + t["eps"]).contiguous()]
    dx, dw, db = fd.execute(args)
    if "two Gluon programs a row" not in fd.last_triton_code():
        return None
    t["dx"].copy_(dx)
    t["out"][0].copy_(dw)
    t["out"][1].copy_(db)
    torch.cuda.synchronize()
    return lambda: fd.execute(args)


def time_generated(head: str, t: dict, ref, copy: float) -> None:
    """`generated_form` checked against `ref`, then timed alone (fd.execute, do_bench's median).
    Run beside the probes under a profiler (ncu --clock-control none) to compare their kernels'
    stalls."""
    try:
        run = generated_form(t)
        if run is None:
            print(f"{head} not run: the launch took another form", flush=True)
            return
        e_dx, e_w = errors(t, ref)
        ms = triton.testing.do_bench(run, return_mode="median")
        verdict = "ok" if e_dx <= 1.0 and e_w <= 2e-2 else f"BAD dx err/tol {e_dx:.2f} dw/db {e_w:.3f}"
        print(f"{head} {ms * 1e3:8.1f} us {3 * t['x'].nbytes / ms / 1e6 / copy:5.2f}  {verdict}", flush=True)
    except Exception as e:  # noqa: BLE001 (a form that fails is a row, not a stop)
        print(f"{head} error: {type(e).__name__}: {str(e).strip().splitlines()[0][:120]}", flush=True)


CONFIGS = [dict(spt=4, warps=16), dict(spt=8, warps=16), dict(spt=4, warps=8)]
PAIRS = [(form, cfg) for cfg in CONFIGS for form in ("pair", "pair2")]  # each config's two forms side by side
# `--groups`: the second form over groups of programs a row (fewer columns and accumulators a
# program; with per_sm=2, two programs a processor, so one's barriers do not idle it)
GROUPS = [("pair2", dict(spt=8, warps=16)), ("pair2", dict(spt=8, warps=16, group=4)),
          ("pair2", dict(spt=4, warps=16, group=4)), ("pair2", dict(spt=8, warps=8, group=4, per_sm=2)),
          ("pair2", dict(spt=4, warps=8, group=4, per_sm=2)), ("pair2", dict(spt=8, warps=8, group=8, per_sm=2)),
          ("pair2", dict(spt=4, warps=8, group=8, per_sm=2)),
          ("pair2", dict(spt=8, warps=8, group=4, per_sm=1))]


def against_generated(t: dict, ref, copy: float, nsm: int, rounds: int = 2) -> None:
    """`--against-generated`: the second pair form (8 a thread, 16 warps) and the generator's
    pair form on the same tensors, in turn: do_bench, the host's time a call and each kernel's
    time by the profiler (no L2 flush), as benchmarks/harness.py records them (`call_costs`)."""
    from benchmarks.harness import call_costs

    probe = PairForm(dict(spt=8, warps=16), t, nsm, True)
    run = generated_form(t)
    if run is None:
        print("generated: not run, the launch took another form", flush=True)
        return
    print("generated: errors (dx err/tol, dw/db)", errors(t, ref), flush=True)
    for _ in range(rounds):
        for name, fn in (("pair2", probe), ("generated", run)):
            ms = triton.testing.do_bench(fn, return_mode="median")
            costs = call_costs(fn, t["x"].device)
            print(f"{name:10s} {ms * 1e3:7.1f} us ({3 * t['x'].nbytes / ms / 1e6 / copy:.3f} of copy), "
                  f"host {costs.get('host_ms', float('nan')) * 1e3:.1f} us;",
                  " ".join(f"{k[:40]} {v:.1f}" for k, v in costs["kernels"].items()), flush=True)


def main() -> None:
    from benchmarks.sweep_pointwise import copy_gbps

    # the generated form's first call compiles its Gluon kernel (with background compiles it
    # would run the two-kernel form meanwhile, and `time_generated` find no pair form)
    os.environ["FUSER_BACKGROUND_COMPILE"] = "0"
    copy = copy_gbps()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s, {nsm} SMs; torch {torch.__version__}, triton {triton.__version__}", flush=True)
    if "--against-generated" in sys.argv:
        t = tensors(4096, 32768, True, "cuda", nsm)
        against_generated(t, reference(t["x"], t["dy"], t["w"], t["b"], True, t["eps"]), copy, nsm)
        return
    groups = "--groups" in sys.argv
    for R, C in ((4096, 32768),) if groups else ((4096, 32768), (4096, 24576), (1000, 32768)):
        t = tensors(R, C, True, "cuda", nsm)
        ref = reference(t["x"], t["dy"], t["w"], t["b"], True, t["eps"])
        for form, cfg in GROUPS if groups else [two(32)] + PAIRS:
            head = f"layernorm {R}x{C} {form:10s} {str(cfg):36s}"
            if form != "two_kernel" and (C // cfg.get("group", 2)) % (cfg["spt"] * 32 * cfg["warps"]):
                print(f"{head} skipped: a partial chunk", flush=True)
                continue
            made = []  # the pair form, whose timeout flag `broken` reads

            def make(form=form, cfg=cfg):
                made.append(PairForm(cfg, t, nsm, form == "pair2") if form != "two_kernel" else make_fn(form, cfg, t))
                return made[-1]
            time_checked(head, make, t, ref, copy, broken=lambda: "a partner's sums never came (spin limit)"
                         if isinstance(made[-1], PairForm) and made[-1].err.item() else None)
        time_generated(f"layernorm {R}x{C} {'generated':10s} {'(fuser, given mean and rstd)':36s}", t, ref, copy)
        t = ref = None  # (freed before the next shape's)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    run_probe("sweep_layernorm_pair.py", main,
              lambda: [compile_only(32768, cfg["spt"], cfg["warps"], form == "pair2", cfg.get("group", 2),
                                    cfg.get("per_sm", 1))
                       for form, cfg in (GROUPS if "--groups" in sys.argv else PAIRS)])

"""A LayerNorm backward for wide rows with each row split over a pair of processors, written in
Gluon (a probe, not part of the suite; not yet run on a GPU).

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
processor, grid <= processors), as the spin needs. x and dy are read from HBM once; a combine
kernel sums the pairs' partial rows of dw and db.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_layernorm_pair.py
    .venv/bin/python benchmarks/sweep_layernorm_pair.py --compile   # no GPU: compile for sm_90

Each form is checked against float64 autograd before it is timed, beside the two-kernel form
of `sweep_norm_bwd_wide.py`; traffic is x and dy read once and dx written once, as a share of
the copy measured in the same run.
"""
import os
import subprocess
import sys
import tempfile

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.sweep_norm_bwd_wide import (k_combine, load_generated, make_fn, reference, tensors,  # noqa: E402
                                            run_probe, time_checked, two)

BUFFERS = 3  # row halves in shared memory: row k (second pass), k+1 (first pass), k+2 (copying)
SPIN = 1 << 22  # polls of a partner's flag before giving up (about 1 s)
_KERNELS: dict = {}


def kernel(nch: int):
    """The kernel for halves of `nch` chunks (CH = SPT * 32 * WARPS columns each)."""
    if nch in _KERNELS:
        return _KERNELS[nch]

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

    def first_pass(row: str, buf: str, indent: str) -> list:
        """The partial sums of g and g * xhat over `row`'s half, published: the row's chunks are
        the oldest copy groups but for the next row's `nch` (committed after them)."""
        lines = [f"{indent}mean = gl.load(mean_ptr + {row}, mask={row} < R, other=0.0)",
                 f"{indent}rstd = gl.load(rstd_ptr + {row}, mask={row} < R, other=0.0)",
                 f"{indent}a1 = gl.zeros([CH], gl.float32, layout)",
                 f"{indent}a2 = gl.zeros([CH], gl.float32, layout)"]
        for j in range(nch):
            lines += [f"{indent}cp.wait_group({2 * nch - 1 - j})"] + loads(buf, j, indent)
            lines += [f"{indent}g = dy * w", f"{indent}a1 += g", f"{indent}a2 += g * ((x - mean) * rstd)"]
        lines += [f"{indent}s1 = gl.sum(a1, 0)", f"{indent}s2 = gl.sum(a2, 0)",
                  f"{indent}if {row} < R:",
                  f"{indent}    gl.atomic_xchg(sums_ptr + ({row} * 2 + half) * 2, s1, sem='relaxed')",
                  f"{indent}    gl.atomic_xchg(sums_ptr + ({row} * 2 + half) * 2 + 1, s2, sem='relaxed')",
                  f"{indent}    gl.atomic_xchg(flags_ptr + {row} * 2 + half, epoch, sem='release')"]
        return lines

    b = ["from triton.experimental import gluon",
         "from triton.experimental.gluon import language as gl",
         "from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp",
         "COPY = getattr(cp, 'async_load', None) or cp.async_copy_global_to_shared", "",
         "@gluon.jit",
         "def k_ln_pair(x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, ws_ptr, sums_ptr, flags_ptr, err_ptr,",
         "              R, C, NPAIRS, epoch, CH: gl.constexpr, SPT: gl.constexpr, WARPS: gl.constexpr,",
         "              SPIN: gl.constexpr):",
         "    pid = gl.program_id(0)",
         "    pair = pid // 2",
         "    half = pid % 2",
         "    col0 = half * (C // 2)",
         "    layout: gl.constexpr = gl.BlockedLayout([SPT], [32], [WARPS], [0])",
         "    smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])",
         f"    xs = gl.allocate_shared_memory(gl.bfloat16, [{BUFFERS * nch}, CH], smem_layout)",
         f"    dys = gl.allocate_shared_memory(gl.bfloat16, [{BUFFERS * nch}, CH], smem_layout)",
         f"    wsm = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CH], smem_layout)",
         "    offs = gl.arange(0, CH, layout=layout)"]
    b += [f"    COPY(wsm.index({j}), w_ptr + col0 + {j} * CH + offs)" for j in range(nch)]
    b += ["    cp.commit_group()"]
    b += copies("pair", "0", "    ") + copies("(pair + NPAIRS)", "1", "    ")
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
    b += ["    cp.wait_group(0)"]
    for j in range(nch):
        b += [f"    gl.store(ws_ptr + pair * C + col0 + {j} * CH + offs, dw{j})",
              f"    gl.store(ws_ptr + (NPAIRS + pair) * C + col0 + {j} * CH + offs, db{j})"]
    _KERNELS[nch] = load_generated(f"gluon_ln_pair_{nch}", b).k_ln_pair
    return _KERNELS[nch]


def shared_bytes(C: int) -> int:
    return BUFFERS * 2 * 2 * (C // 2) + 2 * (C // 2)


def compile_only(C: int, spt: int, warps: int) -> None:
    """Compile for sm_90 without a GPU; print the shared memory, registers and local memory."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    ch = spt * 32 * warps
    ptrs = ("x_ptr", "dy_ptr", "w_ptr", "mean_ptr", "rstd_ptr", "dx_ptr", "ws_ptr", "sums_ptr", "flags_ptr", "err_ptr")
    types = ("*bf16", "*bf16", "*bf16", "*fp32", "*fp32", "*bf16", "*fp32", "*fp32", "*i32", "*i32")
    sig = dict(zip(ptrs, types)) | {"R": "i32", "C": "i32", "NPAIRS": "i32", "epoch": "i32", "CH": "constexpr",
                                   "SPT": "constexpr", "WARPS": "constexpr", "SPIN": "constexpr"}
    # as Triton's launcher specializes them: 16-byte aligned pointers, C a multiple of 16
    attrs = {(i,): [["tt.divisibility", 16]] for i in (*range(len(ptrs)), 11)}
    source = GluonASTSource(kernel(C // 2 // ch), sig, constexprs={"CH": ch, "SPT": spt, "WARPS": warps, "SPIN": SPIN},
                            attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    cubin = os.path.join(tempfile.mkdtemp(), "k.cubin")
    with open(cubin, "wb") as f:
        f.write(compiled.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    usage = subprocess.run([tool, "--dump-resource-usage", cubin], capture_output=True, text=True).stdout \
        if os.path.exists(tool) else "(no cuobjdump)"
    print(f"C={C} SPT={spt} warps={warps}: shared {compiled.metadata.shared} B; "
          + " ".join(line.strip() for line in usage.splitlines() if "REG" in line), flush=True)


class PairForm:
    """The pair kernel and its combine on tensors `t` (sweep_norm_bwd_wide.tensors), with the
    row statistics and the exchange's buffers; each call a new epoch."""

    def __init__(self, cfg: dict, t: dict, nsm: int):
        (self.R, self.C), self.t, self.cfg = t["x"].shape, t, cfg
        self.ch = cfg["spt"] * 32 * cfg["warps"]
        self.k = kernel(self.C // 2 // self.ch)
        self.npairs = min(nsm // 2, self.R)
        dev = t["x"].device
        xf = t["x"].float()
        var, mean = torch.var_mean(xf, 1, correction=0)
        self.mean, self.rstd = mean.contiguous(), torch.rsqrt(var + t["eps"]).contiguous()
        self.ws = torch.full((2 * self.npairs, self.C), float("nan"), device=dev)
        self.sums = torch.zeros(self.R * 4, device=dev)
        self.flags = torch.zeros(self.R * 2, device=dev, dtype=torch.int32)
        self.err = torch.zeros(1, device=dev, dtype=torch.int32)
        self.epoch = 0

    def __call__(self) -> None:
        self.epoch += 1
        t, cfg = self.t, self.cfg
        self.k[(2 * self.npairs,)](t["x"], t["dy"], t["w"], self.mean, self.rstd, t["dx"], self.ws, self.sums,
                                   self.flags, self.err, self.R, self.C, self.npairs, self.epoch, CH=self.ch,
                                   SPT=cfg["spt"], WARPS=cfg["warps"], SPIN=SPIN, num_warps=cfg["warps"])
        k_combine[(triton.cdiv(self.C, 128), 2)](self.ws, t["out"], self.npairs, self.C, BP=16, BC=128, num_warps=4)


CONFIGS = [dict(spt=4, warps=16), dict(spt=8, warps=16), dict(spt=4, warps=8)]


def main() -> None:
    from benchmarks.sweep_pointwise import copy_gbps

    copy = copy_gbps()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s, {nsm} SMs; torch {torch.__version__}, triton {triton.__version__}", flush=True)
    for R, C in ((4096, 32768), (4096, 24576), (1000, 32768)):
        t = tensors(R, C, True, "cuda", nsm)
        ref = reference(t["x"], t["dy"], t["w"], t["b"], True, t["eps"])
        for form, cfg in [two(32)] + [("pair", c) for c in CONFIGS]:
            head = f"layernorm {R}x{C} {form:10s} {str(cfg):36s}"
            if form == "pair" and (C // 2) % (cfg["spt"] * 32 * cfg["warps"]):
                print(f"{head} skipped: a partial chunk", flush=True)
                continue
            made = []  # the pair form, whose timeout flag `broken` reads

            def make(form=form, cfg=cfg):
                made.append(PairForm(cfg, t, nsm) if form == "pair" else make_fn(form, cfg, t))
                return made[-1]
            time_checked(head, make, t, ref, copy, broken=lambda: "a partner's sums never came (spin limit)"
                         if isinstance(made[-1], PairForm) and made[-1].err.item() else None)
        t = ref = None  # (freed before the next shape's)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    run_probe("sweep_layernorm_pair.py", main, lambda: [compile_only(32768, cfg["spt"], cfg["warps"]) for cfg in CONFIGS])

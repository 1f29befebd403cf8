"""A bf16 RMSNorm backward for wide rows with the row in registers and the weight and dw's partial
in shared memory, written in Gluon (a probe, not part of the suite).

fuser's shared-row kernel (codegen/shared_row.py) holds the row's x and dy in shared memory with
the weight beside them (192 KB at 32768 columns), and dw's fp32 partial in registers; it reads
0.78-0.81 of copy at 4096x32768 whatever its schedule. This probe turns the storage around: x
and dy stay in registers as loaded (bf16, 128 KB a processor: half the register file), widened to
fp32 where used, and the weight (64 KB) and dw's partial (128 KB) sit in shared memory, each
thread reading and writing only its own elements there (one layout, so no barrier is needed).
A row's loads are plain global loads, all in flight at once, as in the persistent kernels that
read 0.96-1.00 of copy at narrower rows; PF chunks of the next row may be loaded before the
second pass. One program a processor; a combine kernel sums the P partial rows of dw.

Measured (H200, Triton 3.6, 2026-12-03, twenty-second session): slower than the shared-row
kernel at every configuration. At 4096x32768 the shared-row probe read 254.6 us (0.76 of copy)
and this form 286.9-317.8 us (0.61-0.67; 4 a thread on 32 warps best, no spills); at 8192x16384
265.4 against 320.1-329.5 us. (The PF > 0 rows of that run read wrong rows, a bug since fixed,
and were no faster: 270.9-337.9 us.)

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_norm_bwd_regrow.py
    PYTHONPATH=/tmp/t36/site .venv/bin/python benchmarks/sweep_norm_bwd_regrow.py --compile  # sm_90 compile
"""
import os
import sys

import torch
import triton

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.sweep_norm_bwd_gluon import KERNEL_HEAD  # noqa: E402
from benchmarks.sweep_norm_bwd_wide import (k_combine, load_generated, probe_shapes, run_probe,  # noqa: E402
                                            sm90_usage, time_checked)

_KERNELS: dict = {}


def kernel(nch: int, pf: int = 0):
    """The kernel for rows of `nch` chunks of CH = SPT * 32 * WARPS columns; the next row's first
    `pf` chunks are loaded before this row's second pass."""
    if (nch, pf) in _KERNELS:
        return _KERNELS[nch, pf]

    def widen(name: str) -> str:
        # bf16 -> fp32 by moving the bits up: spelled unlike the first pass's conversion, so that
        # the compiler does not keep the first pass's fp32 values alive across the row sum
        return f"(({name}.to(gl.int16, bitcast=True).to(gl.int32) << 16).to(gl.float32, bitcast=True))"

    def load(j: int, row: str, indent: str, prefix: str = "") -> list:
        mask = f"(offs >= 0) & ({row} < R)"
        return [f"{indent}{prefix}x{j} = gl.load(x_ptr + ({row}) * C + {j} * CH + offs, mask={mask}, other=0.0)",
                f"{indent}{prefix}dy{j} = gl.load(dy_ptr + ({row}) * C + {j} * CH + offs, mask={mask}, other=0.0)"]

    b = ["from triton.experimental import gluon",
         "from triton.experimental.gluon import language as gl", ""] + KERNEL_HEAD + [
         f"    wsm = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CH], smem_layout)",
         f"    dws = gl.allocate_shared_memory(gl.float32, [{nch}, CH], smem_layout)",
         "    offs = gl.arange(0, CH, layout=layout)"]
    for j in range(nch):
        b += [f"    wsm.index({j}).store(gl.load(w_ptr + {j} * CH + offs))",
              f"    dws.index({j}).store(gl.zeros([CH], gl.float32, layout))"]
    for j in range(pf):
        b += load(j, "pid", "    ", "n")
    b += ["    for row in range(pid, R, P):"]
    for j in range(nch):
        b += ([f"        x{j} = nx{j}", f"        dy{j} = ndy{j}"] if j < pf else load(j, "row", "        "))
    b += ["        a2 = gl.zeros([CH], gl.float32, layout)",
          "        a4 = gl.zeros([CH], gl.float32, layout)"]
    for j in range(nch):
        b += [f"        x = x{j}.to(gl.float32)", f"        dy = dy{j}.to(gl.float32)",
              f"        w = wsm.index({j}).load(layout).to(gl.float32)",
              "        a2 += x * x", "        a4 += dy * w * x"]
    b += ["        rstd = gl.rsqrt(gl.sum(a2, 0) / C + eps)",
          "        cgx = rstd * (gl.sum(a4, 0) / C)"]
    for j in range(pf):
        b += load(j, "row + P", "        ", "n")
    for j in range(nch):
        b += [f"        x = {widen(f'x{j}')}", f"        dy = {widen(f'dy{j}')}",
              f"        w = wsm.index({j}).load(layout).to(gl.float32)",
              "        xhat = x * rstd",
              f"        gl.store(dx_ptr + row * C + {j} * CH + offs, (rstd * (dy * w - xhat * cgx)).to(gl.bfloat16))",
              f"        acc = dws.index({j})",
              "        acc.store(acc.load(layout) + dy * xhat)"]
    b += [f"    gl.store(ws_ptr + pid * C + {j} * CH + offs, dws.index({j}).load(layout))" for j in range(nch)]
    _KERNELS[nch, pf] = load_generated(f"gluon_regrow_{nch}_{pf}", b).k_rms_bwd
    return _KERNELS[nch, pf]


def compile_only(C: int, spt: int, warps: int, pf: int) -> None:
    """Compile for sm_90 without a GPU; print the shared memory, registers and local memory."""
    from triton.experimental.gluon._runtime import GluonASTSource

    ch = spt * 32 * warps
    sig = {"x_ptr": "*bf16", "dy_ptr": "*bf16", "w_ptr": "*bf16", "dx_ptr": "*bf16", "ws_ptr": "*fp32",
           "R": "i32", "C": "i32", "P": "i32", "eps": "fp32", "CH": "constexpr", "SPT": "constexpr",
           "WARPS": "constexpr"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 6)}
    source = GluonASTSource(kernel(C // ch, pf), sig, constexprs={"CH": ch, "SPT": spt, "WARPS": warps},
                            attrs=attrs)
    print(f"C={C} SPT={spt} warps={warps} pf={pf}: " + sm90_usage(source, warps), flush=True)


def regrow_fn(cfg: dict, t: dict, nsm: int):
    (R, C), ch = t["x"].shape, cfg["spt"] * 32 * cfg["warps"]
    k = kernel(C // ch, cfg["pf"])
    P = min(nsm, R)
    ws = torch.full((1, P, C), float("nan"), device=t["x"].device)

    def fn():
        k[(P,)](t["x"], t["dy"], t["w"], t["dx"], ws, R, C, P, t["eps"], CH=ch, SPT=cfg["spt"],
                WARPS=cfg["warps"], num_warps=cfg["warps"])
        k_combine[(triton.cdiv(C, 128), 1)](ws, t["out"], P, C, BP=16, BC=128, num_warps=4)
    return fn


CONFIGS = [dict(spt=8, warps=16, pf=0), dict(spt=4, warps=32, pf=0), dict(spt=8, warps=16, pf=1),
           dict(spt=4, warps=32, pf=1), dict(spt=8, warps=16, pf=2), dict(spt=4, warps=32, pf=2),
           dict(spt=8, warps=32, pf=0), dict(spt=4, warps=16, pf=0)]


def main() -> None:
    from benchmarks.sweep_norm_bwd_gluon import CONFIGS as SHARED_ROW_CONFIGS, gluon_fn

    for R, C, t, ref, copy, nsm in probe_shapes():
        time_checked(f"rmsnorm {R}x{C} shared_row {SHARED_ROW_CONFIGS[0]}",
                     lambda: gluon_fn(SHARED_ROW_CONFIGS[0], t, nsm), t, ref, copy, dx_tol=2)
        for cfg in CONFIGS:
            if C % (cfg["spt"] * 32 * cfg["warps"]) == 0:
                time_checked(f"rmsnorm {R}x{C} regrow {cfg}", lambda: regrow_fn(cfg, t, nsm), t, ref, copy, dx_tol=2)


if __name__ == "__main__":
    run_probe("sweep_norm_bwd_regrow.py", main,
              lambda: [compile_only(32768, c["spt"], c["warps"], c["pf"]) for c in CONFIGS])

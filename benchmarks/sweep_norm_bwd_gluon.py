"""A one-pass bf16 RMSNorm backward for wide rows written in Gluon (`triton.experimental.gluon`),
which allocates shared memory where Triton's `tl` language cannot (not part of the suite).

One persistent program a processor. The row's x and dy sit in shared memory as NCH chunks of
CH columns, w beside them (3 * 2 * C bytes: 192 KB at 32768 columns); dw's partial stays in
registers as NCH named accumulators (the source is generated). The first pass sums x * x and
x * dy * w from shared memory, waiting only for the chunks still being copied; the second
computes dx and dw's terms chunk by chunk and, as it finishes chunk j, starts the asynchronous
copy of the next row's chunk j into that slot. Every thread copies and reads the same elements
(one layout for the copy and the loads), so no barrier is needed between them. x and dy are
read from HBM once; a combine kernel sums the P partial rows of dw.

The rows are timed beside `sweep_norm_bwd_wide.py`'s forms (`regacc_ws`, `two_kernel`) and
checked against a float64 reference first, as there. Traffic counted as x and dy read once and
dx written once, as a share of the copy measured in the same run.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_norm_bwd_gluon.py
    .venv/bin/python benchmarks/sweep_norm_bwd_gluon.py --compile   # no GPU: compile for sm_90
    ... --modes   # the kernel stripped to its copies, or without dw's terms, or w: where time goes

`--modes` on the H200 (2026-12-03): the whole kernel 254.5 / 243.0 us (8 a thread on 16 warps /
4 on 32), its copies, waits and dx stores alone 217.2 / 219.9 us (0.89 / 0.88 of copy), without
dw's terms 227.6 / 243.4, without w 228.7 / 238.7.

Measured (H200, Triton 3.6, 2026-12-02): 0.76-0.80 of copy at 4096x32768 against 0.54 for
`regacc_ws` and 0.44 for two kernels (docs/performance-history.md, thirteenth session). fuser generates
this kernel from the plan since (fuser/codegen/shared_row.py). Triton 3.9 renamed the copy
(`async_copy_global_to_shared` -> `async_load`); the kernel takes whichever exists.
"""
import os
import sys

import torch
import triton

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.sweep_norm_bwd_wide import (k_combine, load_generated, make_fn, reference, regacc,  # noqa: E402
                                            run_probe, sm90_usage, tensors, time_checked, two)

_KERNELS: dict = {}
SHARED_LIMIT = 227 * 1024  # an H100 / H200 block's shared memory
# the RMSNorm backward probes' kernel up to its shared memory: parameters, program id, layouts
KERNEL_HEAD = ["@gluon.jit",
               "def k_rms_bwd(x_ptr, dy_ptr, w_ptr, dx_ptr, ws_ptr, R, C, P, eps,",
               "              CH: gl.constexpr, SPT: gl.constexpr, WARPS: gl.constexpr):",
               "    pid = gl.program_id(0)",
               "    layout: gl.constexpr = gl.BlockedLayout([SPT], [32], [WARPS], [0])",
               "    smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])"]


def kernel(nch: int, mode: str = "full"):
    """The kernel for rows of `nch` chunks (CH = SPT * 32 * WARPS columns each; C = nch * CH).
    `mode` strips it for a measurement (wrong results): "copy" keeps the copies, the waits and
    the stores of dx (x + dy) and drops the rest; "no_dw" drops dw's terms; "no_w" reads no w."""
    if (nch, mode) in _KERNELS:
        return _KERNELS[nch, mode]

    def copies(j: int, row: str, indent: str) -> list:
        """Start copying chunk j of `row` (none past the last row) as one copy group; `(offs >=
        0) & ...` makes the row's condition a mask of the chunk's shape."""
        mask = f"mask=(offs >= 0) & ({row} < R)"
        return [f"{indent}COPY(xs.index({j}), x_ptr + {row} * C + {j} * CH + offs, {mask})",
                f"{indent}COPY(dys.index({j}), dy_ptr + {row} * C + {j} * CH + offs, {mask})",
                f"{indent}cp.commit_group()"]

    b = ["from triton.experimental import gluon",
         "from triton.experimental.gluon import language as gl",
         "from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp",
         "COPY = getattr(cp, 'async_load', None) or cp.async_copy_global_to_shared", ""] + KERNEL_HEAD + [
         f"    xs = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CH], smem_layout)",
         f"    dys = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CH], smem_layout)",
         f"    wsm = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CH], smem_layout)",
         "    offs = gl.arange(0, CH, layout=layout)"]
    b += [f"    COPY(wsm.index({j}), w_ptr + {j} * CH + offs)" for j in range(nch)]
    b += ["    cp.commit_group()"]
    for j in range(nch):  # the first row's chunks, a copy group each
        b += copies(j, "pid", "    ")
    b += [f"    dw{j} = gl.zeros([CH], gl.float32, layout)" for j in range(nch)]
    b += ["    for row in range(pid, R, P):",
          "        a2 = gl.zeros([CH], gl.float32, layout)",
          "        a4 = gl.zeros([CH], gl.float32, layout)"]
    def loads(j: int) -> list:
        """Chunk j of x, dy and w from shared memory, in fp32 (w = 1 in the modes that read none)."""
        read = ("x", "xs"), ("dy", "dys"), ("w", "wsm")
        return [f"        {name} = {smem}.index({j}).load(layout).to(gl.float32)" for name, smem in read
                if name != "w" or mode in ("full", "no_dw")] + (["        w = 1.0"] if mode in ("copy", "no_w") else [])

    for j in range(nch):
        b += [f"        cp.wait_group({nch - 1 - j})  # chunk {j} of this row has landed"]
        if mode != "copy":
            b += loads(j) + ["        a2 += x * x", "        a4 += dy * w * x"]
    b += ["        rstd = gl.rsqrt(gl.sum(a2, 0) / C + eps)",
          "        cgx = rstd * (gl.sum(a4, 0) / C)",
          "        nxt = row + P"]
    for j in range(nch):
        b += loads(j)
        if mode == "copy":
            b += [f"        gl.store(dx_ptr + row * C + {j} * CH + offs, (x + dy).to(gl.bfloat16))"]
        else:
            b += ["        xhat = x * rstd",
                  f"        gl.store(dx_ptr + row * C + {j} * CH + offs, (rstd * (dy * w - xhat * cgx)).to(gl.bfloat16))"]
            b += [f"        dw{j} += dy * xhat"] if mode != "no_dw" else []
        b += copies(j, "nxt", "        ")
    b += ["    cp.wait_group(0)"]
    b += [f"    gl.store(ws_ptr + pid * C + {j} * CH + offs, dw{j})" for j in range(nch)]
    _KERNELS[nch, mode] = load_generated(f"gluon_rms_{nch}_{mode}", b).k_rms_bwd
    return _KERNELS[nch, mode]


def shared_bytes(C: int) -> int:
    return 3 * 2 * C


def compile_only(C: int, spt: int, warps: int, mode: str = "full") -> None:
    """Compile for sm_90 without a GPU; print the shared memory, registers and local memory."""
    from triton.experimental.gluon._runtime import GluonASTSource

    ch = spt * 32 * warps
    sig = {"x_ptr": "*bf16", "dy_ptr": "*bf16", "w_ptr": "*bf16", "dx_ptr": "*bf16", "ws_ptr": "*fp32",
           "R": "i32", "C": "i32", "P": "i32", "eps": "fp32", "CH": "constexpr", "SPT": "constexpr",
           "WARPS": "constexpr"}
    # as Triton's launcher specializes them: 16-byte aligned pointers, C a multiple of 16
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 4, 6)}
    source = GluonASTSource(kernel(C // ch, mode), sig, constexprs={"CH": ch, "SPT": spt, "WARPS": warps}, attrs=attrs)
    print(f"C={C} SPT={spt} warps={warps} {mode}: " + sm90_usage(source, warps), flush=True)


def gluon_fn(cfg: dict, t: dict, nsm: int, mode: str = "full"):
    (R, C), ch = t["x"].shape, cfg["spt"] * 32 * cfg["warps"]
    k = kernel(C // ch, mode)
    P = min(nsm, R)
    ws = torch.full((1, P, C), float("nan"), device=t["x"].device)

    def fn():
        k[(P,)](t["x"], t["dy"], t["w"], t["dx"], ws, R, C, P, t["eps"], CH=ch, SPT=cfg["spt"], WARPS=cfg["warps"],
                num_warps=cfg["warps"])
        k_combine[(triton.cdiv(C, 128), 1)](ws, t["out"], P, C, BP=16, BC=128, num_warps=4)
    return fn


CONFIGS = [dict(spt=8, warps=16), dict(spt=4, warps=32), dict(spt=8, warps=8), dict(spt=4, warps=16)]


def main() -> None:
    from benchmarks.sweep_pointwise import copy_gbps

    copy = copy_gbps()
    nsm = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"copy {copy:.0f} GB/s, {nsm} SMs; torch {torch.__version__}, triton {triton.__version__}")
    if "--modes" in sys.argv:  # the kernel stripped (wrong results: "BAD" rows), where time goes
        t = tensors(4096, 32768, False, "cuda", nsm)
        ref = tuple(r.float() for r in reference(t["x"], t["dy"], t["w"], t["b"], False, t["eps"]))
        for cfg in CONFIGS[:2]:
            for mode in ("full", "copy", "no_dw", "no_w"):
                time_checked(f"rmsnorm 4096x32768 gluon {mode:6s} {str(cfg):28s}",
                             lambda: gluon_fn(cfg, t, nsm, mode), t, ref, copy, dx_tol=2)
        return
    for R, C in ((4096, 32768), (8192, 16384)):
        t = tensors(R, C, False, "cuda", nsm)
        ref = tuple(r.float() for r in reference(t["x"], t["dy"], t["w"], t["b"], False, t["eps"]))
        runs = [("regacc_ws", regacc(4096, 32)[1]), ("two_kernel", two(32)[1])] + [("gluon", c) for c in CONFIGS]
        for form, cfg in runs:
            head = f"rmsnorm {R}x{C} {form:10s} {str(cfg):36s}"
            if form == "gluon" and (shared_bytes(C) > SHARED_LIMIT or C % (cfg["spt"] * 32 * cfg["warps"])):
                print(f"{head} skipped: {shared_bytes(C) // 1024} KB of shared memory or a partial chunk", flush=True)
                continue
            time_checked(head, lambda: gluon_fn(cfg, t, nsm) if form == "gluon" else make_fn(form, cfg, t),
                         t, ref, copy, dx_tol=2)
        t = ref = None  # (freed before the next shape's)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    run_probe("sweep_norm_bwd_gluon.py", main, lambda: [compile_only(32768, cfg["spt"], cfg["warps"]) for cfg in CONFIGS])

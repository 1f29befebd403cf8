"""The one-pass bf16 RMSNorm backward of `sweep_norm_bwd_gluon.py` with its copies made by the
Tensor Memory Accelerator (TMA) instead of every thread's `cp.async` (a probe, not part of the suite).

As there: one persistent program a processor, the row's x and dy in shared memory as NCH
chunks with w beside them, dw's partial in registers, a combine kernel for dw. Here x, dy and w
are seen as [rows * C / 256, 256] matrices, a chunk is a [CH / 256, 256] box of each, and one
thread issues each box's bulk copy; an mbarrier a chunk slot counts its bytes in, and the
program's warps wait on it (phase = the row's parity). Before the next row's copy into a slot,
a barrier of all warps ensures every warp is done reading it. What this probes: whether the
shared-row kernel (0.76-0.80 of copy at 4096x32768 whatever its copy schedule, twenty-first and
twenty-second sessions) is held by the threads' copies and their barriers.

    FUSER_SYSTEM_PYTHON=1 PYTHONPATH=. python3 benchmarks/sweep_norm_bwd_tma.py
    PYTHONPATH=/tmp/t36/site .venv/bin/python benchmarks/sweep_norm_bwd_tma.py --compile  # sm_90 compile
"""
import os
import sys

import torch
import triton

sys.path.append(os.path.join(os.path.dirname(__file__), ".."))  # (after PYTHONPATH: a tree to compare comes first)

from benchmarks.sweep_norm_bwd_wide import (k_combine, load_generated, probe_shapes, run_probe,  # noqa: E402
                                            sm90_usage, time_checked)

BOX_COLS = 256  # a TMA box's inner extent (at most 256 elements)
_KERNELS: dict = {}


def kernel(nch: int):
    """The kernel for rows of `nch` chunks of CR * 256 columns (CR = the box's rows)."""
    if nch in _KERNELS:
        return _KERNELS[nch]

    def issue(j: int, row: str, indent: str) -> list:
        pred = f"pred={row} < R"
        return [f"{indent}mbarrier.expect(bars.index({j}), 2 * CR * {BOX_COLS} * 2, {pred})",
                f"{indent}tma.async_copy_global_to_shared(xd, [{row} * NR + {j} * CR, 0], bars.index({j}), "
                f"xs.index({j}), {pred})",
                f"{indent}tma.async_copy_global_to_shared(dyd, [{row} * NR + {j} * CR, 0], bars.index({j}), "
                f"dys.index({j}), {pred})"]

    b = ["from triton.experimental import gluon",
         "from triton.experimental.gluon import language as gl",
         "from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma", "",
         "@gluon.jit",
         "def k_rms_bwd(xd, dyd, wd, dx_ptr, ws_ptr, R, C, P, eps, NR: gl.constexpr, CR: gl.constexpr,",
         "              WARPS: gl.constexpr):",
         "    pid = gl.program_id(0)",
         "    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [WARPS // 2, 2], [1, 0])",
         "    S: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)",
         f"    xs = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CR, {BOX_COLS}], S)",
         f"    dys = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CR, {BOX_COLS}], S)",
         f"    wsm = gl.allocate_shared_memory(gl.bfloat16, [{nch}, CR, {BOX_COLS}], S)",
         f"    bars = gl.allocate_shared_memory(gl.int64, [{nch + 1}, 1], mbarrier.MBarrierLayout())"]
    b += [f"    mbarrier.init(bars.index({j}), count=1)" for j in range(nch + 1)]
    b += ["    fence_async_shared()",
          f"    mbarrier.expect(bars.index({nch}), {nch} * CR * {BOX_COLS} * 2)"]
    b += [f"    tma.async_copy_global_to_shared(wd, [{j} * CR, 0], bars.index({nch}), wsm.index({j}))"
          for j in range(nch)]
    for j in range(nch):
        b += issue(j, "pid", "    ")
    b += [f"    dw{j} = gl.zeros([CR, {BOX_COLS}], gl.float32, L)" for j in range(nch)]
    b += ["    r_in = gl.arange(0, CR, layout=gl.SliceLayout(1, L))[:, None]",
          f"    c_in = gl.arange(0, {BOX_COLS}, layout=gl.SliceLayout(0, L))[None, :]",
          f"    offs = r_in * {BOX_COLS} + c_in",
          f"    mbarrier.wait(bars.index({nch}), 0)",
          "    phase = 0",
          "    for row in range(pid, R, P):",
          f"        a2 = gl.zeros([CR, {BOX_COLS}], gl.float32, L)",
          f"        a4 = gl.zeros([CR, {BOX_COLS}], gl.float32, L)"]

    def loads(j: int) -> list:
        return [f"        {name} = {smem}.index({j}).load(L).to(gl.float32)"
                for name, smem in (("x", "xs"), ("dy", "dys"), ("w", "wsm"))]

    for j in range(nch):
        b += [f"        mbarrier.wait(bars.index({j}), phase)"] + loads(j)
        b += ["        a2 += x * x", "        a4 += dy * w * x"]
    b += ["        rstd = gl.rsqrt(gl.sum(gl.sum(a2, 1), 0) / C + eps)",
          "        cgx = rstd * (gl.sum(gl.sum(a4, 1), 0) / C)",
          "        nxt = row + P"]
    for j in range(nch):
        b += loads(j)
        b += ["        xhat = x * rstd",
              f"        gl.store(dx_ptr + row * C + {j} * CR * {BOX_COLS} + offs, "
              "(rstd * (dy * w - xhat * cgx)).to(gl.bfloat16))",
              f"        dw{j} += dy * xhat",
              "        gl.thread_barrier()  # every warp is done reading this slot",
              "        fence_async_shared()"]
        b += issue(j, "nxt", "        ")
    b += ["        phase ^= 1"]
    b += [f"    gl.store(ws_ptr + pid * C + {j} * CR * {BOX_COLS} + offs, dw{j})" for j in range(nch)]
    _KERNELS[nch] = load_generated(f"gluon_tma_{nch}", b).k_rms_bwd
    return _KERNELS[nch]


def shared_layout():
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)


def descriptors(x, dy, w, cr: int):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return [TensorDescriptor.from_tensor(t.reshape(-1, BOX_COLS), [cr, BOX_COLS], shared_layout()) for t in (x, dy, w)]


def compile_only(C: int, cr: int, warps: int) -> None:
    """Compile for sm_90 without a GPU; print the shared memory, registers and local memory."""
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    x = torch.zeros(4, C, dtype=torch.bfloat16)
    descs = descriptors(x, x, x[0], cr)
    sig = {"xd": mangle_type(descs[0]), "dyd": mangle_type(descs[1]), "wd": mangle_type(descs[2]),
           "dx_ptr": "*bf16", "ws_ptr": "*fp32", "R": "i32", "C": "i32", "P": "i32", "eps": "fp32",
           "NR": "constexpr", "CR": "constexpr", "WARPS": "constexpr"}
    attrs = {(i,): [["tt.divisibility", 16]] for i in (3, 4, 6)}
    nch = C // (cr * BOX_COLS)
    source = GluonASTSource(kernel(nch), sig, constexprs={"NR": C // BOX_COLS, "CR": cr, "WARPS": warps},
                            attrs=attrs)
    print(f"C={C} CR={cr} warps={warps}: " + sm90_usage(source, warps), flush=True)


def tma_fn(cfg: dict, t: dict, nsm: int):
    (R, C), cr = t["x"].shape, cfg["cr"]
    k = kernel(C // (cr * BOX_COLS))
    P = min(nsm, R)
    ws = torch.full((1, P, C), float("nan"), device=t["x"].device)
    xd, dyd, wd = descriptors(t["x"], t["dy"], t["w"], cr)

    def fn():
        k[(P,)](xd, dyd, wd, t["dx"], ws, R, C, P, t["eps"], NR=C // BOX_COLS, CR=cr, WARPS=cfg["warps"],
                num_warps=cfg["warps"])
        k_combine[(triton.cdiv(C, 128), 1)](ws, t["out"], P, C, BP=16, BC=128, num_warps=4)
    return fn


# CR = WARPS // 2 rows of 256: one element row a warp pair, 4 elements a thread a chunk
CONFIGS = [dict(cr=8, warps=16), dict(cr=16, warps=32), dict(cr=4, warps=8)]


def main() -> None:
    from benchmarks.sweep_norm_bwd_gluon import CONFIGS as CP_CONFIGS, gluon_fn

    for R, C, t, ref, copy, nsm in probe_shapes():
        time_checked(f"rmsnorm {R}x{C} cp.async {CP_CONFIGS[3]}", lambda: gluon_fn(CP_CONFIGS[3], t, nsm),
                     t, ref, copy, dx_tol=2)
        for cfg in CONFIGS:
            time_checked(f"rmsnorm {R}x{C} tma {cfg}", lambda: tma_fn(cfg, t, nsm), t, ref, copy, dx_tol=2)


if __name__ == "__main__":
    run_probe("sweep_norm_bwd_tma.py", main, lambda: [compile_only(32768, c["cr"], c["warps"]) for c in CONFIGS])

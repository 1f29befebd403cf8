"""fuser in five minutes: define a fusion the nvFuser way, run it, and look inside.

Run with `scripts/demo`. On a machine without a GPU the generated Triton kernels run through
Triton's interpreter on CPU tensors; with a GPU they run on the GPU.
"""
import torch

import fuser
from fuser import DataType, FusionDefinition

device = "cuda" if torch.cuda.is_available() else "cpu"

# RMSNorm, written as nvFuser's Python frontend writes it: sizes are symbolic (-1), math in fp32.
with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
    w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
    xf = fd.ops.cast(x, DataType.Float)
    mean_sq = fd.ops.div(fd.ops.sum(fd.ops.mul(xf, xf), [-1], True), x.shape()[1])
    y = fd.ops.mul(fd.ops.mul(xf, fd.ops.rsqrt(fd.ops.add(mean_sq, 1e-6))), fd.ops.cast(w, DataType.Float))
    fd.add_output(fd.ops.cast(y, DataType.BFloat16))

print("== The fusion, in nvFuser's notation ==")
print(fd.fusion)

print("== repr(fd): Python that rebuilds the definition ==")
print(repr(fd))

for rows in (3, 50):  # new row counts reuse the same compiled kernel
    xt = torch.randn(rows, 700, dtype=torch.bfloat16, device=device)
    wt = torch.randn(700, dtype=torch.bfloat16, device=device)
    (out,) = fd.execute([xt, wt])
    ref = (xt.float() * torch.rsqrt(xt.float().pow(2).mean(-1, keepdim=True) + 1e-6) * wt.float()).bfloat16()
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)  # bf16: one rounding step apart
    print(f"rows={rows}: matches eager (max |difference| {(out.float() - ref.float()).abs().max().item():.4f})")

print("\n== Segments of the last execution ==")
for seg in fd.last_segments():
    print(seg.describe().splitlines()[0])

print("\n== The generated Triton kernel ==")
print(fd.last_triton_code())

print("== An input that does not fit the definition is an error naming what is wrong ==")
try:
    fd.execute([torch.randn(3, 700, device=device), wt])
except fuser.FusionInputError as e:
    print(f"{type(e).__name__}: {e}")

print("\n== Two inputs that disagree on one extent ==")
with FusionDefinition() as fd2:
    a = fd2.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.Float)
    b = fd2.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.Float)
    fd2.add_output(fd2.ops.add(a, b))
try:
    fd2.execute([torch.randn(6, 8, device=device), torch.randn(18, 8, device=device)])
except fuser.ExtentConflictError as e:
    print(f"{type(e).__name__}: {e}")

# %% [markdown]
# # Looking inside fuser
#
# What fuser makes of a program, step by step: the IR in nvFuser's notation, its domains and
# transforms, the segments an execution ran (generated Triton kernels and ATen calls, and why
# each cut was made), the Triton source, and, for a PyTorch function under `fuser.jit`, every
# graph from Dynamo's capture to the kernels. The notebook `examples/look_inside.ipynb` is this file
# run cell by cell (`python scripts/build_notebook.py`); without a GPU the kernels run through
# Triton's interpreter on CPU tensors.

# %%
import torch
import torch.nn.functional as F

import fuser
from fuser import DataType, FusionDefinition, ParallelType
from fuser.multidevice import DeviceMesh

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"

# %% [markdown]
# ## A definition and its IR
#
# A LayerNorm written with nvFuser's Python API. `-1` sizes are symbolic: the IR's extents are
# sympy symbols, bound per execution.

# %%
with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.BFloat16)
    w = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
    b = fd.define_tensor(shape=[-1], contiguity=True, dtype=DataType.BFloat16)
    xf = fd.ops.cast(x, DataType.Float)
    var, mean = fd.ops.var_mean(xf, [1], correction=0, keepdim=True)
    xhat = fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5)))
    y = fd.ops.add(fd.ops.mul(xhat, fd.ops.cast(w, DataType.Float)), fd.ops.cast(b, DataType.Float))
    fd.add_output(fd.ops.cast(y, DataType.BFloat16))

print(fd.fusion)

# %% [markdown]
# Transforms act on a tensor's loop domain and leave its logical domain as it is. Here each
# tensor's rows are split over the two devices of a mesh: an outer split by 2, its outer
# IterDomain parallelized on `mesh_x` (`deviceIdx.x`). `print_transforms` shows each tensor's
# domains (root, logical, allocation, loop) and the transforms between them.

# %%
with FusionDefinition() as fd_sharded:
    s_in = fd_sharded.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
    s_out = fd_sharded.ops.relu(s_in)
    fd_sharded.add_output(s_out)
    for tv in (s_in, s_out):
        tv.set_device_mesh(DeviceMesh([0, 1]))
        tv.outer_split(0, 2)
        tv.axis(0).parallelize(ParallelType.mesh_x)

print(fd_sharded.fusion.print_transforms())

# %% [markdown]
# `repr(fd)` is Python that rebuilds the definition (what `fd.repro_script_for(inputs)` puts in a
# bug report):

# %%
print(repr(fd))

# %% [markdown]
# ## Running it: segments and the generated kernel
#
# The first execution of an input signature segments the fusion, schedules each segment and
# generates its kernel; later row counts reuse it.

# %%
xt = torch.randn(6, 96, dtype=torch.bfloat16, device=device)
wt = torch.randn(96, dtype=torch.bfloat16, device=device)
bt = torch.randn(96, dtype=torch.bfloat16, device=device)
(out,) = fd.execute([xt, wt, bt])
ref = F.layer_norm(xt.float(), [96], wt.float(), bt.float(), 1e-5).bfloat16()
print("max |fuser - eager|:", (out.float() - ref.float()).abs().max().item())
for seg in fd.last_segments():
    print(seg.describe())

# %%
print(fd.last_triton_code())

# %% [markdown]
# ## Where a fusion is cut
#
# A matmul is not generated: it runs as an ATen call (an evaluator segment), with the pointwise
# work before and after it in generated kernels. Each segment says why it stands apart.

# %%
with FusionDefinition() as fd2:
    a = fd2.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
    m = fd2.define_tensor(shape=[-1, -1], contiguity=True, dtype=DataType.Float)
    h = fd2.ops.matmul(fd2.ops.relu(a), m)
    fd2.add_output(fd2.ops.tanh(h))

fd2.execute([torch.randn(8, 16, device=device), torch.randn(16, 4, device=device)])
for seg in fd2.last_segments():
    print(seg.describe(), "\n")

# %% [markdown]
# ## A PyTorch function under `fuser.jit`
#
# `fuser.explain` runs the function once (and its backward, where an output requires grad) and
# reports each graph: Dynamo's capture, the ATen forward and backward graphs, each fusion with its
# segments and Triton, and the ATen calls left between fusions. In a notebook the report renders
# as collapsible sections; `print(report)` gives the same as text.

# %%
def gelu_bias(x, bias):
    return F.gelu(x + bias, approximate="tanh")


xg = torch.randn(4, 64, device=device, requires_grad=True)
bg = torch.randn(64, device=device, requires_grad=True)
report = fuser.explain(gelu_bias, xg, bg)
report

# %% [markdown]
# ## Errors name what is wrong
#
# Each execution binds every symbolic extent once, in its own table: two inputs that disagree on
# one extent are an error naming both, never a kernel run on the wrong size.

# %%
with FusionDefinition() as fd3:
    p = fd3.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.Float)
    q = fd3.define_tensor(shape=[-1, 8], contiguity=True, dtype=DataType.Float)
    fd3.add_output(fd3.ops.add(p, q))

try:
    fd3.execute([torch.randn(6, 8, device=device), torch.randn(18, 8, device=device)])
except fuser.ExtentConflictError as e:
    print(f"{type(e).__name__}: {e}")

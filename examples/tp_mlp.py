"""A tensor-parallel MLP forward (Megatron style) on several devices.

The first linear is column-parallel (each rank holds a block of the rows of w1 and of b1, so
it computes a block of the hidden features), GELU runs on that block, and the second linear is
row-parallel (each rank holds the matching block of the columns of w2): its partial sums are
allreduced once, then b2 is added. fuser infers the sharding of every intermediate and the one
allreduce from the annotations on the inputs.

    torchrun --nproc-per-node=2 examples/tp_mlp.py
    python examples/tp_mlp.py                       # one process: a mesh of one device
"""
import torch
import torch.nn.functional as F

from fuser import FusionDefinition, ParallelType
from fuser.multidevice import Communicator, DeviceMesh, shard_tensor

comm = Communicator.default()
d, rank = comm.world_size, comm.rank
cuda = torch.cuda.is_available()
device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
t, h = 32, 64
mesh = DeviceMesh(torch.arange(d))

with FusionDefinition() as fd:
    x = fd.define_tensor([-1, h], contiguity=True)
    w1 = fd.define_tensor([4 * h, h], contiguity=True)
    b1 = fd.define_tensor([4 * h], contiguity=True)
    w2 = fd.define_tensor([h, 4 * h], contiguity=True)
    b2 = fd.define_tensor([h], contiguity=True)
    y = fd.ops.linear(x, w1, b1)
    # GELU, tanh approximation
    inner = fd.ops.mul(fd.ops.add(y, fd.ops.mul(fd.ops.mul(fd.ops.mul(y, y), y), 0.044715)), 0.7978845608028654)
    a = fd.ops.mul(fd.ops.mul(y, 0.5), fd.ops.add(fd.ops.tanh(inner), 1.0))
    fd.add_output(fd.ops.linear(a, w2, b2))
    for tv in (x, w1, b1, w2, b2):
        tv.set_device_mesh(mesh)
    for tv, axis in ((w1, 0), (b1, 0), (w2, 1)):  # column-parallel w1 and b1, row-parallel w2
        tv.outer_split(axis, d)
        tv.axis(axis).parallelize(ParallelType.mesh_x)

g = torch.Generator().manual_seed(0)
full = [torch.randn(shape, generator=g).to(device) / 4 for shape in ((t, h), (4 * h, h), (4 * h,), (h, 4 * h), (h,))]
out, = fd.execute([shard_tensor(v, tv) for v, tv in zip(full, fd.fusion.inputs())])

x_, w1_, b1_, w2_, b2_ = full
expected = F.linear(F.gelu(F.linear(x_, w1_, b1_), approximate="tanh"), w2_, b2_)
torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
if rank == 0:
    print(fd.cache.last_runtime.program)
    print("segments:", ", ".join(f"{s.kind.value} ({s.why})" for s in fd.last_segments()))
print(f"rank {rank}/{d}: tensor-parallel MLP [{t}, {h}] -> [{t}, {4 * h}] -> [{t}, {h}] matches eager")

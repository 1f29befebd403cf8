"""Row-parallel linear on several devices, overlapped with streams (the seed issue's program).

Each rank holds a block of the columns of x [t, 4h] and of the weight [h, 4h]; fuser multiplies
the local blocks into partial sums and allreduces them. The rows of x are split onto s streams:
chunk i's matmul overlaps chunk i-1's allreduce.

    torchrun --nproc-per-node=2 examples/row_parallel_linear.py
    python examples/row_parallel_linear.py          # one process: a mesh of one device

CUDA tensors use NCCL and bf16; CPU tensors use gloo and fp32.
"""
import torch
import torch.nn.functional as F

from fuser import DataType, FusionDefinition, ParallelType
from fuser.multidevice import Communicator, DeviceMesh, shard_tensor

comm = Communicator.default()  # torch.distributed from torchrun's environment, if any
d, rank = comm.world_size, comm.rank
cuda = torch.cuda.is_available()
device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
dtype = torch.bfloat16 if cuda else torch.float32
t, h, s = 48, 16 * d, 3

with FusionDefinition() as fd:
    x = fd.define_tensor(shape=[-1, 4 * h], contiguity=True, dtype=DataType.from_torch(dtype))
    w = fd.define_tensor(shape=[h, 4 * h], contiguity=True, dtype=DataType.from_torch(dtype))
    fd.add_output(fd.ops.linear(x, w))
    mesh = DeviceMesh(torch.arange(d))
    for tv in (x, w):
        tv.set_device_mesh(mesh)
    x.outer_split(0, s)  # rows: s chunks, one per stream
    x.axis(0).parallelize(ParallelType.stream)
    x.outer_split(2, d)  # columns: one block per device
    x.axis(2).parallelize(ParallelType.mesh_x)
    w.outer_split(1, d)
    w.axis(1).parallelize(ParallelType.mesh_x)

# the same full tensors on every rank (integer values: the result is exact)
g = torch.Generator().manual_seed(0)
x_full = torch.randint(-3, 4, (t, 4 * h), generator=g).to(dtype).to(device)
w_full = torch.randint(-3, 4, (h, 4 * h), generator=g).to(dtype).to(device)

out, = fd.execute([shard_tensor(x_full, fd.fusion.inputs()[0]), shard_tensor(w_full, fd.fusion.inputs()[1])])
expected = F.linear(x_full, w_full)
assert torch.equal(out, expected), (out - expected).abs().max()

if rank == 0:
    print("== The fusion after the pre-segmentation passes ==")
    print(fd.cache.prepared)
    print("== The host program ==")
    print(fd.cache.last_runtime.program)
print(f"rank {rank}/{d}: row-parallel linear [{t}, {4 * h}] x [{h}, {4 * h}]^T in {s} stream chunks "
      f"matches F.linear on the full tensors")

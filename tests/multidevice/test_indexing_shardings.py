"""Sharding through the indexing ops (the passes only: no processes). An axis the op leaves
whole keeps its device split; the indexed axis of the indexed tensor is gathered first."""
import torch

from fuser import DataType, FusionDefinition, ParallelType
from fuser.multidevice import Collective, Communication, DeviceMesh
from fuser.multidevice.sharding import device_axes
from fuser.passes import run_passes


def _sharded(tvs_axes, d=2):
    mesh = DeviceMesh(torch.arange(d))
    for tv, axis in tvs_axes:
        tv.set_device_mesh(mesh)
        tv.outer_split(axis, d)
        tv.axis(axis).parallelize(ParallelType.mesh_x)


def _comms(f):
    return [e for e in f.exprs if isinstance(e, Communication)]


def _output_sharded_axis(f):
    (out,) = f.outputs()
    axes = device_axes(out)
    return None if not axes else out.domain.logical.index(axes[ParallelType.mesh_x])


def test_index_select_keeps_the_sharding_of_the_other_axes():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        i = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.exp(fd.ops.index_select(x, i, 1)))
        _sharded([(x, 0)])
    f = run_passes(fd.fusion)
    assert _comms(f) == [] and _output_sharded_axis(f) == 0


def test_the_indexed_axis_is_gathered_first():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        i = fd.define_tensor([-1], contiguity=True, dtype=DataType.Int)
        fd.add_output(fd.ops.index_select(x, i, 1))
        _sharded([(x, 1)])
    f = run_passes(fd.fusion)
    assert [c.collective for c in _comms(f)] == [Collective.allgather]
    assert _output_sharded_axis(f) is None


def test_gather_and_embedding_rows_shard_with_their_index():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        g = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Int)
        w = fd.define_tensor([-1, -1], contiguity=True)
        picked = fd.ops.take_along_axis(x, g, 1)
        fd.add_output(fd.ops.add(fd.ops.embedding_fwd(g, w), fd.ops.broadcast(picked, [False, False, True])))
        _sharded([(x, 0), (g, 0)])
    f = run_passes(fd.fusion)
    assert _comms(f) == [] and _output_sharded_axis(f) == 0

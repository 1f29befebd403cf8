"""The sharding math: meshes, local extents, a rank's shard of a full tensor, stream chunks."""
import pytest
import torch

import fuser
from fuser import FusionDefinition, ParallelType
from fuser.multidevice import DeviceMesh, local_extents, shard_tensor, sharding_factors
from fuser.multidevice.sharding import StreamChunker, mesh_index, team
from tests.multidevice.cases import seed_definition


def test_mesh_1d_and_2d():
    m1 = DeviceMesh(torch.arange(4))
    assert m1.size == 4 and m1.shape == (4,) and repr(m1) == "DeviceMesh{0 1 2 3}"
    m2 = DeviceMesh(torch.arange(6).reshape(2, 3))
    assert m2.size == 6 and m2.shape == (2, 3)
    assert m2.size_of(ParallelType.mesh_x) == 3 and m2.size_of(ParallelType.mesh_y) == 2
    # rank 4 sits at row 1, column 1: its mesh_x team is row 1, its mesh_y team column 1
    assert mesh_index(m2, ParallelType.mesh_x, 4) == 1 and mesh_index(m2, ParallelType.mesh_y, 4) == 1
    assert team(m2, ParallelType.mesh_x, 4) == (3, 4, 5)
    assert team(m2, ParallelType.mesh_y, 4) == (1, 4)
    with pytest.raises(fuser.FuserError, match="rank 9 is not in"):
        team(m2, ParallelType.mesh_x, 9)


@pytest.mark.parametrize("devices,match", [
    ([[0, 1], [2]], "rows of a 2-D mesh must have one length"),
    ([-1, 0], "device ids are ranks, >= 0"),
    ([0, 0], "distinct device ids"),
])
def test_mesh_refuses_malformed_device_lists(devices, match):
    with pytest.raises(fuser.FusionDefinitionError, match=match):
        DeviceMesh(devices)


def test_a_cyclic_device_axis_is_refused():
    # element k on device k mod 2: the collectives join and cut blocks, so it is refused
    from fuser.passes.validate_shardings import validate_shardings

    x = sharded((8,), [(0, 2, True, ParallelType.mesh_x, 1)], DeviceMesh(torch.arange(2)))
    with pytest.raises(fuser.UnsupportedError, match="inner output of a split"):
        validate_shardings(x.fusion)


def sharded(shape, splits, mesh):
    """A one-input fusion; splits: (axis, factor, inner_split, parallel type of the new axis)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1] * len(shape), contiguity=True)
        fd.add_output(fd.ops.set(x))
        x.set_device_mesh(mesh)
        for axis, factor, inner, pt, which in splits:
            x.split(axis, factor, inner_split=inner)
            x.axis(axis + which).parallelize(pt)
    return fd.fusion.inputs()[0]


def test_shard_tensor_outer_split_gives_blocks():
    x = sharded((6, 4), [(1, 2, False, ParallelType.mesh_x, 0)], DeviceMesh(torch.arange(2)))
    full = torch.arange(24.).reshape(6, 4)
    assert torch.equal(shard_tensor(full, x, rank=0), full[:, :2])
    assert torch.equal(shard_tensor(full, x, rank=1), full[:, 2:])
    assert shard_tensor(full, x, rank=1).is_contiguous()


def test_shard_tensor_inner_split_gives_strided_rows():
    x = sharded((6, 4), [(0, 3, True, ParallelType.mesh_x, 1)], DeviceMesh(torch.arange(3)))
    full = torch.arange(24.).reshape(6, 4)
    for r in range(3):
        assert torch.equal(shard_tensor(full, x, rank=r), full[r::3])


def test_shard_tensor_on_a_2d_mesh_shards_two_axes():
    mesh = DeviceMesh(torch.arange(4).reshape(2, 2))
    x = sharded((4, 6), [(0, 2, False, ParallelType.mesh_y, 0), (2, 2, False, ParallelType.mesh_x, 0)], mesh)
    full = torch.arange(24.).reshape(4, 6)
    assert torch.equal(shard_tensor(full, x, rank=3), full[2:, 3:])
    assert torch.equal(shard_tensor(full, x, rank=1), full[:2, 3:])
    assert sharding_factors(x) == [2, 2]


def test_shard_tensor_uneven_is_an_input_error_naming_the_axis():
    x = sharded((5, 4), [(0, 2, False, ParallelType.mesh_x, 0)], DeviceMesh(torch.arange(2)))
    with pytest.raises(fuser.FusionInputError, match=r"T0 axis 0: size 5 does not divide evenly by .* 2"):
        shard_tensor(torch.zeros(5, 4), x, rank=0)


def test_local_extents_of_the_seed_input():
    fd = seed_definition(d=2, s=3, h=2)
    x = fd.fusion.inputs()[0]
    # logical extents stay global; the device split divides, the stream split only where allocated
    assert [str(e) for e in local_extents(x)] == ["i0", "4"]
    assert [str(e) for e in local_extents(x, with_streams=True)] == ["i0", "4"]  # allocation is whole
    from fuser.multidevice.transform import like, set_stream_allocation

    chunk = like(x)
    set_stream_allocation(chunk)
    assert [str(e) for e in local_extents(chunk, with_streams=True)] == ["ceilDiv(i0, 3)", "4"]
    assert [str(e) for e in local_extents(chunk)] == ["i0", "4"]


def test_stream_chunks_are_views_of_the_local_tensor():
    from fuser.evaluate import bind_inputs
    from fuser.multidevice.transform import like, set_stream_allocation

    fd = seed_definition(d=1, s=3, h=2)
    x = fd.fusion.inputs()[0]
    chunk = like(x)
    set_stream_allocation(chunk)
    for t, sizes in ((6, [2, 2, 2]), (7, [3, 3, 1])):
        local = torch.arange(t * 8.).reshape(t, 8)
        table = bind_inputs(fd.fusion, [local, torch.zeros(2, 8)])
        chunker = StreamChunker(chunk, table, tuple(local.shape), "T0")
        parts = [chunker(local, i) for i in range(3)]
        assert [p.shape[0] for p in parts] == sizes
        assert all(p.data_ptr() == local[sum(sizes[:i])].data_ptr() for i, p in enumerate(parts))
        parts[1].fill_(-1)
        assert (local[sizes[0]:sizes[0] + sizes[1]] == -1).all()


def test_precompiled_local_sizes_agree_with_the_sharding_math():
    """LocalSizes (a runtime's precompiled local_sizes) gives the same sizes, stream chunks
    included, and sends what the sharding math refuses (a negative extent, in a chunk's whole
    too) to it, so the user gets its FusionInputError."""
    from fuser.evaluate.binding import BindingTable
    from fuser.multidevice.sharding import LocalSizes, local_sizes
    from fuser.multidevice.transform import like, set_stream_allocation

    fd = seed_definition(d=1, s=3, h=2)
    x = fd.fusion.inputs()[0]
    chunk = like(x)
    set_stream_allocation(chunk)
    sizes = LocalSizes()
    for rows in (6, 7, 1):
        table = BindingTable({"i0": rows}, {"i0": "input 0"})
        for tv, streams, index in ((x, False, None), (chunk, True, None), (chunk, True, 0), (chunk, True, 2)):
            assert sizes(tv, table, streams, index) == local_sizes(tv, table, streams, index)
    # (i0 = -1: the chunk's ceilDiv(i0, 3) is 0, its whole i0 negative)
    for rows, tv, streams, index in ((-3, x, False, None), (-1, chunk, True, 1)):
        bad = BindingTable({"i0": rows}, {"i0": "input 0"})
        with pytest.raises(fuser.FusionInputError, match="negative"):
            local_sizes(tv, bad, streams, index)
        with pytest.raises(fuser.FusionInputError, match="negative"):
            sizes(tv, bad, streams, index)

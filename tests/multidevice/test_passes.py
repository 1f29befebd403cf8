"""The pre-segmentation passes on definitions for two devices (no processes needed: the passes
only rewrite the IR)."""
import re

import pytest
import torch

import fuser
from fuser import FusionDefinition, ParallelType
from fuser.multidevice import Collective, Communication, DeviceMesh
from fuser.passes import pre_segmentation_passes, run_passes
from tests.multidevice.cases import _row_parallel, seed_definition, tp_mlp_definition


def comms(fusion):
    return [e for e in fusion.exprs if isinstance(e, Communication)]


def test_the_passes_in_order():
    assert [p.__name__ for p in pre_segmentation_passes()] == [
        "validate_shardings", "propagate_shardings", "validate_meshes", "decompose_reshardings",
        "schedule_stream_loops", "stream_allocation"]


def test_single_device_fusion_is_left_alone():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        fd.add_output(fd.ops.exp(x))
    assert run_passes(fd.fusion) is fd.fusion


def test_user_definition_is_not_changed():
    fd = seed_definition(d=2)
    before = str(fd.fusion) + fd.fusion.print_transforms()
    after = run_passes(fd.fusion)
    assert after is not fd.fusion
    assert str(fd.fusion) + fd.fusion.print_transforms() == before


def test_seed_becomes_stream_parallel_partial_linear_and_allreduce():
    f = run_passes(seed_definition(d=2).fusion)
    linear, allreduce = f.exprs
    assert type(linear).__name__ == "LinearOp" and allreduce.collective is Collective.allreduce
    partial = linear.out
    assert allreduce.inputs[0] is partial and allreduce.out is f.outputs()[0]
    text = f.print_transforms()
    # the partial sum: stream-split rows, the contraction split onto the mesh, allocated by chunk
    line = next(l for l in str(f).splitlines() if l.startswith(f"T{partial.name}_"))
    assert re.search(r"istreamIdx\d+\{3\}", line) and re.search(r"rdeviceIdx\.x\d+\{2\}", line)
    block = text.split(f"T{partial.name}_g")[1]
    assert re.search(r"allocation domain : \(istreamIdx\d+\{3\}, iS\d+\{\( ceilDiv\(i0, 3\) \)\}", block)


def test_reduce_scatter_when_the_output_rows_are_sharded():
    f = run_passes(_row_parallel(2, DeviceMesh(torch.arange(2)), bias=True, out_rows_sharded=True).fusion)
    (rs,) = comms(f)
    assert rs.collective is Collective.reduce_scatter and rs.out_axis == 0
    # the bias is added once, after the reduction
    add = f.exprs[-1]
    assert type(add).__name__ == "BinaryOp" and add.inputs[0] is rs.out and add.out is f.outputs()[0]


def test_weight_sharding_wins_and_the_activation_is_resharded():
    """x sharded on rows, w on the contraction: the output takes w's sharding (a partial sum)
    and x moves its device axis from rows to the contraction: an all-to-all."""
    d, mesh = 2, DeviceMesh(torch.arange(2))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 8], contiguity=True)
        w = fd.define_tensor([3, 8], contiguity=True)
        fd.add_output(fd.ops.linear(x, w))
        for tv, axis in ((x, 0), (w, 1)):
            tv.set_device_mesh(mesh)
            tv.outer_split(axis, d)
            tv.axis(axis).parallelize(ParallelType.mesh_x)
    f = run_passes(fd.fusion)
    assert [c.collective for c in comms(f)] == [Collective.all_to_all, Collective.allreduce]
    a2a = comms(f)[0]
    assert (a2a.in_axis, a2a.out_axis) == (0, 1)


def test_tp_mlp_needs_one_allreduce():
    f = run_passes(tp_mlp_definition(2).fusion)
    assert [c.collective for c in comms(f)] == [Collective.allreduce]


def test_communication_prints_in_the_fusion():
    text = str(run_passes(_row_parallel(2, DeviceMesh(torch.arange(2)), bias=False).fusion))
    assert "communication(" in text and "collective = Allreduce" in text


@pytest.mark.parametrize("mutate,pattern", [
    (lambda x: x.outer_split(1, 3).axis(1).parallelize(ParallelType.mesh_x),
     r"T0: the device axis ideviceIdx\.x\d+\{3\} has extent 3, but DeviceMesh\{0 1\} has 2 devices"),
    (lambda x: (x.outer_split(1, 2).axis(1).parallelize(ParallelType.mesh_x),
                x.outer_split(0, 2).axis(0).parallelize(ParallelType.mesh_x)),
     r"T0: .* are both parallelized on deviceIdx\.x"),
    (lambda x: x.outer_split(1, 2).axis(1).parallelize(ParallelType.mesh_y),
     r"T0 axis .*deviceIdx\.y"),
])
def test_bad_annotations_are_definition_errors(mutate, pattern):
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 8], contiguity=True)
        fd.add_output(fd.ops.exp(x))
        x.set_device_mesh(DeviceMesh(torch.arange(2)))
        mutate(x)
    with pytest.raises(fuser.FusionDefinitionError, match=pattern):
        fd.execute([torch.ones(4, 4)])


def test_device_axis_without_a_mesh_is_a_definition_error():
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, 8], contiguity=True)
        fd.add_output(fd.ops.exp(x))
        x.outer_split(1, 1).axis(1).parallelize(ParallelType.mesh_x)
    with pytest.raises(fuser.FusionDefinitionError, match="no device mesh; call set_device_mesh"):
        fd.execute([torch.ones(4, 8)])


@pytest.mark.parametrize("op", ["var", "var_mean"])
def test_a_variance_over_a_sharded_axis_names_itself_and_the_way_round(op):
    """It said "a sharded reduction with 2 outputs" for a var, which has one."""
    mesh = DeviceMesh(torch.arange(2))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        out = getattr(fd.ops, op)(x, [1], 1)
        fd.add_output(out if op == "var" else out[0])
        x.set_device_mesh(mesh)
        x.outer_split(1, 2)
        x.axis(1).parallelize(ParallelType.mesh_x)
    with pytest.raises(fuser.UnsupportedError, match=r"var, var_mean, std or welford\) over a sharded axis.*sums"):
        run_passes(fd.fusion)

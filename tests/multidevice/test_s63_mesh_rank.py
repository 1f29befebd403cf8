"""A rank outside a tensor's DeviceMesh does not hold that tensor (nvFuser's semantics); fuser
runs no idle ranks, so such a rank gets an UnsupportedError naming the tensor, the mesh and the
rank, where it computed as if it were in the mesh. Ranks in the mesh still compute the result.
Meshes with ranks beyond the world, or the same rank twice, are refused too.

The two-rank cases run under torchrun (gloo on CPU tensors): this file is also the script each
rank runs (`main`), writing `rank<N>.json` with the result of every case.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pytest  # noqa: E402
import torch  # noqa: E402

import fuser  # noqa: E402
from fuser import FusionDefinition, ParallelType  # noqa: E402
from fuser.evaluate import bind_inputs  # noqa: E402
from fuser.multidevice import Communicator, DeviceMesh, shard_tensor  # noqa: E402
from tests.multidevice.rank_script import cases_of, check_case, run_cases  # noqa: E402


def relu_sum(mesh: DeviceMesh, sharded: bool = False) -> FusionDefinition:
    """y = relu(x) and z = sum(x, 1), every tensor on `mesh`; with `sharded`, x's rows split
    onto the mesh (y and z replicated: an allgather over the mesh brings them back whole)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        y = fd.ops.relu(x)
        z = fd.ops.sum(x, [1])
        fd.add_output(y)
        fd.add_output(z)
        for tv in (x, y, z):
            tv.set_device_mesh(mesh)
        if sharded:
            x.outer_split(0, mesh.size)
            x.axis(0).parallelize(ParallelType.mesh_x)
    return fd


def random_input(seed: int) -> torch.Tensor:
    """The same random tensor on every rank."""
    return torch.randn(6, 5, generator=torch.Generator().manual_seed(seed))


def expect_refused(fd, args, error, *named) -> None:
    try:
        fd.execute(args)
    except error as err:
        missing = [n for n in named if n not in str(err)]
        assert not missing, f"the error does not name {missing}: {err}"
    else:
        raise AssertionError(f"ran without an error; expected a {error.__name__} naming {named}")


def run_on(devices: list, sharded: bool, seed: int) -> None:
    """On a rank in `devices`: the eager result; on any other: the refusal naming T0, the mesh
    and the rank."""
    rank = Communicator.default().rank
    mesh = DeviceMesh(devices)
    fd = relu_sum(mesh, sharded)
    full = random_input(seed)
    if rank not in devices:
        expect_refused(fd, [full], fuser.UnsupportedError, "T0", repr(mesh), f"rank {rank}")
        return
    given = shard_tensor(full, fd.fusion.inputs()[0], rank) if sharded else full
    y, z = fd.execute([given])
    torch.testing.assert_close(y, torch.relu(full), rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(z, full.sum(1), rtol=1.3e-6, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Cases for two ranks (each runs on both).


def case_replicated_on_rank_0_only():
    run_on([0], sharded=False, seed=1)


def case_replicated_on_rank_1_only():
    run_on([1], sharded=False, seed=2)


def case_sharded_on_rank_1_only():
    run_on([1], sharded=True, seed=3)


def case_sharded_on_both_ranks_still_runs():
    run_on([0, 1], sharded=True, seed=4)


def case_a_mesh_beyond_the_world_is_refused():
    for devices in ([0, 2], [1, 2], [[0, 1], [2, 3]]):
        fd = relu_sum(DeviceMesh(devices))
        expect_refused(fd, [random_input(5)], fuser.FuserError, "T0", "needs", "runs 2")


def case_meshes_that_differ_are_refused_on_every_rank():
    """x sharded on [0, 1] (an allgather brings y back whole) beside w on [0]: refused on both
    ranks before any collective (found by review: refused on rank 1 alone, rank 0 went on into
    the allgather and waited for rank 1 as long as its process lived)."""
    both, zero = DeviceMesh([0, 1]), DeviceMesh([0])
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        w = fd.define_tensor([-1, -1], contiguity=True)
        y, v = fd.ops.relu(x), fd.ops.neg(w)
        fd.add_output(y)
        fd.add_output(v)
        for tv in (x, y):
            tv.set_device_mesh(both)
        for tv in (w, v):
            tv.set_device_mesh(zero)
        x.outer_split(0, 2)
        x.axis(0).parallelize(ParallelType.mesh_x)
    full = random_input(6)
    rank = Communicator.default().rank
    given = shard_tensor(full, fd.fusion.inputs()[0], rank)
    expect_refused(fd, [given, full], fuser.UnsupportedError, repr(zero), "rank 1", "one mesh")


def case_a_mesh_naming_a_rank_twice_is_refused():
    for devices in ([0, 0], [1, 1], [[0, 1], [1, 0]]):
        try:
            DeviceMesh(devices)
        except fuser.FusionDefinitionError as err:
            assert "distinct" in str(err) and str(devices) in str(err), str(err)
        else:
            raise AssertionError(f"DeviceMesh({devices}) was accepted")


CASES = cases_of(globals())


@pytest.mark.multidevice
@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks(rank_results, name):
    check_case(rank_results, name)


def test_meta_inference_as_a_rank_outside_the_mesh_is_refused():
    """The same check in one process: meta inference of a mesh-[0] fusion as rank 2 of a world
    of 3 is refused; as rank 0 it gives the shapes."""
    fd = relu_sum(DeviceMesh([0]))
    x = random_input(6)
    y, _ = fd.execute([x])
    torch.testing.assert_close(y, torch.relu(x), rtol=1.3e-6, atol=1e-5)
    runtime = fd.cache.last_runtime
    table = bind_inputs(fd.cache.prepared, [x])
    with pytest.raises(fuser.UnsupportedError, match=r"T0 lives on DeviceMesh\{0\}, which does not hold rank 2"):
        runtime.infer_meta([x], table, rank=2, world_size=3)
    y, z = runtime.infer_meta([x], table, rank=0, world_size=3)
    assert y.device.type == "meta" and y.shape == x.shape and z.shape == (6,)


if __name__ == "__main__":
    run_cases(CASES, sys.argv[1])

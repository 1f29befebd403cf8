"""An iota or a random op whose output is sharded on mesh_x gives each rank its block of the
unsharded values: it is computed whole, then sliced (its values index logical positions). Each
rank computed its block as if it were the whole: iota restarted at `start` on rank 1, and a
seeded random op drew the same numbers on both ranks (the sixty-third session's probe).

The two-rank cases run under torchrun (gloo on CPU tensors): this file is also the script each
rank runs (`run_cases`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pytest  # noqa: E402
import torch  # noqa: E402

from fuser import DataType, FusionDefinition, ParallelType  # noqa: E402
from fuser.multidevice import Communicator, DeviceMesh  # noqa: E402
from tests.multidevice.rank_script import cases_of, check_case, run_cases  # noqa: E402

MESH = [0, 1]


def _shard_rows(*tvs) -> None:
    for tv in tvs:
        tv.set_device_mesh(DeviceMesh(MESH))
        tv.outer_split(0, len(MESH))
        tv.axis(0).parallelize(ParallelType.mesh_x)


def _block(t: torch.Tensor, rank: int) -> torch.Tensor:
    rows = t.shape[0] // len(MESH)
    return t[rank * rows:(rank + 1) * rows]


def case_a_sharded_iota_is_its_block_of_the_whole():
    rank = Communicator.default().rank
    with FusionDefinition() as fd:
        n = fd.define_scalar(DataType.Int)
        y = fd.ops.iota(n, 10, 1, DataType.Int)
        _shard_rows(y)
        fd.add_output(y)
    (out,) = fd.execute([6])
    assert torch.equal(out, _block(torch.arange(10, 16), rank)), out


def case_a_sharded_random_op_draws_its_block_of_the_unsharded_draw():
    rank = Communicator.default().rank
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))

    def draw(sharded: bool) -> FusionDefinition:
        with FusionDefinition() as fd:
            t = fd.define_tensor([-1, -1], contiguity=True)
            r = fd.ops.rand_like(t, rng_seed=fd.define_scalar(1234, DataType.Int),
                                 rng_offset=fd.define_scalar(0, DataType.Int))
            y = fd.ops.add(t, r)
            if sharded:
                _shard_rows(t, r, y)
            fd.add_output(y)
        return fd

    (whole,) = draw(False).execute([x])
    (mine,) = draw(True).execute([_block(x, rank)])
    assert torch.equal(mine, _block(whole, rank)), (mine, _block(whole, rank))


CASES = cases_of(globals())


@pytest.mark.multidevice
@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks(rank_results, name):
    check_case(rank_results, name)


if __name__ == "__main__":
    run_cases(CASES, sys.argv[1])

"""A NaN survives a max or min over ranks, as in torch.amax/amin: gloo's MAX/MIN (and NCCL's,
believed) keep a NaN only when it is this rank's own, so a NaN in another rank's partial was
dropped. The communicator's allreduce and reduce-scatter, and the fusions that use them (a max
over a sharded axis, its output replicated or sharded), must give eager's values exactly: NaN
on one rank, on both, or on none, next to infinities. Sum and product already propagate NaN,
and integers have none; they stay as they were.

The two-rank cases run under torchrun (gloo on CPU tensors): this file is also the script each
rank runs (`main`), writing `rank<N>.json` with the result of every case.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pytest  # noqa: E402
import torch  # noqa: E402

from fuser import FusionDefinition, ParallelType  # noqa: E402
from fuser.multidevice import Communicator, DeviceMesh, shard_tensor  # noqa: E402
from tests.multidevice.rank_script import cases_of, check_case, run_cases  # noqa: E402

WORLD = 2
EAGER = {"max": torch.amax, "min": torch.amin, "sum": torch.sum, "mul": torch.prod}
NAN = float("nan")

# where the NaNs go: (rank, flat index) pairs; rank 1's at 5 is the one gloo used to drop
NAN_PLACES = {"none": (), "rank 1 only": ((1, 5),), "both ranks": ((0, 2), (1, 5), (0, 9), (1, 9))}


def partials(shape, nans, dtype=torch.float32, seed=0) -> list[torch.Tensor]:
    """Every rank's partial (the same list on every rank): random values, +inf and -inf at
    fixed places of rank 0's and rank 1's, NaN at `nans`."""
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(shape, generator=g) for _ in range(WORLD)]
    parts[0].view(-1)[0], parts[1].view(-1)[1] = float("inf"), float("-inf")
    parts[1].view(-1)[0], parts[0].view(-1)[1] = float("-inf"), float("inf")
    for rank, index in nans:
        parts[rank].view(-1)[index] = NAN
    return [p.to(dtype) for p in parts]


def same(actual, expected, what: str) -> None:
    """Equal values, NaN where eager has NaN (no tolerance: a max picks one of its inputs)."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def check_allreduce(op: str, where: str, dtype=torch.float32, async_op=True, strided=False) -> None:
    comm = Communicator.default()
    parts = partials((3, 4), NAN_PLACES[where], dtype)
    mine = parts[comm.rank].clone()
    if strided:  # a transposed view: reduced in a contiguous copy, copied back after the wait
        mine = mine.t().contiguous().t()
    comm.allreduce(mine, (0, 1), op, async_op=async_op).wait()
    same(mine, EAGER[op](torch.stack(parts), 0), f"allreduce {op} {dtype}, NaN on {where}")


def check_reduce_scatter(op: str, where: str, team=(0, 1), async_op=True) -> None:
    """Rows scattered in team order: with team (1, 0), rank 1 gets the first block."""
    comm = Communicator.default()
    parts = partials((4, 3), NAN_PLACES[where])
    out = torch.empty(2, 3)
    comm.reduce_scatter(out, parts[comm.rank], team, 0, op, async_op=async_op).wait()
    k = team.index(comm.rank)
    expected = EAGER[op](torch.stack(parts), 0)[2 * k:2 * k + 2]
    same(out, expected, f"reduce-scatter {op} over {team}, NaN on {where}")


def reduction(op: str, out_sharded: bool) -> FusionDefinition:
    """op(x, [1]) with x's columns sharded over both ranks: an allreduce of the partial
    results, or with `out_sharded` (the output's rows sharded) a reduce-scatter."""
    mesh = DeviceMesh(torch.arange(WORLD))
    with FusionDefinition() as fd:
        x = fd.define_tensor([-1, -1], contiguity=True)
        r = getattr(fd.ops, op)(x, [1])
        fd.add_output(r)
        for tv, axis in ((x, 1), (r, 0 if out_sharded else None)):
            tv.set_device_mesh(mesh)
            if axis is not None:
                tv.outer_split(axis, WORLD)
                tv.axis(axis).parallelize(ParallelType.mesh_x)
    return fd


def check_fusion(op: str, where: str, out_sharded: bool) -> None:
    """x [4, 8]: NaN in rank 0's columns (0-3) and rank 1's (4-7) as NAN_PLACES says, taking
    each rank's index in its own [4, 4] shard."""
    fd = reduction(op, out_sharded)
    g = torch.Generator().manual_seed(3)
    full = torch.randn(4, 2 * 4, generator=g)
    full[0, 1], full[1, 6], full[3, 0], full[3, 7] = float("inf"), float("inf"), float("-inf"), float("-inf")
    for rank, index in NAN_PLACES[where]:
        full[index // 4, 4 * rank + index % 4] = NAN
    (out,) = fd.execute([shard_tensor(full, fd.fusion.inputs()[0])])
    expected = EAGER[op](full, 1)
    if out_sharded:
        expected = shard_tensor(expected, fd.cache.prepared.outputs()[0])
    form = "reduce-scatter" if out_sharded else "allreduce"
    same(out, expected, f"fuser {op}(x, [1]) ({form}), NaN on {where}")


# ---------------------------------------------------------------------------------------------
# Cases for two ranks (each runs on both).


def all_pass(checks) -> None:
    """Run every check, then raise one AssertionError naming each that failed: a rank that
    stopped at its first failure would post fewer collectives than its peer, which would wait."""
    failed = []
    for check in checks:
        try:
            check()
        except AssertionError as err:
            failed.append(str(err).splitlines()[0])
    assert not failed, "\n".join(failed)


def case_allreduce_max_min():
    all_pass(lambda op=op, where=where: check_allreduce(op, where)
             for op in ("max", "min") for where in NAN_PLACES)


def case_allreduce_max_min_blocking_strided_and_other_dtypes():
    checks = []
    for op in ("max", "min"):
        checks += [lambda op=op: check_allreduce(op, "rank 1 only", async_op=False),
                   lambda op=op: check_allreduce(op, "both ranks", strided=True)]
        checks += [lambda op=op, dtype=dtype: check_allreduce(op, "rank 1 only", dtype)
                   for dtype in (torch.float64, torch.bfloat16)]
    all_pass(checks)


def case_reduce_scatter_max_min():
    checks = []
    for op in ("max", "min"):
        checks += [lambda op=op, where=where: check_reduce_scatter(op, where) for where in NAN_PLACES]
        checks += [lambda op=op: check_reduce_scatter(op, "both ranks", team=(1, 0)),
                   lambda op=op: check_reduce_scatter(op, "rank 1 only", async_op=False)]
    all_pass(checks)


def case_sum_and_product_propagate_nan_unchanged():
    checks = []
    for op in ("sum", "mul"):
        for where in ("rank 1 only", "both ranks"):
            checks += [lambda op=op, where=where: check_allreduce(op, where),
                       lambda op=op, where=where: check_reduce_scatter(op, where)]
    all_pass(checks)


def case_integer_max_min_unchanged():
    comm = Communicator.default()
    g = torch.Generator().manual_seed(4)
    parts = [torch.randint(-50, 50, (3, 4), generator=g, dtype=torch.int32) for _ in range(WORLD)]
    for op in ("max", "min"):
        mine = parts[comm.rank].clone()
        comm.allreduce(mine, (0, 1), op).wait()
        assert torch.equal(mine, EAGER[op](torch.stack(parts), 0)), f"int32 allreduce {op}: {mine}"


def case_fusion_max_min_over_a_sharded_axis():
    all_pass(lambda op=op, out_sharded=out_sharded, where=where: check_fusion(op, where, out_sharded)
             for op in ("max", "min") for out_sharded in (False, True) for where in NAN_PLACES)


CASES = cases_of(globals())


@pytest.mark.multidevice
@pytest.mark.parametrize("name", list(CASES))
def test_two_ranks(rank_results, name):
    check_case(rank_results, name)


if __name__ == "__main__":
    run_cases(CASES, sys.argv[1])

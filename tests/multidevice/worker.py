"""Run every case of `cases.py` on this rank, then check that a collective timeout (and on four
ranks a subgroup that one member never makes) becomes a
FuserError naming the collective and the ranks; write `rank<N>.json` with the results.

    python -m torch.distributed.run --nproc-per-node=2 tests/multidevice/worker.py --out DIR

`test_torchrun.py` launches it (gloo on CPU tensors); `--device cuda` runs the same cases with
NCCL on GPUs. Every collective has a timeout (FUSER_COLLECTIVE_TIMEOUT), so a broken case
fails instead of hanging.
"""
import argparse
import datetime
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from fuser.multidevice import CollectiveError, Communicator  # noqa: E402
from tests.multidevice.cases import CASES, CASES_4  # noqa: E402


def _times_out(call, named: tuple[str, ...]) -> dict:
    """Run the collective `call`, which must fail with a CollectiveError naming each of `named`
    within 30 s (not hang, not return, not raise anything else)."""
    start = time.time()
    try:
        call()
    except CollectiveError as err:
        msg = str(err)
        return {"ok": all(n in msg for n in named) and time.time() - start < 30, "error": msg}
    except Exception as err:  # noqa: BLE001
        return {"ok": False, "error": f"{type(err).__name__} is not a FuserError: {err}"}
    return {"ok": False, "error": "the allreduce returned without its peer"}


def timeout_check(comm: Communicator) -> dict:
    """Rank 0 allreduces over a 2-second gloo group; rank 1 never joins."""
    import torch.distributed as dist

    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=2))
    sub = Communicator.from_group(group)
    if comm.rank != 0:
        time.sleep(4)
        return {"ok": True, "note": "the absent rank"}
    return _times_out(lambda: sub.allreduce(torch.ones(4), (0, 1)).wait(), ("allreduce", "(0, 1)", "rank 0"))


def subgroup_timeout_check(comm: Communicator) -> dict:
    """On four ranks, rank 2 allreduces over the team (2, 3), whose subgroup rank 3 never makes:
    the making of the group waits FUSER_COLLECTIVE_TIMEOUT, not torch's 30 minutes."""
    os.environ["FUSER_COLLECTIVE_TIMEOUT"] = "2"
    if comm.rank != 2:
        time.sleep(4)
        return {"ok": True, "note": "not the waiting rank"}
    return _times_out(lambda: comm.allreduce(torch.ones(4), (2, 3)).wait(), ("(2, 3)",))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    comm = Communicator.default()  # initializes torch.distributed from torchrun's environment
    device = "cpu" if args.device == "cpu" else f"cuda:{torch.cuda.current_device()}"
    wanted = [c for c in args.cases.split(",") if c] or list(CASES)
    results = {"world_size": comm.world_size, "backend": comm.backend}
    for name in wanted:
        start = time.time()
        try:
            (CASES.get(name) or CASES_4[name])(device)
            results[name] = {"ok": True}
        except Exception:  # noqa: BLE001 - reported, not raised: the other cases still run
            results[name] = {"ok": False, "error": traceback.format_exc()}
        results[name]["seconds"] = round(time.time() - start, 2)
        comm.barrier()
    if not args.cases:
        results["collective_timeout"] = timeout_check(comm)
    elif comm.world_size == 4:
        results["subgroup_timeout"] = subgroup_timeout_check(comm)
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    sys.stdout.flush()
    os._exit(0)  # a process group left broken by the timeout check must not hang the exit


if __name__ == "__main__":
    main()

"""A test file that is also the script each rank runs under torchrun: `run_cases` (the ranks'
side) runs every `case_*` function of the file, each rank writing `rank<N>.json` with the
result of every case; `torchrun_results` (pytest's side) launches the file on `world` ranks
(gloo on CPU tensors) and reads those results back, so that one parametrized test checks each
case on every rank."""
import json
import os
import subprocess
import sys
import traceback

from fuser.multidevice import Communicator
from tests.multidevice.test_torchrun import ROOT, free_port


def cases_of(namespace: dict) -> dict:
    """A file's `case_*` functions by name, in definition order."""
    return {name[len("case_"):]: fn for name, fn in list(namespace.items()) if name.startswith("case_")}


def run_cases(cases: dict, out_dir: str) -> None:
    """On a rank: each case in turn (a failing case is reported, the others still run, every
    rank reaching the barrier after each), then this rank's results written and the process
    ended (the group is torn down with it)."""
    comm = Communicator.default()  # initializes torch.distributed from torchrun's environment
    results = {"world_size": comm.world_size}
    for name, case in cases.items():
        try:
            case()
            results[name] = {"ok": True}
        except Exception:  # noqa: BLE001 - reported, not raised: the other cases still run
            results[name] = {"ok": False, "error": traceback.format_exc()}
        comm.barrier()
    with open(os.path.join(out_dir, f"rank{comm.rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    sys.stdout.flush()
    os._exit(0)


def torchrun_results(script: str, out_dir, world: int = 2, timeout: int = 120) -> list:
    """Every rank's results of running `script` (a file using `run_cases`) under torchrun."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               FUSER_COLLECTIVE_TIMEOUT="20", OMP_NUM_THREADS="1")
    cmd = ["timeout", str(timeout), sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", os.path.abspath(script), str(out_dir)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout + 10)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    results = []
    for rank in range(world):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as f:
            results.append(json.load(f))
    return results


def check_case(results: list, name: str) -> None:
    """One case passed on every rank."""
    for rank, by_case in enumerate(results):
        assert by_case["world_size"] == len(results)
        assert by_case[name]["ok"], f"rank {rank}: {by_case[name].get('error')}"

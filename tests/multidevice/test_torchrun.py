"""The multi-device cases on two ranks under torchrun: one launch runs them all (gloo on CPU
tensors here; NCCL on GPUs in the `gpu` test), each rank writes its results, and every case
is reported as its own test."""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch

from tests.multidevice.cases import CASES, CASES_4

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "multidevice", "worker.py")
NAMES = list(CASES) + ["collective_timeout"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out_dir, device: str, timeout: int, nproc: int = 2, cases: str = "") -> list[dict]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               FUSER_COLLECTIVE_TIMEOUT="20", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           "--master-addr=127.0.0.1", f"--master-port={free_port()}", WORKER,
           "--out", str(out_dir), "--device", device] + (["--cases", cases] if cases else [])
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"torchrun did not finish in {timeout} s:\n{err.stdout}\n{err.stderr}")
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    results = []
    for rank in range(nproc):
        path = os.path.join(out_dir, f"rank{rank}.json")
        assert os.path.exists(path), f"rank {rank} wrote no results:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        with open(path) as f:
            results.append(json.load(f))
    return results


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory):
    return launch(tmp_path_factory.mktemp("torchrun_cpu"), "cpu", timeout=55)


@pytest.mark.multidevice
@pytest.mark.parametrize("name", NAMES)
def test_two_ranks_gloo(cpu_results, name):
    for rank, results in enumerate(cpu_results):
        assert results["world_size"] == 2 and "gloo" in results["backend"]
        r = results[name]
        assert r["ok"], f"rank {rank}: {r.get('error')}"


@pytest.mark.gpu
@pytest.mark.multidevice
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_ranks_nccl(tmp_path):
    results = launch(tmp_path, "cuda", timeout=300)
    failed = {f"rank {rank} {name}": r.get("error") for rank, res in enumerate(results)
              for name, r in res.items() if isinstance(r, dict) and not r["ok"]}
    assert not failed, "\n".join(f"{k}: {v}" for k, v in failed.items())


@pytest.mark.multidevice
def test_four_ranks_on_a_2x2_mesh_use_subgroups(tmp_path):
    results = launch(tmp_path, "cpu", timeout=55, nproc=4, cases=",".join(CASES_4))
    for rank, res in enumerate(results):
        for name in list(CASES_4) + ["subgroup_timeout"]:
            assert res[name]["ok"], f"rank {rank}: {res[name].get('error')}"


EXIT_SCRIPT = """
import atexit, os, sys
import torch, torch.distributed as dist
out = sys.argv[1]
# registered first, so it runs last: after fuser's own handler
atexit.register(lambda: open(os.path.join(out, f"rank{os.environ['RANK']}.txt"), "w").write(
    "destroyed" if not dist.is_initialized() else "still initialized"))
from fuser import DataType, FusionDefinition, ParallelType
from fuser.multidevice import DeviceMesh, shard_tensor
with FusionDefinition() as fd:
    x = fd.define_tensor([-1, -1], contiguity=True, dtype=DataType.Float)
    y = fd.ops.set(x)
    fd.add_output(y)
    x.set_device_mesh(DeviceMesh(torch.arange(2)))
    y.set_device_mesh(DeviceMesh(torch.arange(2)))
    x.outer_split(0, 2)
    x.axis(0).parallelize(ParallelType.mesh_x)
full = torch.arange(12.0).reshape(4, 3)
out_, = fd.execute([shard_tensor(full, fd.fusion.inputs()[0])])
assert torch.equal(out_, full)
"""


@pytest.mark.multidevice
def test_the_process_group_fuser_made_is_destroyed_at_exit(tmp_path):
    """Left to the interpreter's end, gloo's teardown aborted a run that had succeeded now and
    then (torchrun's rc 1, "terminate called without an active exception"; fifty-fifth session)."""
    script = tmp_path / "exit_check.py"
    script.write_text(EXIT_SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               FUSER_COLLECTIVE_TIMEOUT="20", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(script), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    for rank in range(2):
        assert (tmp_path / f"rank{rank}.txt").read_text() == "destroyed"

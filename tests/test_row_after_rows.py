"""`benchmarks/row_after_rows.py` on the CPU: the rows run, then the row's state report counts
the executor caches they made, each with its ready call, and no tuned launch left unsettled. It
runs in a process of its own: the report counts every live object of the process, and another
test's caches may be alive, or collected, meanwhile."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_row_after_another_reports_its_call_path():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "row_after_rows.py"), "softmax_bwd[8x32]",
                           "--after", "rmsnorm_bwd", "--contenders", "fuser,fuser-fd", "--device", "cpu",
                           "--calls", "2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.count("softmax_bwd[8x32] fuser.jit, a fresh call after the rows") == 3
    state = dict(line.split() for line in out.splitlines()
                 if len(line.split()) == 2 and line.split()[0].isidentifier())
    # rmsnorm's and softmax's forward and backward, each through fuser.jit and a definition
    assert int(state["caches"]) >= 4 and state["caches_without_ready_call"] == "0"
    assert int(state["ready_through_launch"]) >= 4 and state["ready_inline"] == "0"  # (inline: on a GPU only)
    assert state["tuned_not_settled"] == "0" and state["background_compiles_done"] == "True"

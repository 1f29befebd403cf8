"""The phase timer (fuser/timing.py) and how scripts/compile_time.py turns its totals into
table columns. No timings are asserted: a fake clock drives the timer."""
import importlib.util
from pathlib import Path

import pytest

from fuser import timing


@pytest.fixture
def clock(monkeypatch):
    """A clock that reads the next value of `ticks` at each call."""
    ticks = []
    monkeypatch.setattr(timing.time, "perf_counter", lambda: ticks.pop(0))
    monkeypatch.setattr(timing, "_enabled", True)
    timing.reset()
    yield ticks
    timing.reset()


def test_outer_pauses_while_inner_runs(clock):
    clock += [0.0, 1.0, 4.0, 6.0]
    with timing.phase("outer"):      # enters at 0
        with timing.phase("inner"):  # 1 .. 4
            pass
    # outer exits at 6: 1 s before the inner phase, 2 s after it
    assert timing.totals() == {"outer": 3.0, "inner": 3.0}
    assert timing.counts() == {"outer": 1, "inner": 1}


def test_a_phase_entered_twice_adds_up(clock):
    clock += [0.0, 2.0, 5.0, 6.0]
    for _ in range(2):
        with timing.phase("codegen"):
            pass
    assert timing.totals() == {"codegen": 3.0}
    assert timing.counts() == {"codegen": 2}


def test_disabled_timer_records_nothing(monkeypatch):
    monkeypatch.setattr(timing, "_enabled", False)
    timing.reset()
    with timing.phase("codegen"):
        pass
    assert timing.totals() == {} and timing.counts() == {}


def _script():
    path = Path(__file__).resolve().parents[1] / "scripts" / "compile_time.py"
    spec = importlib.util.spec_from_file_location("compile_time", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compile_time_columns_add_up():
    script = _script()
    phases = {"other": 0.5, "aot autograd": 0.25, "definition": 0.01, "codegen": 0.02, "load": 0.03,
              "first launch": 0.1, "autotune": 0.2, "runtime": 0.04}
    result = {"row": "jit:softmax_bwd", "first_call": sum(phases.values()), "second_call": 0.001,
              "phases": phases, "kernels": 2, "import_torch": 1.0, "import_fuser": 1.0,
              "triton_driver": 0.0, "triton_key": 0.0, "triton": None, "triton_hits": 0}
    jit = script.summarize(result)
    assert jit["ms"]["Dynamo+AOT"] == pytest.approx(750.0)
    assert sum(jit["ms"].values()) == pytest.approx(jit["first_ms"])
    assert jit["per_kernel_ms"] == pytest.approx((jit["first_ms"] - 750.0) / 2)
    fd = script.summarize(dict(result, row="fd:softmax_bwd"))
    assert fd["ms"]["Dynamo+AOT"] == 0.0 and fd["ms"]["runtime"] == pytest.approx(790.0)
    table = script.table([("jit:softmax_bwd", jit, script.summarize({"row": "x", "error": "boom"}))])
    assert "| jit:softmax_bwd | cold | 2 |" in table and "error: boom" in table
    header = [c.strip() for c in table.splitlines()[0].split("|")[1:-1]]
    cells = dict(zip(header, (c.strip() for c in table.splitlines()[2].split("|")[1:-1])))
    assert cells["autotune"] == "200.0"  # (timing the launch forms: a column of its own)
    assert cells["each fusion's first execute"] == "-"  # (none recorded)
    two = script.summarize(dict(result, fusion_firsts_ms=[411.2, 1160.4]))
    cells = dict(zip(header, (c.strip() for c in script.table([("jit:softmax_bwd", two, two)]).splitlines()[2]
                              .split("|")[1:-1])))
    assert cells["each fusion's first execute"] == "411 / 1160 !"  # (cold: over 1 s marked)


def test_compile_time_times_each_fusions_first_execute():
    """A backward row's forward and backward fusions each show their first execute, and only
    their first."""
    import torch

    from benchmarks import fuser_defs
    from fuser.runtime import FusionExecutorCache

    script, firsts = _script(), []
    original = FusionExecutorCache.execute
    try:
        script._time_first_executes(firsts)
        forward, backward = fuser_defs.rmsnorm_fwd(), fuser_defs.rmsnorm_bwd()
        x, w, dy = (torch.randn(*s, dtype=torch.bfloat16) for s in ((8, 64), (64,), (8, 64)))
        for _ in range(2):
            forward.execute([x, w])
            backward.execute([x, w, dy])
    finally:
        FusionExecutorCache.execute = original
    assert len(firsts) == 2 and all(ms > 0 for ms in firsts), firsts


def test_compile_model_reports_phases_and_kernels_per_model():
    """benchmarks/compile_model.py runs each model in a fresh process and prints one table row
    per model: its first forward + backward, fuser's phases, kernels generated and compiled."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "compile_model.py"), "--layers", "2",
                           "--device", "cpu"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split("|")[1].strip() for r in rows] == ["model", "train_block", "2-layer stack"]
    header = [c.strip() for c in rows[0].split("|")[1:-1]]
    stack = dict(zip(header, (c.strip() for c in rows[2].split("|")[1:-1])))
    assert int(stack["first_ms"]) > 0 and 0 < int(stack["compiled"]) < int(stack["kernels"])

"""`benchmarks/row_after_rows.py` on the CPU: the rows run, then the row's state report counts
the executor caches they made, each with its ready call, and no tuned launch left unsettled
(counted as what the run adds to the process: other tests' objects may be alive too)."""
import os
import sys


def test_a_row_after_another_reports_its_call_path(capsys):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from benchmarks import row_after_rows

    before = row_after_rows.call_path_state()
    row_after_rows.main(["softmax_bwd[8x32]", "--after", "rmsnorm_bwd", "--contenders", "fuser,fuser-fd",
                         "--device", "cpu", "--calls", "2"])
    out = capsys.readouterr().out
    assert out.count("softmax_bwd[8x32] fuser.jit, a fresh call after the rows") == 3
    after = row_after_rows.call_path_state()
    added = {key: after[key] - before[key] for key in before if isinstance(before[key], int)}
    # rmsnorm's and softmax's forward and backward, each through fuser.jit and a definition
    assert added["caches"] >= 4 and added["caches_without_ready_call"] <= 0
    assert added["ready_through_launch"] >= 4 and added["ready_inline"] == 0  # (inline: on a GPU only)
    assert added["tuned_not_settled"] <= 0 and after["background_compiles_done"]
    assert f"{'caches':28s} {after['caches']}" in out

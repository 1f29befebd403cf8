"""`scripts/compare_trees.py` on the CPU: a git ref exported beside this tree, its rows timed in
both trees, each run importing its own tree's fuser."""
import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def compare_trees():
    spec = importlib.util.spec_from_file_location("compare_trees", ROOT / "scripts" / "compare_trees.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def exported(compare_trees, tmp_path):
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    compare_trees.export("HEAD", tmp_path / "base")
    return tmp_path / "base"


def test_rows_timed_in_both_trees(compare_trees, exported, capsys):
    found = compare_trees.run(exported, "softmax_bwd[8x32]", 1, "fuser", ["--quick", "--device", "cpu"])
    assert [list(r) for r in found["base"]] == [[("softmax_bwd[8x32]", "fuser")]] == [list(r) for r in found["this"]]
    assert "| softmax_bwd[8x32] | fuser |" in capsys.readouterr().out


def test_each_run_imports_its_own_trees_fuser(compare_trees, exported):
    """An exported fuser that does not import leaves that tree's cells without fuser (the
    harness then has no implementation for them): the run stops there, naming the tree."""
    (exported / "fuser" / "__init__.py").write_text("raise ImportError('the exported tree')\n")
    with pytest.raises(SystemExit, match=r"base: softmax_bwd\[8x32\] fuser: no implementation"):
        compare_trees.run(exported, "softmax_bwd[8x32]", 1, "fuser", ["--quick", "--device", "cpu"])

"""scripts/build_notebook.py and the notebook it builds, examples/look_inside.ipynb: the cells of
a `# %%` file, their outputs, and the committed notebook kept in step with its source."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebook", ROOT / "scripts" / "build_notebook.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_notebook = _builder()


def test_cells_split_at_markers_and_markdown_loses_its_comment_marks():
    text = "'''a docstring before any cell'''\n# %% [markdown]\n# # Title\n#\n# Some *text*.\n\n" \
           "# %%\nx = 1\n\n# %%\n\n# %%\nprint(x)\n"
    assert build_notebook.read_cells(text) == [
        ("markdown", "# Title\n\nSome *text*."), ("code", "x = 1"), ("code", "print(x)")]


def test_a_cell_keeps_what_it_printed_and_its_last_value(tmp_path):
    source = tmp_path / "nb.py"
    source.write_text(
        "# %%\nclass Rich:\n    def __str__(self):\n        return 'as text'\n"
        "    def _repr_html_(self):\n        return '<b>as html</b>'\n\n"
        "# %%\nvalue = 6 * 7\nprint('printed', value)\nvalue + 1\n"
        "# %%\nRich()\n"
        "# %%\nvalue = None\n")
    cells = build_notebook.build(str(source))["cells"]
    assert [c["execution_count"] for c in cells] == [1, 2, 3, 4]
    printed, result = cells[1]["outputs"]
    assert printed == {"output_type": "stream", "name": "stdout", "text": ["printed 42\n"]}
    assert result["data"] == {"text/plain": ["43"]}
    (rich,) = cells[2]["outputs"]
    assert rich["data"] == {"text/plain": ["as text"], "text/html": ["<b>as html</b>"]}
    assert cells[0]["outputs"] == [] and cells[3]["outputs"] == []


def test_a_cell_that_raises_names_its_number(tmp_path):
    source = tmp_path / "nb.py"
    source.write_text("# %%\nx = 1\n# %%\n1 / 0\n")
    with pytest.raises(RuntimeError, match=r"code cell 2 raised ZeroDivisionError"):
        build_notebook.build(str(source))


def test_the_committed_notebook_has_its_sources_cells():
    """examples/look_inside.ipynb is rebuilt whenever examples/look_inside.py changes."""
    cells = build_notebook.read_cells((ROOT / "examples" / "look_inside.py").read_text())
    notebook = json.loads((ROOT / "examples" / "look_inside.ipynb").read_text())
    assert [(c["cell_type"], "".join(c["source"])) for c in notebook["cells"]] == cells, \
        "examples/look_inside.ipynb is stale: run `python scripts/build_notebook.py`"
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] for c in code[1:]), "every cell after the imports shows something"


def test_every_cell_of_the_example_runs():
    """The notebook's code, run as its builder runs it (on the CPU: Triton's interpreter)."""
    cells = build_notebook.build(str(ROOT / "examples" / "look_inside.py"))["cells"]
    outputs = {k: "".join("".join(o.get("text", []) + o.get("data", {}).get("text/plain", []))
                          for o in c["outputs"]) for k, c in enumerate(cells) if c["cell_type"] == "code"}
    text = "\n".join(outputs.values())
    for expected in ("%kernel {", "Outer split", "def nvfuser_fusion", "max |fuser - eager|: ",
                     "@triton.jit", "fuser.explain: 1 captured graph(s)", "ExtentConflictError"):
        assert expected in text
    explained = next(c for c in cells if "fuser.explain(" in "".join(c.get("source", [])))
    assert "text/html" in explained["outputs"][0]["data"]

"""Build a Jupyter notebook, outputs included, from a Python file of `# %%` cells.

A `# %%` line starts a code cell and `# %% [markdown]` a markdown cell (its lines are comments;
the leading `# ` is dropped): the "percent" format that editors and jupytext read. The code cells
run in order in one namespace, in this process: each keeps what it printed and, where its last
line is an expression, that value as a notebook would show it (`_repr_html_` where the value
has one, beside its text). A cell that raises stops the build with the cell's number.

    python scripts/build_notebook.py [SOURCE.py [OUT.ipynb]]   # default: examples/look_inside.py
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_cells(text: str) -> list[tuple[str, str]]:
    """(kind, source) per cell: kind "code" or "markdown"; text before the first marker is dropped."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            cells[-1][1].append(line)
    out = []
    for kind, lines in cells:
        if kind == "markdown":
            lines = [ln[2:] if ln.startswith("# ") else ln.lstrip("#") for ln in lines]
        source = "\n".join(lines).strip("\n")
        if source:
            out.append((kind, source))
    return out


def run_cell(source: str, namespace: dict, number: int) -> list[dict]:
    """Run one code cell; its outputs as nbformat 4 output dicts."""
    tree = ast.parse(source, filename=f"<cell {number}>")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(tree, f"<cell {number}>", "exec"), namespace)
        value = eval(compile(last, f"<cell {number}>", "eval"), namespace) if last else None
    outputs = []
    if stdout.getvalue():
        outputs.append({"output_type": "stream", "name": "stdout", "text": _lines(stdout.getvalue())})
    if value is not None:
        data = {"text/plain": _lines(str(value) if hasattr(value, "_repr_html_") else repr(value))}
        if hasattr(value, "_repr_html_"):
            data["text/html"] = _lines(value._repr_html_())
        outputs.append({"output_type": "execute_result", "execution_count": number,
                        "data": data, "metadata": {}})
    return outputs


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def build(source_path: str) -> dict[str, Any]:
    with open(source_path) as f:
        cells = read_cells(f.read())
    namespace: dict = {"__name__": "__main__"}
    notebook_cells, number = [], 0
    for kind, source in cells:
        if kind == "markdown":
            notebook_cells.append({"cell_type": "markdown", "metadata": {}, "source": _lines(source)})
            continue
        number += 1
        try:
            outputs = run_cell(source, namespace, number)
        except Exception as exc:
            raise RuntimeError(f"{source_path}: code cell {number} raised {type(exc).__name__}: {exc}") from exc
        notebook_cells.append({"cell_type": "code", "execution_count": number, "metadata": {},
                               "outputs": outputs, "source": _lines(source)})
    return {"cells": notebook_cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                         "language_info": {"name": "python"}}}


def main(argv: list[str]) -> None:
    source = argv[0] if argv else os.path.join(ROOT, "examples", "look_inside.py")
    out = argv[1] if len(argv) > 1 else os.path.splitext(source)[0] + ".ipynb"
    notebook = build(source)
    with open(out, "w") as f:
        json.dump(notebook, f, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(notebook['cells'])} cells")


if __name__ == "__main__":
    main(sys.argv[1:])

"""The local Databricks-notebook runner: parsing, widgets, display, cell errors."""

import pytest

from barrier_demo.notebook_runner import NotebookCellError, parse_notebook, run_notebook

NB = """# Databricks notebook source
# MAGIC %md
# MAGIC # Title

# COMMAND ----------

# MAGIC %pip install barrier-kafka

# COMMAND ----------

dbutils.widgets.text("n", "3")
n = int(dbutils.widgets.get("n"))

# COMMAND ----------

total = sum(range(n))
display(total)
"""


def test_parse_cells_and_magics():
    cells = parse_notebook(NB)
    assert [c.magic for c in cells] == ["md", "pip", None, None]
    assert cells[2].first_line.startswith("dbutils.widgets.text")


def test_not_a_notebook_is_refused():
    with pytest.raises(ValueError, match="not a Databricks source notebook"):
        parse_notebook("print(1)\n", "x.py")


def test_runs_cells_with_widget_overrides(tmp_path):
    path = tmp_path / "nb.py"
    path.write_text(NB)
    lines = []
    ns = run_notebook(str(path), spark=None, widgets={"n": "5"}, out=lines.append)
    assert ns["total"] == 10
    assert "10" in lines and any("skipped %pip" in line for line in lines)
    assert run_notebook(str(path), spark=None, out=lines.append)["total"] == 3


def test_cell_error_names_notebook_and_cell(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(NB + "\n# COMMAND ----------\n\nraise RuntimeError('boom')\n")
    with pytest.raises(NotebookCellError, match=r"bad.py cell 4 .*RuntimeError: boom"):
        run_notebook(str(path), spark=None, out=lambda s: None)

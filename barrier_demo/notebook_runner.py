"""Run Databricks source-format notebooks locally, cell by cell (driver, the user's process).

A notebook is a ``.py`` file starting with ``# Databricks notebook source``; cells are separated
by ``# COMMAND ----------``; ``# MAGIC %md`` cells are markdown (skipped); ``# MAGIC %pip`` and
other magics are skipped with a note (the runner's environment already has the package). Cells
run in one namespace holding minimal stand-ins for the Databricks globals the notebooks use:
``spark``, ``dbutils.widgets`` (text, dropdown, get, getArgument, removeAll) and ``display``.
Any cell error raises :class:`NotebookCellError` naming the notebook and cell.

Command line: ``python -m barrier_demo.notebook_runner notebooks/01_quickstart.py --widget k=v``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"


class NotebookCellError(RuntimeError):
    """A notebook cell raised; the message names the notebook, the cell and its first line."""


@dataclass(frozen=True)
class Cell:
    index: int
    source: str
    magic: Optional[str]  # "md", "pip", "sql", ... or None for Python

    @property
    def first_line(self) -> str:
        for line in self.source.splitlines():
            if line.strip():
                return line.strip()[:80]
        return ""


def parse_notebook(text: str, name: str = "<notebook>") -> List[Cell]:
    """Split a Databricks source-format notebook into cells."""
    if not text.startswith(HEADER):
        raise ValueError(f"{name}: not a Databricks source notebook (first line must be "
                         f"'{HEADER}')")
    body = text[len(HEADER):]
    cells = []
    for i, chunk in enumerate(body.split(SEPARATOR)):
        lines = chunk.strip("\n").splitlines()
        magic = None
        if lines and lines[0].startswith("# MAGIC %"):
            magic = lines[0][len("# MAGIC %"):].split()[0]
        cells.append(Cell(i, "\n".join(lines), magic))
    return [c for c in cells if c.source.strip()]


class Widgets:
    """``dbutils.widgets`` stand-in: values from ``overrides``, else the widget's default."""

    def __init__(self, overrides: Optional[Dict[str, str]] = None) -> None:
        self._overrides = dict(overrides or {})
        self._values: Dict[str, str] = {}

    def text(self, name: str, defaultValue: str = "", label: str = "") -> None:
        self._values[name] = self._overrides.get(name, defaultValue)

    def dropdown(self, name: str, defaultValue: str, choices, label: str = "") -> None:
        value = self._overrides.get(name, defaultValue)
        if value not in choices:
            raise ValueError(f"widget {name!r}: {value!r} is not one of {list(choices)}")
        self._values[name] = value

    def get(self, name: str) -> str:
        if name not in self._values:
            raise KeyError(f"widget {name!r} was not defined (call dbutils.widgets.text first)")
        return self._values[name]

    getArgument = get

    def removeAll(self) -> None:
        self._values.clear()


class DBUtils:
    def __init__(self, widgets: Widgets) -> None:
        self.widgets = widgets


def make_display(out: Callable[[str], None] = print) -> Callable:
    def display(obj, *args, **kwargs) -> None:
        """Stand-in for Databricks ``display``: tables as text, figures saved nowhere."""
        if hasattr(obj, "isStreaming") and hasattr(obj, "show"):
            if obj.isStreaming:
                out("<streaming DataFrame: display() of streams is Databricks-only>")
            else:
                out(obj._show_string(20, 40, False))  # classic and Spark Connect
        elif hasattr(obj, "to_string"):
            out(obj.to_string())
        else:
            out(repr(obj))
    return display


def run_notebook(path: str, spark, widgets: Optional[Dict[str, str]] = None,
                 out: Callable[[str], None] = print) -> Dict[str, object]:
    """Execute every Python cell of ``path`` in order; returns the final namespace."""
    text = Path(path).read_text()
    namespace: Dict[str, object] = {"__name__": "__databricks_notebook__", "spark": spark,
                                    "dbutils": DBUtils(Widgets(widgets)),
                                    "display": make_display(out)}
    for cell in parse_notebook(text, path):
        if cell.magic is not None:
            if cell.magic != "md":
                out(f"[{Path(path).name} cell {cell.index}] skipped %{cell.magic} cell")
            continue
        started = time.monotonic()
        try:
            exec(compile(cell.source, f"{path}#cell{cell.index}", "exec"), namespace)
        except Exception as exc:
            raise NotebookCellError(f"{path} cell {cell.index} ({cell.first_line!r}) failed: "
                                    f"{type(exc).__name__}: {exc}") from exc
        out(f"[{Path(path).name} cell {cell.index}] ok in {time.monotonic() - started:.1f}s")
    return namespace


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m barrier_demo.notebook_runner")
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--widget", action="append", default=[], help="name=value")
    parser.add_argument("--master", default="local[2]",
                        help="local[N], a spark:// standalone master or an sc:// Spark Connect "
                             "server")
    parser.add_argument("--result-json", default=None,
                        help="write each notebook's `result` here (a JSON list)")
    args = parser.parse_args(argv)
    widgets = dict(w.split("=", 1) for w in args.widget)
    from kafka_harness.spark import build_spark

    spark = build_spark("barrier-kafka-notebooks", master=args.master)
    results = []
    for nb in args.notebooks:
        results.append(run_notebook(nb, spark, widgets).get("result"))
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(results, f, default=str)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

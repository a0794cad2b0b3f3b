"""Every Databricks notebook in ``notebooks/`` runs green, cell by cell, against the local Spark and
the real test broker (``barrier_demo.notebook_runner``), and produces the outcome it promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from barrier_demo.notebook_runner import HEADER, SEPARATOR, parse_notebook, run_notebook
from barrier_core.option_spec import is_secret_key

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.py"))
LITERAL_OPTION = re.compile(r"""\.option\(\s*["']([^"']+)["']\s*,\s*["']([^"']*)["']""")


def check_quickstart(result: dict) -> None:
    assert result["records"] == 200
    ids = result["checkpoints"]
    assert len(ids) >= 2 and ids == list(range(1, len(ids) + 1))
    assert result["barrier_rows"] == 2 * len(ids)  # one barrier per partition per checkpoint


def check_exactly_once_kafka(result: dict) -> None:
    assert result["input_records"] == result["output_records"] == 1200
    assert result["duplicates"] == result["lost"] == result["unexpected"] == 0
    assert result["open_transactions"] == 0
    assert result["latest_checkpoint"] >= 2
    # the group's committed offsets are the latest completed checkpoint's, which covers the input
    assert result["group_offsets"] == result["checkpointed_offsets"]
    assert sum(result["checkpointed_offsets"].values()) == result["input_records"]


def check_exactly_once_files(result: dict) -> None:
    assert result["input_records"] == result["output_records"] == 1200
    assert result["duplicates"] == result["lost"] == result["unexpected"] == 0
    assert result["published_files"] > 0 and result["staged_files_left"] == 0
    assert result["plain_parquet_rows"] == 1200


def check_checkpoints_and_savepoints(result: dict) -> None:
    assert result["output_a"] == result["input_records"] == 800
    assert len(result["checkpoints_a"]) == 3  # state.checkpoints.num-retained
    assert result["stats_rows"] >= 4 and result["plot_bytes"] > 0
    assert result["savepoints"] == ["before-upgrade"]
    assert 0 < result["records_before_savepoint"] < 800
    assert result["output_restored"] == 800 - result["records_before_savepoint"]
    assert result["duplicates_restored"] == 0 and result["final_counts_match"]
    assert result["open_transactions_restored"] == 0  # restored behind the 2PC sink


def check_lingering_transactions(result: dict) -> None:
    assert result["lingering_found"] == result["aborted"] == 2
    assert result["left_open_after_abort"] == 0 and result["other_prefix_untouched"] == 1
    assert result["committed_readable_before"] < 10 == result["committed_readable_after"]


CHECKS = {
    "01_quickstart": check_quickstart,
    "02_exactly_once_kafka": check_exactly_once_kafka,
    "03_exactly_once_files": check_exactly_once_files,
    "04_checkpoints_and_savepoints": check_checkpoints_and_savepoints,
    "05_lingering_transactions": check_lingering_transactions,
}


def test_every_notebook_is_a_databricks_source_notebook_with_a_check():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"
    assert sorted(CHECKS) == [nb.stem for nb in NOTEBOOKS], \
        "every notebook needs an outcome check in CHECKS (and every check a notebook)"
    for nb in NOTEBOOKS:
        text = nb.read_text()
        assert text.startswith(HEADER + "\n") and SEPARATOR in text, nb.name
        cells = parse_notebook(text, str(nb))
        assert cells[0].magic == "md", f"{nb.name}: should open with a markdown cell"
        assert "dbutils.widgets" in text, f"{nb.name}: configuration should come from widgets"
        for name, value in LITERAL_OPTION.findall(text):
            assert not is_secret_key(name), f"{nb.name}: secret option {name!r} set in a cell"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook_runs_green(notebook, spark, bootstrap, tmp_path):
    lines = []
    namespace = run_notebook(str(notebook), spark,
                             widgets={"bootstrap_servers": bootstrap,
                                      "work_dir": str(tmp_path / "work")},
                             out=lines.append)
    assert any("skipped %pip" in line for line in lines), "the %pip cell should be skipped"
    result = namespace.get("result")
    assert isinstance(result, dict), f"{notebook.name} must leave its outcome in `result`"
    CHECKS[notebook.stem](result)
    run_id = namespace["RUN_ID"]
    left = [q.name for q in spark.streams.active if q.name and run_id in q.name]
    assert not left, f"{notebook.name} left streaming queries running: {left}"

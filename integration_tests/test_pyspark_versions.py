"""Issue 14: the PySpark versions users run (Databricks Runtime 17.3 LTS runs Apache Spark 4.0).

The whole suite runs on the PySpark this project installs (the newest). The compatibility suite
runs on the newest patch release of each older minor version (``kafka_harness.pyspark_versions``):
the unit tests, every source option, the notebooks, the operator with its state between batches in
the state backend (``runtime_store="backend"``), the operator's packed output against one row
per record (PySpark's own pandas-to-Arrow conversion decides it), the source's packed rows
against one row per record (PySpark's Arrow-to-pandas conversion decides what the function
sees) and the exactly-once pipeline
killed in the middle of a driver commit and restarted, each in a child pytest whose interpreter
imports that PySpark (Spark's Python workers use the same interpreter), against this session's
broker.

The matrix takes about 4 minutes per version, so it runs when ``BARRIER_KAFKA_PYSPARK_MATRIX=1``
(CI sets it in a second step of ``.ci/run``); ``BARRIER_KAFKA_PYSPARK_VERSIONS=4.0.5,4.1.4``
narrows it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from integration_tests.pipeline_support import assert_killed_mid_commit_then_exactly_once
from kafka_harness.pyspark_versions import COMPAT_VERSIONS, environment_python, pytest_summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPAT_SELECTION = [
    "tests",
    "integration_tests/test_source_options.py",
    "integration_tests/test_notebooks.py",
    "integration_tests/test_packed_output.py",
    "integration_tests/test_packed_source.py",
    "integration_tests/test_arrow_records.py",
    "integration_tests/test_key_group_ranges.py",
    "integration_tests/test_runtime_store.py",
    "integration_tests/test_jar_archives.py",
    "integration_tests/test_pyspark_versions.py::test_exactly_once_with_a_kill_on_this_pyspark",
]
VERSIONS = [v.strip() for v in os.environ.get("BARRIER_KAFKA_PYSPARK_VERSIONS",
                                              ",".join(COMPAT_VERSIONS)).split(",") if v.strip()]
CHILD_TIMEOUT_S = 1800


@pytest.mark.skipif(not os.environ.get("BARRIER_KAFKA_EXPECT_PYSPARK"),
                    reason="runs in the compatibility children (the newest PySpark has the "
                           "whole kill suite)")
def test_exactly_once_with_a_kill_on_this_pyspark(bootstrap, tmp_path):
    """The compact kill check, on the PySpark the child's interpreter imports (it must be the
    one ``BARRIER_KAFKA_EXPECT_PYSPARK`` names)."""
    import pyspark

    expected = os.environ["BARRIER_KAFKA_EXPECT_PYSPARK"]
    assert expected == pyspark.__version__, \
        f"this run should import PySpark {expected}, it imports {pyspark.__version__}"
    assert_killed_mid_commit_then_exactly_once(
        bootstrap, str(tmp_path), "ps" + pyspark.__version__.replace(".", ""))


@pytest.mark.skipif(not os.environ.get("BARRIER_KAFKA_PYSPARK_MATRIX"),
                    reason="the PySpark compatibility matrix (~4 min per version); "
                           "set BARRIER_KAFKA_PYSPARK_MATRIX=1")
@pytest.mark.parametrize("version", VERSIONS)
def test_compatibility_suite_on_older_pyspark(version, bootstrap, tmp_path):
    python = environment_python(version)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_HOME")}
    env.update(BARRIER_KAFKA_BOOTSTRAP=bootstrap, BARRIER_KAFKA_EXPECT_PYSPARK=version,
               PYTHONPATH=ROOT)
    log = tmp_path / "pytest.log"
    with open(log, "w") as out:
        done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "--basetemp", str(tmp_path / "t"), *COMPAT_SELECTION],
                              cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=CHILD_TIMEOUT_S)
    text = log.read_text()
    summary = pytest_summary(text)
    print(f"PySpark {version}: {summary}", file=sys.stderr)
    assert done.returncode == 0, f"PySpark {version}: {summary}; see {log}"
    assert " passed" in summary and " failed" not in summary, summary

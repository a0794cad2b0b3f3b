"""Issue 14: the pipeline through Spark Connect (Databricks' shared and serverless compute and
Spark's ``sc://`` clients). A real Spark Connect server started from the PySpark install
(``kafka_harness.spark_connect``) runs the queries; the client only defines them. The
exactly-once Kafka notebook runs through it: a run, a restart, then its own checks (every record
exactly once in read_committed output, no transaction open, the consumer group at the last
completed checkpoint, which covers the whole input).
"""

from __future__ import annotations

import pytest

from integration_tests.pipeline_support import run_notebook_process
from integration_tests.test_notebooks import CHECKS, NOTEBOOK_DIR
from kafka_harness.spark_connect import SparkConnectServer


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    server = SparkConnectServer(work_dir=str(tmp_path_factory.mktemp("spark-connect"))).start()
    yield server
    server.stop()


def test_exactly_once_notebook_through_spark_connect(connect_server, bootstrap, tmp_path):
    notebook = NOTEBOOK_DIR / "02_exactly_once_kafka.py"
    result = run_notebook_process(notebook, connect_server.url, bootstrap, str(tmp_path))
    CHECKS[notebook.stem](result)

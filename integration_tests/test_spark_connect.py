"""Issue 14: the pipeline through Spark Connect (Databricks' shared and serverless compute and
Spark's ``sc://`` clients). A real Spark Connect server started from the PySpark install
(``kafka_harness.spark_connect``) runs the queries; the client only defines them. The
exactly-once pipeline runs to the end through it (every record exactly once in read_committed
output, nothing open, the group at the last checkpoint), and so does the exactly-once Kafka
notebook (a run, a restart, its own checks).
"""

from __future__ import annotations

import uuid

import pytest

from integration_tests.pipeline_support import (assert_exactly_once, produce_input,
                                                run_notebook_process, run_pipeline)
from integration_tests.test_notebooks import CHECKS, NOTEBOOK_DIR
from kafka_harness.spark_connect import SparkConnectServer

RECORDS = 10_000
KEYS = 53


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    server = SparkConnectServer(work_dir=str(tmp_path_factory.mktemp("spark-connect"))).start()
    yield server
    server.stop()


def test_exactly_once_pipeline_through_spark_connect(connect_server, bootstrap, kafka_admin,
                                                     topic_factory, tmp_path):
    topic = produce_input(kafka_admin, bootstrap, RECORDS, KEYS)
    output = topic_factory(2, prefix="eo_connect")
    workdir = str(tmp_path)
    group, prefix = f"eo-sc-{uuid.uuid4().hex[:6]}", f"eo-sc-{uuid.uuid4().hex[:6]}"
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=2_500, extra_args=["--master", connect_server.url])
    assert rc == 0, f"pipeline through Spark Connect failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, RECORDS)


def test_exactly_once_notebook_through_spark_connect(connect_server, bootstrap, tmp_path):
    notebook = NOTEBOOK_DIR / "02_exactly_once_kafka.py"
    result = run_notebook_process(notebook, connect_server.url, bootstrap, str(tmp_path))
    CHECKS[notebook.stem](result)

"""Issue 14: the pipeline through Spark Connect (Databricks' shared and serverless compute and
Spark's ``sc://`` clients). A real Spark Connect server started from the PySpark install
(``kafka_harness.spark_connect``) runs the queries; the client only defines them. The
exactly-once Kafka notebook runs through it: a run, a restart, then its own checks (every record
exactly once in read_committed output, no transaction open, the consumer group at the last
completed checkpoint, which covers the whole input).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from barrier_kafka.spark_settings import STATELESS_AQE, recommended_spark_conf
from integration_tests.pipeline_support import run_notebook_process
from integration_tests.test_notebooks import CHECKS, NOTEBOOK_DIR
from kafka_harness.spark_connect import SparkConnectServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    server = SparkConnectServer(work_dir=str(tmp_path_factory.mktemp("spark-connect"))).start()
    yield server
    server.stop()


def test_exactly_once_notebook_through_spark_connect(connect_server, bootstrap, tmp_path):
    notebook = NOTEBOOK_DIR / "02_exactly_once_kafka.py"
    result = run_notebook_process(notebook, connect_server.url, bootstrap, str(tmp_path))
    CHECKS[notebook.stem](result)


def test_a_client_reads_the_servers_recommended_settings(connect_server):
    """``register``'s settings hint on a Connect client, which has no SparkContext: the server
    started with ``recommended_spark_conf()`` (``kafka_harness.spark_connect``) and the client
    finds none missing; a SQL setting the client changes for its session is found. The client
    runs in a process of its own: PySpark marks a process that opened a Connect session as a
    Connect client (``SPARK_CONNECT_MODE_ENABLED``), and the pipelines later tests start from
    this one would inherit that."""
    script = textwrap.dedent(f"""
        import json
        from pyspark.sql import SparkSession
        from barrier_kafka.spark_settings import STATELESS_AQE, missing_recommended
        client = SparkSession.builder.remote({connect_server.url!r}).getOrCreate()
        before = missing_recommended(client)
        client.conf.set(STATELESS_AQE, "true")
        print(json.dumps([before, missing_recommended(client)]))
        client.stop()
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == []
    assert after == ([STATELESS_AQE] if STATELESS_AQE in recommended_spark_conf() else [])

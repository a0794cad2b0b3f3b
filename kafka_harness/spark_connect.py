"""A real Spark Connect server for tests, started from the PySpark install (its
``SparkConnectServer`` class, the one ``sbin/start-connect-server.sh`` runs), in the foreground in
its own process group, on loopback, with ``local[2]``.

Clients connect with ``SparkSession.builder.remote(server.url)`` (the ``connect`` extra's gRPC
packages). The server's Python workers run this interpreter with the project root on
``PYTHONPATH``, as a cluster's executors would have the package installed. Every wait is bounded
and fails naming the log to read.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from barrier_kafka.spark_settings import recommended_spark_conf
from kafka_harness.spark_cluster import _free_port, spark_home

START_TIMEOUT_S = 180.0
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServerStartError(RuntimeError):
    """The Spark Connect server did not come up."""


class SparkConnectServer:
    """``SparkConnectServer().start()``; ``url`` is the ``sc://`` address for clients."""

    def __init__(self, work_dir: Optional[str] = None, master: str = "local[2]") -> None:
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="spark-connect-"))
        self.port = _free_port()
        self.master = master
        self._proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "connect-server.log"

    def start(self) -> "SparkConnectServer":
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH"))
                                              if p))
        conf = {"spark.connect.grpc.binding.port": str(self.port),
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.pyspark.python": sys.executable, "spark.ui.enabled": "false",
                "spark.driver.memory": "2g", "spark.python.worker.reuse": "true",
                "spark.sql.streaming.stopTimeout": "60s", **recommended_spark_conf()}
        cmd = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", self.master,
               "--class", SERVER_CLASS, "--name", "barrier-kafka tests (Spark Connect)"]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd + ["spark-internal"], env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          cwd=str(self.dir))
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ConnectServerStartError(f"the Spark Connect server exited with "
                                              f"{self._proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise ConnectServerStartError(f"the Spark Connect server did not listen on port "
                                      f"{self.port} within {START_TIMEOUT_S:.0f}s; see "
                                      f"{self.log_path}")

    def stop(self) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGTERM)
            self._proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc = None

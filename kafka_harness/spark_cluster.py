"""A real Spark standalone cluster for tests: a master and workers started from the PySpark
install (``bin/spark-class``), on loopback, each in its own process group.

Behaviour that only separate executors show (speculative attempts, task retries on another
executor, executor loss) is tested against this instead of ``local[2]``. Every wait is bounded and
fails naming the log to read.

The master's ports are picked free just before it starts, so another process (a broker or a
Spark driver of a parallel test worker) can take one in between. Spark would then move the
master to the next port while the workers dial the one they were given, and the cluster never
comes up; the master therefore starts with port retries off, exits on a taken port, and starts
again on new ones (:data:`MASTER_ATTEMPTS`), and the workers start only once its UI reports the
master URL they are given. Its REST submission server (a fixed port, 6066) is off: the tests
submit through the master URL, and a second cluster would find that port taken.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import List, Optional

from kafka_harness.processes import command_line, parent_pid

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
#: Master starts on fresh ports before giving up (each failed one: a port taken meanwhile).
MASTER_ATTEMPTS = 3


class ClusterStartError(RuntimeError):
    """The standalone master or a worker did not come up."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    """The installed PySpark's Spark home, or the tests' compiled copy of it when the pytest
    plugin set ``SPARK_HOME`` to that (:func:`barrier_kafka.compiled_spark_home`)."""
    from barrier_kafka.spark_home import home_path, installed_home

    compiled = str(home_path(installed_home()))
    return compiled if os.environ.get("SPARK_HOME") == compiled else str(installed_home())


#: What an executor's JVM runs (standalone mode), in its command line.
EXECUTOR_BACKEND = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executor_process(pid: int) -> Optional[int]:
    """The executor JVM that process ``pid`` runs under (a Python worker, its daemon, or the
    JVM itself), or None when it runs under none (the driver, a process that has exited)."""
    seen = 0
    while pid and pid > 1 and seen < 32:
        if EXECUTOR_BACKEND in command_line(pid):
            return pid
        pid, seen = parent_pid(pid), seen + 1
    return None


class StandaloneCluster:
    """``StandaloneCluster(workers=2).start()``; ``url`` is the ``spark://`` master URL.

    Parameters
    ----------
    workers : int
        Worker processes (one executor each for an application).
    cores, memory : int, str
        What each worker offers.
    """

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g",
                 work_dir: Optional[str] = None) -> None:
        self.workers, self.cores, self.memory = workers, cores, memory
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="spark-cluster-"))
        self.port, self.ui_port = _free_port(), _free_port()
        self._master: Optional[subprocess.Popen] = None
        self._workers: List[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str, host: str = "127.0.0.1",
               **extra_env: str) -> subprocess.Popen:
        env = dict(os.environ, SPARK_HOME=spark_home(), SPARK_LOCAL_IP=host,
                   SPARK_LOG_DIR=str(self.dir), SPARK_WORKER_DIR=str(self.dir / "work"),
                   **extra_env)
        log = open(self.dir / f"{name}.log", "ab")
        try:
            return subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args],
                                    env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            log.close()

    def _master_status(self) -> dict:
        """The master UI's JSON status ({} while nothing answers as a master there)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json", timeout=2) as r:
                status = json.load(r)
        except (OSError, ValueError):
            return {}
        return status if isinstance(status, dict) else {}

    def _alive_workers(self) -> int:
        status = self._master_status()
        if status.get("url") != self.url:
            return -1
        try:
            return int(status.get("aliveworkers", 0))
        except (TypeError, ValueError):
            return -1

    def _start_master(self, deadline: float, timeout_s: float) -> None:
        """Start the master and wait until its UI reports :attr:`url`; on a port taken since it
        was picked the master exits (port retries off) and starts again on new ports."""
        for _ in range(MASTER_ATTEMPTS):
            self._master = self._spawn("master", "org.apache.spark.deploy.master.Master",
                                       "--host", "127.0.0.1", "--port", str(self.port),
                                       "--webui-port", str(self.ui_port),
                                       SPARK_MASTER_OPTS="-Dspark.port.maxRetries=0 "
                                       "-Dspark.master.rest.enabled=false")
            while self._master.poll() is None:
                if self._master_status().get("url") == self.url:
                    return
                if time.monotonic() > deadline:
                    self.stop()
                    raise ClusterStartError(
                        f"Spark standalone master not up within {timeout_s:.0f}s; see "
                        f"{self.dir / 'master.log'}")
                time.sleep(0.2)
            logger.warning("Spark standalone master exited on ports %d/%d (taken since picked?); "
                           "starting it on new ones", self.port, self.ui_port)
            self.port, self.ui_port = _free_port(), _free_port()
        self._master = None
        raise ClusterStartError(f"Spark standalone master exited {MASTER_ATTEMPTS} times at its "
                                f"start; see {self.dir / 'master.log'}")

    def start(self, timeout_s: float = START_TIMEOUT_S) -> "StandaloneCluster":
        self.dir.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        self._start_master(deadline, timeout_s)
        for i in range(self.workers):
            work = self.dir / f"worker-{i}"
            work.mkdir(exist_ok=True)
            # Each worker on its own loopback address: Spark never runs a speculative copy on
            # a host that already runs an attempt of the task, so one host would never speculate.
            host = f"127.0.0.{i + 1}"
            self._workers.append(self._spawn(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", host,
                "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(_free_port()), "--work-dir", str(work), self.url,
                host=host))
        while self._alive_workers() < self.workers:
            dead = [p for p in [self._master, *self._workers] if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                raise ClusterStartError(
                    f"Spark standalone cluster not up within {timeout_s:.0f}s "
                    f"({len(dead)} processes exited); see the logs in {self.dir}")
            time.sleep(0.5)
        logger.info("Spark standalone cluster %s up with %d workers", self.url, self.workers)
        return self

    def executor_dirs(self) -> List[Path]:
        """Every executor any application had on this cluster, as the folders the workers made
        for them (``worker-<i>/app-<id>/<executor id>``); an executor the master launched to
        replace a lost one has a folder of its own."""
        return sorted(p for p in self.dir.glob("worker-*/app-*/*") if p.is_dir())

    def stop(self) -> None:
        for p in [*self._workers, self._master]:
            if p is not None and p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)
        self._workers, self._master = [], None

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

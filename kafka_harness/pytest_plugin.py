"""pytest fixtures for the real services: Kafka broker, S3 server, local Spark.

Loaded by the repository's root ``conftest.py``. Session-scoped: one broker, one S3 server and one
SparkSession per test process. ``BARRIER_KAFKA_BOOTSTRAP`` reuses an already running broker.

The suite runs in parallel workers (pytest-xdist, ``-n 2 --dist loadfile`` in ``setup.cfg``):
each worker is a test process with its own broker, S3 server and SparkSession, and runs whole
test files, so a module's fixtures (a standalone cluster, a broker of another version) are made
once. The controller prepares what every Spark driver shares (the compiled Spark home, the
class archive, the library's bytecode) before the workers start; they inherit its environment.
"""

from __future__ import annotations

import os
import uuid

import pytest

from barrier_kafka.spark_home import SparkHomeError, compiled_spark_home
from kafka_harness import jvm_startup
from kafka_harness.bytecode import compile_library
from kafka_harness.broker import KafkaBroker
from kafka_harness.s3 import S3Server
from kafka_harness.spark import build_spark
from kafka_harness.topics import create_topic


_SUMMARY_LINES: list = []  # lines for the terminal summary (fixture output is captured)
_STARTED: list = []  # the controller's session start (time.monotonic())


def pytest_terminal_summary(terminalreporter):
    """Print the test broker's start time and peak memory and the Spark driver class archive
    after the run (issue figures)."""
    for line in _SUMMARY_LINES:
        terminalreporter.write_line(line)


def pytest_sessionstart(session):
    """Spark drivers started by the tests (in this process and in every pipeline child) run
    from a Spark home whose Python workers import PySpark as bytecode
    (:func:`barrier_kafka.compiled_spark_home`; unless ``SPARK_HOME`` is set), map one class
    archive and compile with the JIT's first tier (:mod:`kafka_harness.jvm_startup`); the home
    and the archive are written on the first run on a machine. The library's bytecode is
    written first (:mod:`kafka_harness.bytecode`), so no worker compiles the library.

    In a parallel worker this does nothing: the controller did it before starting the workers,
    whose environment (``SPARK_HOME``, the quick JIT) is the controller's."""
    import time

    if _is_worker(session.config):
        return
    _STARTED.append(time.monotonic())

    compile_library()
    if not os.environ.get("SPARK_HOME"):
        try:
            os.environ["SPARK_HOME"] = str(compiled_spark_home())
        except SparkHomeError as exc:  # the installed home works too, only slower
            _SUMMARY_LINES.append(f"[kafka-harness] no compiled Spark home: {exc}")
    home = os.environ.get("SPARK_HOME") or "the installed PySpark's"
    _SUMMARY_LINES.append(f"[kafka-harness] Spark home: {home}")
    os.environ[jvm_startup.QUICK_JIT_ENV] = "1"
    path = jvm_startup.archive_path()
    reused = path is not None and path.is_file()
    start = time.monotonic()
    archive = jvm_startup.ensure_archive()
    took = f"written in {time.monotonic() - start:.0f}s"
    what = f"{archive} ({'reused' if reused else took})" if archive else \
        "none (drivers load every class)"
    _SUMMARY_LINES.append(f"[kafka-harness] Spark driver class archive: {what}")


def _is_worker(config) -> bool:
    """True in a pytest-xdist worker process (it has the controller's ``workerinput``)."""
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session):
    """A parallel worker hands its summary lines (its broker's figures) to the controller."""
    if _is_worker(session.config):
        session.config.workeroutput["kafka_harness_summary"] = list(_SUMMARY_LINES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller prints each finished worker's summary lines, naming the worker, and when
    it finished: two workers that end far apart mean a long test file ran last on one."""
    import time

    for line in getattr(node, "workeroutput", {}).get("kafka_harness_summary", ()):
        _SUMMARY_LINES.append(f"{line} ({node.gateway.id})")
    if _STARTED:
        _SUMMARY_LINES.append(f"[kafka-harness] worker {node.gateway.id} finished "
                              f"{time.monotonic() - _STARTED[0]:.0f}s after the session started")


class ExternalBroker:
    """A broker someone else runs (``BARRIER_KAFKA_BOOTSTRAP``); start/stop are not ours."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.proc = None

    def peak_rss_bytes(self):
        return None


@pytest.fixture(scope="session")
def kafka_broker():
    external = os.environ.get("BARRIER_KAFKA_BOOTSTRAP")
    if external:
        yield ExternalBroker(external)
        return
    broker = KafkaBroker().start()
    try:
        yield broker
    finally:
        rss = broker.peak_rss_bytes()
        if rss:
            _SUMMARY_LINES.append(f"[kafka-harness] test broker: start "
                                  f"{broker.start_seconds:.1f}s, peak RSS {rss / 2**20:.0f} MiB")
        broker.stop()


@pytest.fixture(scope="session")
def bootstrap(kafka_broker) -> str:
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def kafka_admin(bootstrap):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    yield admin
    admin.close()


@pytest.fixture
def topic_factory(kafka_admin, request):
    """``topic_factory(partitions=1, prefix="", configs=None) -> name``: unique topics (with
    topic ``configs``), deleted after the test."""
    made = []

    def make(partitions: int = 1, prefix: str = "", configs: dict = None) -> str:
        base = (prefix or request.node.name)[:60]
        name = "t_" + "".join(c if c.isalnum() else "_" for c in base) + "_" + uuid.uuid4().hex[:8]
        create_topic(kafka_admin, name, partitions, configs)
        made.append(name)
        return name

    yield make
    if made:
        try:
            kafka_admin.delete_topics(made, timeout_ms=30000)
        except Exception:  # noqa: BLE001 - cleanup must not mask the test's result
            pass


@pytest.fixture
def tmp_topic(topic_factory) -> str:
    return topic_factory(1)


@pytest.fixture(scope="session")
def s3_server():
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server):
    import boto3

    s3 = boto3.client("s3", **s3_server.client_kwargs())
    name = "bk-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def spark():
    session = build_spark()
    yield session
    session.stop()

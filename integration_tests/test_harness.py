"""The harness is real: a broker that round-trips records and honours transactions, an S3 server
boto3 talks to, and a Spark that runs a Python streaming data source."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from kafka_harness.broker import BrokerStartError, KafkaBroker, free_port


def _consume_all(bootstrap, topic, isolation="read_uncommitted", expect=None, timeout_s=30):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=2000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values = []
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=500).values():
            values.extend(m.value for m in msgs)
        if expect is not None and len(values) >= expect:
            break
        if expect is None and consumer.position(tp) >= consumer.end_offsets([tp])[tp]:
            break
    consumer.close()
    return values


def test_produce_consume_round_trip(bootstrap, tmp_topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    sent = [f"v{i}".encode() for i in range(500)]
    for v in sent:
        producer.send(tmp_topic, v)
    producer.flush(timeout=30)
    producer.close()
    assert _consume_all(bootstrap, tmp_topic, expect=500) == sent


def test_transactions_visible_only_after_commit(bootstrap, tmp_topic):
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             transactional_id="harness-" + uuid.uuid4().hex)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(10):
        producer.send(tmp_topic, b"aborted-%d" % i)
    producer.flush()
    # Open transaction: a read_committed reader sees nothing yet (LSO pinned at 0).
    assert _consume_all(bootstrap, tmp_topic, "read_committed", timeout_s=3) == []
    producer.abort_transaction()
    producer.begin_transaction()
    for i in range(10):
        producer.send(tmp_topic, b"committed-%d" % i)
    producer.commit_transaction()
    producer.close()
    committed = _consume_all(bootstrap, tmp_topic, "read_committed", expect=10)
    assert committed == [b"committed-%d" % i for i in range(10)]
    # read_uncommitted sees the aborted records too: the abort really wrote data first.
    uncommitted = _consume_all(bootstrap, tmp_topic, expect=20)
    assert sorted(uncommitted) == sorted(committed + [b"aborted-%d" % i for i in range(10)])


def test_s3_put_get(s3_server, s3_bucket):
    import boto3

    s3 = boto3.client("s3", **s3_server.client_kwargs())
    s3.put_object(Bucket=s3_bucket, Key="a/b.bin", Body=b"\x00hello\xff")
    assert s3.get_object(Bucket=s3_bucket, Key="a/b.bin")["Body"].read() == b"\x00hello\xff"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys == ["a/b.bin"]
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket=s3_bucket, Key="missing")


def test_spark_streams_through_a_python_data_source(spark, tmp_path):
    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

    class CountingReader(SimpleDataSourceStreamReader):
        def initialOffset(self):
            return {"n": 0}

        def read(self, start):
            n = start["n"]
            end = min(n + 25, 100)
            return iter([(i, f"row-{i}") for i in range(n, end)]), {"n": end}

        def readBetweenOffsets(self, start, end):
            return iter([(i, f"row-{i}") for i in range(start["n"], end["n"])])

    class CountingSource(DataSource):
        @classmethod
        def name(cls):
            return "harness-counting"

        def schema(self):
            return "id INT, label STRING"

        def simpleStreamReader(self, schema):
            return CountingReader()

    spark.dataSource.register(CountingSource)
    df = spark.readStream.format("harness-counting").load()
    query = (df.writeStream.format("memory").queryName("harness_counting")
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    try:
        query.processAllAvailable()
        rows = spark.sql("SELECT id, label FROM harness_counting ORDER BY id").collect()
    finally:
        query.stop()
    assert [(r.id, r.label) for r in rows] == [(i, f"row-{i}") for i in range(100)]


def test_port_clash_is_a_clear_error():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with pytest.raises(BrokerStartError, match=f"{port} is already in use"):
            KafkaBroker(port=port).start()


def test_missing_maven_is_a_clear_error(monkeypatch, tmp_path):
    from kafka_harness import jars

    monkeypatch.setenv("BARRIER_KAFKA_CACHE", str(tmp_path))
    monkeypatch.setattr(jars.shutil, "which", lambda name: "/usr/bin/java" if name == "java" else None)
    with pytest.raises(jars.JarFetchError, match="Maven .*not found"):
        jars.fetch_broker_jars("4.1.1")


def test_maven_failure_is_a_clear_error(monkeypatch, tmp_path):
    from kafka_harness import jars

    monkeypatch.setenv("BARRIER_KAFKA_CACHE", str(tmp_path))
    with pytest.raises(jars.JarFetchError, match="Maven failed .*kafka_2.13:0.0.0-nonexistent"):
        jars.fetch_broker_jars("0.0.0-nonexistent")
    assert not (tmp_path / "kafka-0.0.0-nonexistent").exists()


def test_missing_jdk_is_a_clear_error(monkeypatch):
    from kafka_harness import jars

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(jars.shutil, "which", lambda name: None)
    with pytest.raises(jars.JarFetchError, match="No Java runtime found"):
        jars.require_java()


def test_two_processes_fetching_one_version_share_one_download(tmp_path):
    """The parallel test workers start their brokers at once on a fresh machine. Both fetch the
    broker jars into the same empty cache: one downloads, the other waits for it and gets the
    same folder. Old main let both download, and the second replaced the folder the first had
    already handed to its broker (another inode under the same path)."""
    import json
    import os
    import subprocess
    import sys

    from kafka_harness.jars import KAFKA_VERSION

    script = ("import json, os; from kafka_harness.jars import fetch_broker_jars; "
              f"libs = fetch_broker_jars({KAFKA_VERSION!r}); "
              "print(json.dumps([str(libs), os.stat(libs).st_ino]))")
    env = dict(os.environ, BARRIER_KAFKA_CACHE=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    (path_a, inode_a), (path_b, inode_b) = results
    libs = tmp_path / "cache" / f"kafka-{KAFKA_VERSION}" / "libs"
    assert path_a == path_b == str(libs)
    assert inode_a == inode_b == os.stat(libs).st_ino, "a second download replaced the folder"
    assert (libs / ".complete").read_text() == KAFKA_VERSION
    assert any(p.name.startswith("kafka_2.13-") for p in libs.iterdir())


def test_the_suites_session_has_the_recommended_settings(spark):
    """Every Spark session of the suite (``kafka_harness.spark.build_spark``) is built with
    ``barrier_kafka.recommended_spark_conf()``: on PySpark 4.1+ its Python workers, which every
    test with a Python data source, operator or sink runs, talk to the JVM over Unix domain
    sockets, and its stateless streams do not run adaptively."""
    from barrier_kafka.spark_settings import (STATELESS_AQE, UNIX_SOCKETS, missing_recommended,
                                              recommended_spark_conf)

    assert missing_recommended(spark) == []
    if STATELESS_AQE in recommended_spark_conf():
        assert spark.conf.get(STATELESS_AQE) == "false"
    wanted = recommended_spark_conf().get(UNIX_SOCKETS, "false")
    assert spark.sparkContext.getConf().get(UNIX_SOCKETS, "false") == wanted
    if wanted == "true":   # and a Python task really is connected over one
        assert "AF_UNIX" in spark.range(1).rdd.map(lambda _: _socket_families()).first()


def _socket_families():
    """The address families of the sockets this process holds (in a Python worker)."""
    import os
    import socket

    families = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(name))) as sock:
                families.add(sock.family.name)
        except OSError:
            continue
    return sorted(families)


def test_the_witness_tools_share_a_class_archive_and_survive_a_broken_one(bootstrap, tmp_topic,
                                                                          tmp_path, monkeypatch):
    """Kafka's tools start in a new JVM at every call (``kafka_harness.tools.run_tool``): the
    first call writes a class archive, later calls map it and report the same, and an archive
    that is not one (a torn copy) costs only speed."""
    from kafka_harness import jvm_startup, tools

    monkeypatch.setattr(jvm_startup, "cache_root", lambda: tmp_path)
    group = "g-" + uuid.uuid4().hex[:6]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(tmp_topic, 0): OffsetAndMetadata(7, None, -1)})
    finally:
        consumer.close()
    assert tools.group_offsets(bootstrap, group) == {tmp_topic: {0: 7}}
    archives = list((tmp_path / "jvm").glob("kafka-tools-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 0, archives
    assert list((tmp_path / "jvm").glob("*.staging")) == []
    assert tools.group_offsets(bootstrap, group) == {tmp_topic: {0: 7}}   # mapped now
    assert isinstance(tools.open_transactions(bootstrap), list)
    archives[0].chmod(0o644)
    archives[0].write_bytes(b"not a class archive")
    assert tools.group_offsets(bootstrap, group) == {tmp_topic: {0: 7}}

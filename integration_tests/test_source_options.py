"""Every source option against a real broker (Spark Kafka connector parity)."""

from __future__ import annotations

import time

import pytest
from kafka import TopicPartition
from kafka.admin import NewPartitions

from barrier_kafka import run_available_now
from barrier_source.read_limits import ADMISSION_CONTROL
from integration_tests.source_helpers import produce, records, run_to_files, run_to_memory


def base(bootstrap, **extra):
    opts = {"kafka.bootstrap.servers": bootstrap}
    opts.update(extra)
    return opts


def offsets_of(rows, partition=None):
    return sorted(r.offset for r in records(rows) if partition is None or r.partition == partition)


def error_text(exc_info) -> str:
    return str(exc_info.value)


def test_subscribe_pattern_and_assign(spark, bootstrap, topic_factory, tmp_path):
    t1, t2 = topic_factory(1, prefix="patt_a"), topic_factory(2, prefix="patt_b")
    produce(bootstrap, t1, {0: 3})
    produce(bootstrap, t2, {0: 4, 1: 5})
    pattern = f"({t1}|{t2})"
    rows = run_to_memory(spark, base(bootstrap, subscribePattern=pattern,
                                     startingOffsets="earliest"), str(tmp_path / "a"))
    assert sorted({r.topic for r in records(rows)}) == sorted([t1, t2]) and len(records(rows)) == 12
    rows = run_to_memory(spark, base(bootstrap, assign=f'{{"{t2}":[1]}}',
                                     startingOffsets="earliest"), str(tmp_path / "b"))
    assert {(r.topic, r.partition) for r in records(rows)} == {(t2, 1)} and len(records(rows)) == 5


def test_starting_offsets_json_with_earliest_and_latest(spark, bootstrap, topic_factory,
                                                        tmp_path):
    topic = topic_factory(3)
    produce(bootstrap, topic, {0: 10, 1: 10, 2: 10})
    rows = run_to_memory(spark, base(bootstrap, subscribe=topic,
                                     startingOffsets=f'{{"{topic}":{{"0":7,"1":-2,"2":-1}}}}'),
                         str(tmp_path / "a"))
    assert offsets_of(rows, 0) == [7, 8, 9] and offsets_of(rows, 1) == list(range(10))
    assert offsets_of(rows, 2) == []


def test_starting_latest_reads_only_new_records(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 5})
    opts = base(bootstrap, subscribe=topic, startingOffsets="latest")
    chk, out = str(tmp_path / "a"), str(tmp_path / "out")
    assert records(run_to_files(spark, opts, chk, out)) == []
    produce(bootstrap, topic, {0: 3}, start_index=5)
    assert offsets_of(run_to_files(spark, opts, chk, out)) == [5, 6, 7]


def test_starting_by_timestamp(spark, bootstrap, topic_factory, tmp_path):
    # Records stamped 2020 and 2023 are past the broker's 7-day time retention: its retention
    # check (every 5 minutes) deleted them mid-test once in CI ("offsets 4..6 are no longer
    # available (earliest is 7)"). This topic keeps them.
    topic = topic_factory(2, configs={"retention.ms": "-1"})
    old, new = 1_600_000_000_000, 1_700_000_000_000
    produce(bootstrap, topic, {0: 4, 1: 4}, timestamp_ms=old)
    produce(bootstrap, topic, {0: 2, 1: 3}, start_index=4, timestamp_ms=new)
    rows = run_to_memory(spark, base(bootstrap, subscribe=topic, startingTimestamp=str(new)),
                         str(tmp_path / "a"))
    assert offsets_of(rows, 0) == [4, 5] and offsets_of(rows, 1) == [4, 5, 6]
    ts = f'{{"{topic}":{{"0":{old},"1":{new}}}}}'
    rows = run_to_memory(spark, base(bootstrap, subscribe=topic, startingOffsetsByTimestamp=ts),
                         str(tmp_path / "b"))
    assert offsets_of(rows, 0) == list(range(6)) and offsets_of(rows, 1) == [4, 5, 6]
    assert {r.timestamp.timestamp() * 1000 for r in records(rows) if r.partition == 1} == {new}
    with pytest.raises(Exception) as err:
        run_to_memory(spark, base(bootstrap, subscribe=topic, startingTimestamp=str(new * 2)),
                      str(tmp_path / "c"))
    assert "startingTimestamp" in error_text(err)
    rows = run_to_memory(spark, base(bootstrap, subscribe=topic, startingTimestamp=str(new * 2),
                                     startingOffsetsByTimestampStrategy="latest"),
                         str(tmp_path / "d"))
    assert records(rows) == []


def test_include_headers_and_columns(spark, bootstrap, topic_factory, tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 2}, headers=[("h1", b"v1"), ("h2", b"")])
    produce(bootstrap, topic, {0: 1}, start_index=2)
    rows = run_to_memory(spark, base(bootstrap, subscribe=topic, startingOffsets="earliest",
                                     includeHeaders="true"), str(tmp_path / "a"))
    recs = sorted(records(rows), key=lambda r: r.offset)
    assert [(h.key, h.value) for h in recs[0].headers] == [("h1", b"v1"), ("h2", b"")]
    assert recs[2].headers is None
    assert recs[0].key == b"k0" and recs[0].value == b"0-0" and recs[0].timestampType == 0
    no_headers = run_to_memory(spark, base(bootstrap, subscribe=topic,
                                           startingOffsets="earliest"), str(tmp_path / "b"))
    assert "headers" not in no_headers[0].asDict()


def test_missing_topic_is_a_clear_error(spark, bootstrap, tmp_path):
    with pytest.raises(Exception) as err:
        run_to_memory(spark, base(bootstrap, subscribe="no_such_topic_xyz"), str(tmp_path / "a"))
    assert "Topic 'no_such_topic_xyz' named by option 'subscribe' does not exist" in \
        error_text(err)


def test_fail_on_data_loss(spark, bootstrap, kafka_admin, topic_factory, tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 10})
    start = f'{{"{topic}":{{"0":0}}}}'
    opts = base(bootstrap, subscribe=topic, startingOffsets=start)
    chk, out = str(tmp_path / "a"), str(tmp_path / "out")
    assert len(records(run_to_files(spark, opts, chk, out))) == 10
    produce(bootstrap, topic, {0: 10}, start_index=10)
    kafka_admin.delete_records({TopicPartition(topic, 0): 15})  # offsets 10..14 are gone
    with pytest.raises(Exception) as err:
        run_to_files(spark, opts, chk, out)
    assert "failOnDataLoss" in error_text(err) and "10..14" in error_text(err)
    rows = run_to_files(spark, dict(opts, failOnDataLoss="false"), chk, out)
    assert offsets_of(rows) == list(range(10)) + list(range(15, 20))


def test_new_partitions_are_picked_up_from_earliest(spark, bootstrap, kafka_admin,
                                                    topic_factory, tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 3})
    opts = base(bootstrap, subscribe=topic, startingOffsets="earliest")
    chk, out = str(tmp_path / "a"), str(tmp_path / "out")
    run_to_files(spark, opts, chk, out)
    kafka_admin.create_partitions({topic: NewPartitions(total_count=2)})
    produce(bootstrap, topic, {1: 4})
    rows = run_to_files(spark, opts, chk, out)
    assert offsets_of(rows, 1) == [0, 1, 2, 3]
    bars = [r for r in rows if r.kind == "barrier"]
    assert any(f"{topic}:1" in b.barrier_channels for b in bars)


def test_min_offsets_per_trigger_waits_at_most_max_trigger_delay(spark, bootstrap,
                                                                 topic_factory, tmp_path):
    topic = topic_factory(1)
    produce(bootstrap, topic, {0: 5})
    opts = base(bootstrap, subscribe=topic, startingOffsets="earliest",
                minOffsetsPerTrigger="100", maxTriggerDelay="3s")
    reader = spark.readStream.format("barrier-kafka")
    for k, v in opts.items():
        reader = reader.option(k, v)
    q = (reader.load().writeStream.format("memory").queryName("minoffsets")
         .option("checkpointLocation", str(tmp_path / "a")).trigger(processingTime="500 milliseconds")
         .start())
    try:
        t0 = time.monotonic()
        deadline = t0 + 60
        while spark.table("minoffsets").count() == 0 and time.monotonic() < deadline:
            q.awaitTermination(0.5)
        waited = time.monotonic() - t0
    finally:
        q.stop()
    assert spark.table("minoffsets").count() == 6  # 5 records + 1 barrier
    assert waited >= 2.0  # held back until maxTriggerDelay passed (3 s from reader start)


def test_available_now_with_max_offsets(spark, bootstrap, topic_factory, tmp_path):
    """PySpark >= 4.2: one AvailableNow run reads everything in batches of maxOffsetsPerTrigger.
    PySpark 4.0/4.1 run AvailableNow as a single micro-batch for Python sources (no admission
    control there): one run reads one batch, and the next run continues from it."""
    topic = topic_factory(2)
    produce(bootstrap, topic, {0: 30, 1: 30})
    rows = run_to_memory(spark, base(bootstrap, subscribe=topic, startingOffsets="earliest",
                                     maxOffsetsPerTrigger="20"), str(tmp_path / "a"),
                         trigger={"availableNow": True})
    batches = 3 if ADMISSION_CONTROL else 1
    assert len(records(rows)) == 20 * batches and len({r.checkpoint_id for r in rows
                                                        if r.kind == "barrier"}) == batches


def test_run_available_now_reads_everything_on_every_pyspark(spark, bootstrap, topic_factory,
                                                             tmp_path):
    """``barrier_kafka.run_available_now`` gives AvailableNow's result on every version: all 60
    records, each exactly once, in three checkpoints of maxOffsetsPerTrigger=20."""
    topic = topic_factory(2)
    produce(bootstrap, topic, {0: 30, 1: 30})
    reader = spark.readStream.format("barrier-kafka")
    for k, v in base(bootstrap, subscribe=topic, startingOffsets="earliest",
                     maxOffsetsPerTrigger="20").items():
        reader = reader.option(k, v)
    out = str(tmp_path / "rows")
    progress = run_available_now(reader.load().writeStream.format("parquet").option("path", out)
                                 .option("checkpointLocation", str(tmp_path / "chk")))
    rows = spark.read.parquet(out).collect()
    got = sorted((r.partition, r.offset) for r in records(rows))
    assert got == sorted((p, o) for p in (0, 1) for o in range(30))
    assert sorted(r.checkpoint_id for r in rows if r.kind == "barrier" and r.partition == 0) \
        == [1, 2, 3]
    assert sum(p["numInputRows"] for p in progress) == len(rows)


def test_bad_options_fail_at_start_naming_the_option(spark, bootstrap, tmp_path):
    with pytest.raises(Exception) as err:
        run_to_memory(spark, base(bootstrap, subscribe="x", maxOffsetPerTrigger="1"),
                      str(tmp_path / "a"))
    assert "maxOffsetsPerTrigger" in error_text(err)
    with pytest.raises(Exception) as err:
        run_to_memory(spark, base(bootstrap, subscribe="x", startingOffsets='{"x":'),
                      str(tmp_path / "b"))
    assert "'startingOffsets' is not valid JSON" in error_text(err)


def test_unreachable_broker_names_the_address_and_the_likely_causes(spark, tmp_path):
    """Issue 14: a client against a port where no broker (or another protocol) listens used to
    say only "Unable to bootstrap". The source and the sink name the address and the cause
    (here: nothing listens; the other causes: integration_tests/test_secured_brokers.py)."""
    import socket

    from barrier_sink.transaction import broker_max_transaction_timeout_ms
    from barrier_core.exceptions import BrokerUnreachableError

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Exception, match=rf"could not connect to the Kafka brokers at '{dead}' "
                                        r"\(kafka.security.protocol PLAINTEXT\): nothing "
                                        "listens there"):
        run_to_memory(spark, {"kafka.bootstrap.servers": dead, "subscribe": "t",
                              "kafka.bootstrap.timeout.ms": "2000"}, str(tmp_path / "chk"))
    with pytest.raises(BrokerUnreachableError, match=rf"sink could not connect.*'{dead}'.*"
                                                     "SASL_SSL.*nothing listens there") as err:
        broker_max_transaction_timeout_ms({"bootstrap_servers": dead,
                                           "security_protocol": "SASL_SSL",
                                           "sasl_mechanism": "PLAIN",
                                           "sasl_plain_username": "u",
                                           "sasl_plain_password": "s3cret-pw",
                                           "bootstrap_timeout_ms": 2000})
    assert "s3cret-pw" not in str(err.value)  # secrets never in errors

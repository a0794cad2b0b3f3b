"""The exactly-once Kafka sink on real Spark and a real broker: output appears only through
committed transactions, exactly once, and nothing is left open."""

from __future__ import annotations

import json

from collections import Counter

import pytest

from barrier_core.completed_offsets import read_completed_offsets
from barrier_ops.testing import ScriptDataSource, write_script
from barrier_sink.lingering import list_lingering
from integration_tests.sink_support import (read_committed_topic, run_script_to_sink,
                                            sealed_script)
from state_backends.registry import backend_from_uri


@pytest.fixture(scope="module")
def script_source(spark):
    spark.dataSource.register(ScriptDataSource)


def run_to_end(spark, script_path, out_topic, bootstrap, chk, **options):
    run_script_to_sink(spark, script_path, "barrier-kafka", chk,
                       **{"kafka.bootstrap.servers": bootstrap, "topic": out_topic}, **options)


def test_source_rows_reach_kafka_exactly_once(spark, script_source, tmp_path, bootstrap,
                                              topic_factory):
    script = sealed_script(seed=7, partitions=2, records=60, checkpoints=3, batches=4)
    path = write_script(script, str(tmp_path / "script.json"))
    out = topic_factory(2)
    prefix = "it-sink-" + out[-8:]
    run_to_end(spark, path, out, bootstrap, str(tmp_path / "chk"),
               transactionalIdPrefix=prefix)
    values = read_committed_topic(bootstrap, out)
    expected = Counter(r["value"].encode() for r in script["records"])
    assert Counter(values) == expected  # every record, exactly once
    assert list_lingering({"bootstrap_servers": bootstrap}, prefix) == []
    backend = backend_from_uri(str(tmp_path / "chk" / "barrier-checkpoints"))
    done = read_completed_offsets(backend)
    assert done.checkpoint_id == 4
    assert done.offsets == {"in": {0: 60, 1: 60}}
    # Issue 15's attribution: batch records carry the slowest task's phases and the driver's.
    from barrier_sink.committer import batch_path

    timed = [json.loads(backend.get(batch_path(b))) for b in range(4)
             if backend.exists(batch_path(b))]
    with_records = [r for r in timed if r["records"]]
    assert with_records and all(r["timings"]["tasks"] >= 1 for r in with_records)
    for r in with_records:
        t = r["timings"]
        assert t["task_ms"] >= t["open_ms"] + t["write_ms"] + t["pre_commit_ms"] > 0, t
    assert any("commit_transactions_ms" in r and "driver_before_commit_ms" in r for r in timed)


def test_records_of_an_incomplete_checkpoint_stay_invisible(spark, script_source, tmp_path,
                                                            bootstrap, topic_factory):
    script = sealed_script(seed=11, partitions=2, records=40, checkpoints=2, batches=3)
    # Drop the final sealing barrier of partition 1: checkpoint 3 never completes.
    script["batches"][-1] = [r for r in script["batches"][-1]
                             if not (r["kind"] == "barrier" and r["checkpoint_id"] == 3
                                     and r["partition"] == 1)]
    path = write_script(script, str(tmp_path / "script.json"))
    out = topic_factory(1)
    prefix = "it-open-" + out[-8:]
    run_to_end(spark, path, out, bootstrap, str(tmp_path / "chk"), transactionalIdPrefix=prefix)
    lingering = list_lingering({"bootstrap_servers": bootstrap}, prefix)
    assert lingering, "epoch 3's transactions must stay open (pre-committed) until it completes"
    # Exactly the recorded transactions of epoch 3 are open (pooled ids carry no epoch).
    backend = backend_from_uri(str(tmp_path / "chk" / "barrier-checkpoints"))
    epoch3 = {h["transactional_id"] for p in backend.list("sink/")
              for h in json.loads(backend.get(p))["handles"] if h["checkpoint_id"] == 3}
    assert {t.transactional_id for t in lingering} == epoch3
    # The open transactions pin the LSO: read_committed sees at most checkpoint <= 2 records.
    visible = Counter(read_committed_topic(bootstrap, out, timeout_s=3))
    allowed = Counter(r["value"].encode() for r in script["records"] if r["checkpoint_id"] <= 2)
    assert not visible - allowed
    from barrier_sink.lingering import abort_lingering

    abort_lingering({"bootstrap_servers": bootstrap}, prefix)
    final = Counter(read_committed_topic(bootstrap, out))
    assert final == allowed  # epochs 1-2 exactly once, epoch 3 never


def test_bad_sink_options_fail_at_start_with_the_option_named(spark, script_source, tmp_path,
                                                              bootstrap):
    script = sealed_script(seed=1, partitions=1, records=5, checkpoints=1, batches=1)
    path = write_script(script, str(tmp_path / "s.json"))
    df = spark.readStream.format("barrier-ops-script").option("path", path).load()
    with pytest.raises(Exception, match="kafka.transaction.timeout.ms"):
        (df.writeStream.format("barrier-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", "x").option("checkpointLocation", str(tmp_path / "c"))
         .option("kafka.transaction.timeout.ms", "1000").start().processAllAvailable())


def test_timeout_above_the_brokers_maximum_fails_at_start(spark, script_source, tmp_path,
                                                          bootstrap, tmp_topic):
    from barrier_sink.transaction import broker_max_transaction_timeout_ms

    broker_max = broker_max_transaction_timeout_ms({"bootstrap_servers": bootstrap})
    assert broker_max == 900_000  # Kafka's default, read from the real broker
    script = sealed_script(seed=2, partitions=1, records=5, checkpoints=1, batches=1)
    path = write_script(script, str(tmp_path / "s.json"))
    df = spark.readStream.format("barrier-ops-script").option("path", path).load()
    with pytest.raises(Exception, match="transaction.max.timeout.ms = 900000"):
        (df.writeStream.format("barrier-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", tmp_topic).option("checkpointLocation", str(tmp_path / "c"))
         .option("kafka.transaction.timeout.ms", str(broker_max + 1)).start()
         .processAllAvailable())
    assert read_committed_topic(bootstrap, tmp_topic, timeout_s=2) == []

"""Kafka transactions begun in one process and finished in another, against the real broker:
the mechanism the 2PC Kafka sink's driver-side commit rests on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from barrier_sink.lingering import abort_lingering, list_lingering
from barrier_sink.transaction import (EndResult, TransactionalWriter, TransactionHandle,
                                      abort_handle, commit_handle)

PRECOMMIT_IN_CHILD = r"""
import json, os, sys
from barrier_sink.transaction import TransactionalWriter
bootstrap, topic, tid, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
w = TransactionalWriter({"bootstrap_servers": bootstrap}, tid, 60000, 0, 0, 1).open()
for i in range(n):
    w.send(topic, value=b"v%d" % i)
print(json.dumps(w.pre_commit().to_json()), flush=True)
os._exit(0)  # die without committing or aborting, like a task whose executor went away
"""


def read_committed(bootstrap, topic, timeout_s=10.0):
    """All committed values of partition 0, waiting until the LSO reaches the end offset."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=300).values():
            values.extend(m.value for m in msgs)
        if consumer.position(tp) >= consumer.end_offsets([tp])[tp]:
            break
    consumer.close()
    return values


def precommit_in_child(bootstrap, topic, tid, n) -> TransactionHandle:
    out = subprocess.run([sys.executable, "-c", PRECOMMIT_IN_CHILD, bootstrap, topic, tid, str(n)],
                         capture_output=True, text=True, timeout=120, check=True)
    return TransactionHandle.from_json(json.loads(out.stdout.strip().splitlines()[-1]))


def test_commit_from_another_process_is_visible_and_idempotent(bootstrap, tmp_topic):
    conf = {"bootstrap_servers": bootstrap}
    handle = precommit_in_child(bootstrap, tmp_topic, "t-" + uuid.uuid4().hex, 20)
    assert handle.records == 20 and handle.partitions == [[tmp_topic, 0]]
    assert read_committed(bootstrap, tmp_topic, timeout_s=2) == []
    assert commit_handle(conf, handle) is EndResult.COMMITTED
    assert commit_handle(conf, handle) is EndResult.COMMITTED  # replayed commit: no error
    assert read_committed(bootstrap, tmp_topic) == [b"v%d" % i for i in range(20)]


def test_abort_from_another_process_leaves_nothing_visible(bootstrap, tmp_topic):
    conf = {"bootstrap_servers": bootstrap}
    handle = precommit_in_child(bootstrap, tmp_topic, "t-" + uuid.uuid4().hex, 5)
    assert abort_handle(conf, handle) is EndResult.ABORTED
    assert abort_handle(conf, handle) is EndResult.ABORTED
    assert read_committed(bootstrap, tmp_topic) == []


def test_a_new_attempt_fences_the_old_one(bootstrap, tmp_topic):
    conf = {"bootstrap_servers": bootstrap}
    tid = "t-" + uuid.uuid4().hex
    zombie = precommit_in_child(bootstrap, tmp_topic, tid, 3)
    retry = TransactionalWriter(conf, tid, 60000, 0, 0, 1).open()
    retry.send(tmp_topic, value=b"retry")
    fresh = retry.pre_commit()
    retry.close_without_finishing()
    assert fresh.producer_epoch > zombie.producer_epoch
    assert commit_handle(conf, zombie) is EndResult.FENCED
    assert commit_handle(conf, fresh) is EndResult.COMMITTED
    assert read_committed(bootstrap, tmp_topic) == [b"retry"]


def test_lingering_transactions_are_listed_and_aborted_by_prefix(bootstrap, tmp_topic):
    conf = {"bootstrap_servers": bootstrap}
    prefix = "ling-" + uuid.uuid4().hex[:8]
    other = prefix + "-eu"  # another query whose prefix merely starts with ours
    mine = [precommit_in_child(bootstrap, tmp_topic, f"{prefix}-b3-p{i}-e2", 2)
            for i in range(2)]
    theirs = precommit_in_child(bootstrap, tmp_topic, f"{other}-b3-p0-e2", 2)
    listed = list_lingering(conf, prefix)
    assert [t.transactional_id for t in listed] == sorted(h.transactional_id for h in mine)
    assert all(t.state == "Ongoing" for t in listed)
    # The open transactions pin the LSO: read_committed sees nothing yet.
    assert read_committed(bootstrap, tmp_topic, timeout_s=2) == []
    assert sorted(abort_lingering(conf, prefix)) == sorted(h.transactional_id for h in mine)
    assert list_lingering(conf, prefix) == []
    # The other query's pre-committed transaction was left alone: it can still commit.
    assert [t.transactional_id for t in list_lingering(conf, other)] == [theirs.transactional_id]
    assert commit_handle(conf, theirs) is EndResult.COMMITTED
    assert list_lingering(conf, other) == []
    assert sorted(read_committed(bootstrap, tmp_topic)) == [b"v0", b"v1"]


def test_lingering_cli(bootstrap, tmp_topic):
    prefix = "cli-" + uuid.uuid4().hex[:8]
    precommit_in_child(bootstrap, tmp_topic, f"{prefix}-b0-p0-e1", 1)
    run = lambda *extra: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "barrier_sink", "lingering", "--bootstrap", bootstrap,
         "--prefix", prefix, *extra], capture_output=True, text=True, timeout=120, check=True)
    listed = run().stdout
    assert f"{prefix}-b0-p0-e1" in listed and "1 open transaction(s)" in listed
    assert "aborted 1" in run("--abort").stdout
    assert "0 open transaction(s)" in run().stdout


def test_a_record_kafka_refuses_fails_the_pre_commit_and_nothing_is_committed(bootstrap,
                                                                              topic_factory):
    """Exactly-once hole found in this issue's review: the broker refused one record of a
    transaction (larger than the topic's max.message.bytes), kafka-python's flush() returned
    normally, and pre_commit handed the transaction to the driver, whose commit made the other
    records visible: the refused record was lost without an error. Now pre_commit raises,
    naming the limit to raise, and aborts the transaction: nothing is visible, nothing stays
    open, and the retried task (here: a new writer with the same id) writes everything."""
    from barrier_sink.exceptions import SinkError

    topic = topic_factory(1, configs={"max.message.bytes": "2000"})
    conf = {"bootstrap_servers": bootstrap}
    tid = "refused-" + uuid.uuid4().hex
    writer = TransactionalWriter(conf, tid, 60000, 0, 0, 1).open()
    writer.send(topic, value=b"small-1")
    writer._producer.flush()  # its own batch: accepted by the broker
    writer.send(topic, value=b"x" * 5000)  # refused: MESSAGE_TOO_LARGE
    with pytest.raises(SinkError) as info:
        writer.pre_commit()
    assert type(info.value).__name__ == "RecordsNotWrittenError"
    message = str(info.value)
    assert "1 of the 2 records" in message and tid in message
    assert "MessageSizeTooLarge" in message and "max.message.bytes" in message
    assert not [t for t in list_lingering(conf, "refused-") if t.transactional_id == tid]
    assert read_committed(bootstrap, topic, timeout_s=2) == []
    # The retry: records that fit one by one but not as one batch (3 x 900 bytes, lingering
    # into one batch): the broker refuses the batch, kafka-python splits it, and the
    # pre-commit waits for the halves (its flush() raised 'Future not done' there before).
    lingering = {**conf, "linger_ms": 200}
    retry = TransactionalWriter(lingering, tid, 60000, 0, 0, 1).open()
    values = [b"small-1"] + [b"%d" % i * 900 for i in range(1, 4)]
    for v in values:
        retry.send(topic, value=v)
    handle = retry.pre_commit()
    retry.close_without_finishing()
    assert handle.records == 4
    assert commit_handle(conf, handle) is EndResult.COMMITTED
    assert read_committed(bootstrap, topic) == values


def test_the_commit_workers_sweeps_keep_one_admin_client(bootstrap, tmp_topic, monkeypatch):
    """Issue 15: the driver commit worker sweeps after every batch; it keeps its admin client
    for the next sweep instead of building one each time, and replaces a kept client that
    stopped working (a broker restart, a closed connection) without failing the sweep."""
    import barrier_sink.lingering as lingering

    made = []
    build = lingering._admin
    monkeypatch.setattr(lingering, "_admin", lambda config: made.append(1) or build(config))
    conf = {"bootstrap_servers": bootstrap, "client_id": "sweep-" + uuid.uuid4().hex[:8]}
    prefix = "sweep-" + uuid.uuid4().hex[:8]
    handle = precommit_in_child(bootstrap, tmp_topic, f"{prefix}-b1-p0-e1", 1)
    try:
        for _ in range(3):
            found = lingering.list_lingering(conf, prefix, reuse_client=True)
            assert [t.transactional_id for t in found] == [handle.transactional_id]
        assert len(made) == 1
        kept = lingering._kept[lingering._config_key(conf)]
        kept.close()
        found = lingering.list_lingering(conf, prefix, reuse_client=True)
        assert [t.transactional_id for t in found] == [handle.transactional_id]
        assert len(made) == 2 and lingering._kept[lingering._config_key(conf)] is not kept
        # the public default builds and closes a client per call, keeping none
        found = lingering.list_lingering(conf, prefix)
        assert [t.transactional_id for t in found] == [handle.transactional_id]
        assert len(made) == 3
    finally:
        abort_handle(conf, handle)
        lingering._close_quietly(lingering._kept.pop(lingering._config_key(conf)))
    assert lingering.list_lingering(conf, prefix) == []


def test_a_transaction_being_committed_or_aborted_is_not_lingering(bootstrap, topic_factory):
    """When EndTxn returns, the transaction is decided: the coordinator writes its markers and
    ends it on its own, and for a moment lists it as ``PrepareCommit`` / ``PrepareAbort``. The
    driver sweeps right after committing a checkpoint's transactions; taking those for
    lingering made the sweep fence a transaction it had just committed (with a warning about a
    losing attempt, seen in ``bench_latency``) and made every "nothing open" check race the
    markers. Each transaction here is listed the moment its commit or abort returned."""
    from kafka import KafkaProducer

    conf = {"bootstrap_servers": bootstrap}
    topic = topic_factory(2)
    prefix = "ending-" + uuid.uuid4().hex[:8]
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{prefix}-p0-a0-s0")
    listed = []
    try:
        producer.init_transactions()
        for i in range(120):
            producer.begin_transaction()
            for partition in (0, 1):  # markers for two partitions: a longer window
                producer.send(topic, b"v%d" % i, partition=partition)
            producer.flush()
            producer.commit_transaction() if i % 2 == 0 else producer.abort_transaction()
            listed += [(i, t.state) for t in list_lingering(conf, prefix, reuse_client=True)]
    finally:
        producer.close()
        import barrier_sink.lingering as lingering

        lingering._close_quietly(lingering._kept.pop(lingering._config_key(conf), None))
    assert listed == []
    # partition 0 holds the committed half, in order; the aborted half is not readable
    assert read_committed(bootstrap, topic) == [b"v%d" % i for i in range(0, 120, 2)]

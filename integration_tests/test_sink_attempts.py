"""Issue 12, hole 4: two attempts of one sink task (a speculative copy, or a retry whose first
attempt is still running) on the real broker and a real file store.

Before, both attempts used one transactional.id (``<prefix>-b<batch>-p<task>-e<epoch>``): the
loser's ``init_transactions`` aborted the winner's pre-committed transaction, the winner's commit
was FENCED and its records were lost; the file sink's loser deleted the winner's staged file (same
name). Now each attempt has its own transactional.id and staged file; Spark hands the driver only
the winner's handles, and the driver aborts whatever the losers left open.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

from pyspark.sql.types import LongType, StringType, StructField, StructType

from barrier_sink.file_sink import FileTwoPhaseCommitWriter, published_files
from barrier_sink.kafka_sink import KafkaTwoPhaseCommitWriter
from barrier_sink.lingering import list_lingering
from barrier_sink.messages import SinkCommitMessage
from integration_tests.sink_support import as_shipped_to_tasks, read_committed_topic

SCHEMA = StructType([StructField("kind", StringType()), StructField("checkpoint_id", LongType()),
                     StructField("value", StringType())])


def _rows(n: int):
    return [{"kind": "record", "checkpoint_id": 1, "value": f"v{i}"} for i in range(n)]


def _sealing_message(handle: dict, records: int) -> SinkCommitMessage:
    """Task 0's commit message of batch 0: its handle and the barrier of checkpoint 1."""
    barrier = {"checkpoint_id": 1, "channel": "in:0", "offset": records, "channels": ["in:0"],
               "timestamp": int(time.time() * 1000)}
    return SinkCommitMessage(0, 0, handles=[handle], barriers=[barrier], records=records)


def _attempt(writer, attempt: int, rows):
    txn = writer.begin_transaction(0, 0, attempt, 1)  # writer: as shipped to the tasks
    for row in rows:
        writer.invoke(txn, row)
    return txn


def test_speculative_kafka_attempt_never_fences_the_winner(bootstrap, topic_factory, tmp_path):
    out = topic_factory(2, prefix="spec_out")
    prefix = "spec-" + uuid.uuid4().hex[:8]
    writer = KafkaTwoPhaseCommitWriter({"kafka.bootstrap.servers": bootstrap, "topic": out,
                                        "transactionalIdPrefix": prefix,
                                        "checkpointLocation": str(tmp_path / "chk")}, SCHEMA)
    rows = _rows(200)
    task = as_shipped_to_tasks(writer)
    winner = task.pre_commit(_attempt(task, 0, rows))
    # The speculative copy starts after the winner pre-committed, writes the same rows and
    # pre-commits too; Spark discards its commit message (the winner was first).
    loser = task.pre_commit(_attempt(task, 1, rows))
    assert winner["transactional_id"] != loser["transactional_id"]
    writer.committer().on_batch_committed(0, [_sealing_message(winner, len(rows))])
    got = Counter(read_committed_topic(bootstrap, out))
    assert got == Counter(r["value"].encode() for r in rows)  # exactly once, nothing lost
    assert list_lingering({"bootstrap_servers": bootstrap}, prefix) == []  # loser aborted


def test_kafka_attempt_left_open_by_a_crashed_run_is_aborted_by_the_next_commit(
        bootstrap, topic_factory, tmp_path):
    """A retried task's first attempt whose handle no batch record names (its run crashed):
    the next batch commit aborts it, so it cannot pin read_committed readers for
    transaction.timeout.ms, and its records never show."""
    out = topic_factory(1, prefix="spec_crash")
    prefix = "spec-crash-" + uuid.uuid4().hex[:8]
    options = {"kafka.bootstrap.servers": bootstrap, "topic": out,
               "transactionalIdPrefix": prefix, "checkpointLocation": str(tmp_path / "chk")}
    task = as_shipped_to_tasks(KafkaTwoPhaseCommitWriter(options, SCHEMA))
    task.pre_commit(_attempt(task, 3, _rows(10)))  # attempt 3 of batch 0, crashed run
    assert len(list_lingering({"bootstrap_servers": bootstrap}, prefix)) == 1
    writer = KafkaTwoPhaseCommitWriter(options, SCHEMA)  # the restarted query
    writer.recover_once()
    rows = [{"kind": "record", "checkpoint_id": 1, "value": f"w{i}"} for i in range(20)]
    task = as_shipped_to_tasks(writer)
    winner = task.pre_commit(_attempt(task, 0, rows))
    writer.committer().on_batch_committed(0, [_sealing_message(winner, len(rows))])
    assert list_lingering({"bootstrap_servers": bootstrap}, prefix) == []
    assert Counter(read_committed_topic(bootstrap, out)) == Counter(
        r["value"].encode() for r in rows)


def test_losing_file_attempt_never_deletes_the_winners_staged_file(tmp_path):
    path = str(tmp_path / "out")
    writer = FileTwoPhaseCommitWriter({"path": path, "checkpointLocation": str(tmp_path / "c")},
                                      SCHEMA)
    rows = _rows(50)
    winner = writer.pre_commit(_attempt(writer, 0, rows))
    killed = _attempt(writer, 1, rows)  # a speculative copy, killed while writing
    writer.pre_commit(killed)
    writer.abort_open(killed)
    finished_loser = writer.pre_commit(_attempt(writer, 2, rows))  # a copy that also finished
    assert len({winner["staged"], killed.staged, finished_loser["staged"]}) == 3
    writer.committer().on_batch_committed(0, [_sealing_message(winner, len(rows))])
    import pyarrow.parquet as pq

    files = published_files(path)
    assert len(files) == 1
    values = pq.read_table(files[0]).column("value").to_pylist()
    assert Counter(values) == Counter(r["value"] for r in rows)
    assert writer.store.list("_staging/") == []  # the finished loser's file was swept

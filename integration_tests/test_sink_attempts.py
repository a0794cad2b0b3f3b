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

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from barrier_sink.attempt_claims import LateAttemptError, run_tag
from barrier_sink.file_sink import FileTwoPhaseCommitWriter, published_files
from barrier_sink.kafka_sink import KafkaTwoPhaseCommitWriter
from barrier_sink.lingering import list_lingering
from barrier_sink.messages import SinkCommitMessage
from barrier_sink.transaction import fence_and_abort
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


RUN, NEXT_RUN = "7c1e0d52-run-of-the-query", "0b9f33a1-the-restarted-run"


class _Tasks:
    """Which task attempt the sink code runs in (the run id and Spark's task attempt id that a
    task context would give; set before each attempt's first transaction)."""

    def __init__(self, monkeypatch) -> None:
        import barrier_sink.kafka_sink as kafka_sink

        self.now = (RUN, 1)
        monkeypatch.setattr(kafka_sink, "current_attempt", lambda: self.now)

    def ship(self, options, run=RUN, task_attempt=1):
        """A writer pickled for a batch's tasks, to run as this task attempt."""
        self.now = (run, task_attempt)
        return as_shipped_to_tasks(KafkaTwoPhaseCommitWriter(options, SCHEMA))

    def run_as(self, writer, run, task_attempt):
        self.now = (run, task_attempt)
        return writer


def _message(batch_id: int, handles, records: int, task_attempt: int, barrier=None, run=RUN):
    """Task 0's commit message of a batch, as the winning attempt sends it."""
    return SinkCommitMessage(batch_id, 0, handles=list(handles), records=records,
                             barriers=[barrier] if barrier else [], run=run,
                             task_attempt=task_attempt)


def _barrier(checkpoint_id: int, offset: int) -> dict:
    return {"checkpoint_id": checkpoint_id, "channel": "in:0", "offset": offset,
            "channels": ["in:0"], "timestamp": int(time.time() * 1000)}


def _task_attempt(writer, batch_id: int, attempt: int, rows):
    txn = writer.begin_transaction(batch_id, 0, attempt, 1)
    for row in rows:
        writer.invoke(txn, row)
    return writer.pre_commit(txn)


def _values(prefix: str, n: int):
    return [{"kind": "record", "checkpoint_id": 1, "value": f"{prefix}{i}"} for i in range(n)]


def _late_attempt_setup(bootstrap, topic_factory, tmp_path):
    out = topic_factory(1, prefix="late_out")
    prefix = "late-" + uuid.uuid4().hex[:8]
    options = {"kafka.bootstrap.servers": bootstrap, "topic": out,
               "transactionalIdPrefix": prefix, "checkpointLocation": str(tmp_path / "chk")}
    return out, prefix, options


def _pooled(prefix: str, run: str, attempt: int, slot: int) -> str:
    return f"{prefix}-r{run_tag(run)}-p0-a{attempt}-s{slot}"


def _speculative_pair(tasks, options, rows):
    """Batch 0 of task 0: the speculative copy (attempt 1, task attempt id 12) writes ``rows``
    and pre-commits; returns its handle and the writer of the slow attempt 0, shipped for the
    same batch and not started yet."""
    winner = tasks.ship(options, task_attempt=12)
    loser = as_shipped_to_tasks(KafkaTwoPhaseCommitWriter(options, SCHEMA))
    return _task_attempt(winner, 0, 1, rows), loser


def _assert_exactly(bootstrap, out, prefix, rows):
    got = Counter(read_committed_topic(bootstrap, out))
    assert got == Counter(r["value"].encode() for r in rows)
    assert list_lingering({"bootstrap_servers": bootstrap}, prefix) == []


def test_attempt_that_outlives_its_batch_never_fences_a_later_batch(
        bootstrap, topic_factory, tmp_path, monkeypatch):
    """Batch 0's attempt 0 is slow and its speculative copy (attempt 1) wins. Batch 1's
    attempt 0 then takes pool slot 0 and pre-commits; its checkpoint is still open. When batch
    0's loser reaches its first transaction, its batch is sealed: it must stop, not initialise
    slot 0 (which fenced batch 1's transaction and lost its records, as seen on a cluster with
    speculation)."""
    out, prefix, options = _late_attempt_setup(bootstrap, topic_factory, tmp_path)
    tasks = _Tasks(monkeypatch)
    committer = KafkaTwoPhaseCommitWriter(options, SCHEMA).committer()
    rows0, rows1 = _values("a", 30), _values("b", 40)
    won, loser = _speculative_pair(tasks, options, rows0)
    committer.on_batch_committed(0, [_message(0, [won], 30, task_attempt=12)])
    second = _task_attempt(tasks.ship(options, task_attempt=21), 1, 0, rows1)
    assert second["transactional_id"] == _pooled(prefix, RUN, 0, 0)
    committer.on_batch_committed(1, [_message(1, [second], 40, task_attempt=21)])
    with pytest.raises(LateAttemptError, match="batch 0 was already committed"):
        tasks.run_as(loser, RUN, 11).begin_transaction(0, 0, 0, 1)  # batch 0's loser wakes
    committer.on_batch_committed(2, [_message(2, [], 0, task_attempt=31,
                                              barrier=_barrier(1, 70))])
    _assert_exactly(bootstrap, out, prefix, rows0 + rows1)


def test_id_a_loser_claimed_before_the_seal_stays_out_of_the_next_batches(
        bootstrap, topic_factory, tmp_path, monkeypatch):
    """Batch 0's losing attempt 0 claimed its slot-0 id just before the driver sealed the
    batch, and initialises it only later. The next batch's attempt 0 must take another slot,
    so the late initialisation fences nothing that a checkpoint commits."""
    out, prefix, options = _late_attempt_setup(bootstrap, topic_factory, tmp_path)
    tasks = _Tasks(monkeypatch)
    committer = KafkaTwoPhaseCommitWriter(options, SCHEMA).committer()
    rows0, rows1 = _values("a", 25), _values("b", 35)
    won, loser = _speculative_pair(tasks, options, rows0)
    loser_id = tasks.run_as(loser, RUN, 11).next_transactional_id(0, 0, 0, 1)  # claimed
    assert loser_id == _pooled(prefix, RUN, 0, 0)
    committer.on_batch_committed(0, [_message(0, [won], 25, task_attempt=12)])
    second = _task_attempt(tasks.ship(options, task_attempt=21), 1, 0, rows1)
    assert second["transactional_id"] == _pooled(prefix, RUN, 0, 1)
    fence_and_abort({"bootstrap_servers": bootstrap}, loser_id)  # the loser's late producer
    committer.on_batch_committed(1, [_message(1, [second], 35, task_attempt=21,
                                              barrier=_barrier(1, 60))])
    _assert_exactly(bootstrap, out, prefix, rows0 + rows1)


def test_attempts_of_a_rerun_stage_never_share_an_id(bootstrap, topic_factory, tmp_path,
                                                      monkeypatch):
    """Spark re-runs a stage (its executor's shuffle output was lost) while an attempt of the
    first stage attempt still runs: both are task attempt number 0 of task 0 of the batch. The
    second to claim the id takes the next slot, so neither fences the other; the winner's
    output is committed once and the other's transaction is swept."""
    out, prefix, options = _late_attempt_setup(bootstrap, topic_factory, tmp_path)
    tasks = _Tasks(monkeypatch)
    committer = KafkaTwoPhaseCommitWriter(options, SCHEMA).committer()
    rows = _values("a", 20)
    first_stage = tasks.ship(options, task_attempt=11)
    rerun = as_shipped_to_tasks(KafkaTwoPhaseCommitWriter(options, SCHEMA))
    txn_old = tasks.run_as(first_stage, RUN, 11).begin_transaction(0, 0, 0, 1)
    txn_new = tasks.run_as(rerun, RUN, 15).begin_transaction(0, 0, 0, 1)
    assert txn_old.transactional_id == _pooled(prefix, RUN, 0, 0)
    assert txn_new.transactional_id == _pooled(prefix, RUN, 0, 1)
    for row in rows:
        first_stage.invoke(txn_old, row)
        rerun.invoke(txn_new, row)
    won = rerun.pre_commit(txn_new)
    first_stage.pre_commit(txn_old)  # finished too, but Spark took the re-run's result
    committer.on_batch_committed(0, [_message(0, [won], 20, task_attempt=15,
                                              barrier=_barrier(1, 20))])
    _assert_exactly(bootstrap, out, prefix, rows)


def test_attempt_of_a_stopped_run_never_fences_the_restarted_run(bootstrap, topic_factory,
                                                                 tmp_path, monkeypatch):
    """A query is stopped in the middle of batch 0 and restarted at once. The old run's task,
    still being cancelled, opens its transaction only after the new run replayed batch 0 and
    pre-committed. Each run has its own ids: the late producer fences nothing of the new run,
    and the next commit sweeps its transaction."""
    out, prefix, options = _late_attempt_setup(bootstrap, topic_factory, tmp_path)
    tasks = _Tasks(monkeypatch)
    rows_old, rows = _values("old", 10), _values("a", 30)
    stopped = tasks.ship(options, run=RUN, task_attempt=3)  # the old run's batch 0
    replayed = _task_attempt(tasks.ship(options, run=NEXT_RUN, task_attempt=3), 0, 0, rows)
    assert replayed["transactional_id"] == _pooled(prefix, NEXT_RUN, 0, 0)
    committer = KafkaTwoPhaseCommitWriter(options, SCHEMA).committer()
    committer.on_batch_committed(0, [_message(0, [replayed], 30, task_attempt=3,
                                              run=NEXT_RUN)])
    late = _task_attempt(tasks.run_as(stopped, RUN, 3), 0, 0, rows_old)  # opened late
    assert late["transactional_id"] == _pooled(prefix, RUN, 0, 0)
    committer.on_batch_committed(1, [_message(1, [], 0, task_attempt=7, run=NEXT_RUN,
                                              barrier=_barrier(1, 30))])
    _assert_exactly(bootstrap, out, prefix, rows)


def test_a_loser_leaves_nothing_open_when_no_batch_follows(bootstrap, topic_factory, tmp_path,
                                                           monkeypatch):
    """A loser of the last batch before the query stops or idles: no later commit sweeps what it
    opens. One loser was sealed out while its producer initialised: its check after the
    initialisation stops it and aborts its empty transaction. The other initialised before the
    seal and writes after it: the driver fenced its id when it sealed the batch, so its records
    are refused. Neither leaves a transaction open for read_committed readers to wait on."""
    import barrier_sink.kafka_sink as kafka_sink

    out, prefix, options = _late_attempt_setup(bootstrap, topic_factory, tmp_path)
    tasks = _Tasks(monkeypatch)
    committer = KafkaTwoPhaseCommitWriter(options, SCHEMA).committer()
    rows = _values("a", 25)
    won = _task_attempt(tasks.ship(options, task_attempt=12), 0, 1, rows)
    early = tasks.run_as(as_shipped_to_tasks(KafkaTwoPhaseCommitWriter(options, SCHEMA)), RUN, 10)
    early_txn = early.begin_transaction(0, 0, 2, 1)  # initialised before the seal
    sealed_out = as_shipped_to_tasks(KafkaTwoPhaseCommitWriter(options, SCHEMA))
    real_claim = kafka_sink.claim

    def claim_then_driver_commits(*args):
        claimed = real_claim(*args)
        committer.on_batch_committed(0, [_message(0, [won], 25, task_attempt=12,
                                                  barrier=_barrier(1, 25))])
        return claimed

    monkeypatch.setattr(kafka_sink, "claim", claim_then_driver_commits)
    with pytest.raises(LateAttemptError):
        tasks.run_as(sealed_out, RUN, 11).begin_transaction(0, 0, 0, 1)
    with pytest.raises(Exception):  # fenced: the records never reach the output
        for row in rows:
            early.invoke(early_txn, row)
        early.pre_commit(early_txn)
    _assert_exactly(bootstrap, out, prefix, rows)

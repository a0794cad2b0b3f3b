"""Pooled transactional ids (issue 13): an id is reused only after every transaction recorded
under it ended, so the broker keeps a bounded number of ids and recovery never meets a reused id
(the FLINK-40626 trap). No broker: ids are computed, never opened."""

from __future__ import annotations

import json
import pickle

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from barrier_sink.committer import batch_path
from barrier_sink.exceptions import InvalidOptionError
from barrier_sink.id_pool import TransactionalIdPool
from barrier_sink.kafka_sink import KafkaTwoPhaseCommitWriter
from barrier_sink.options import (KafkaSinkOptions, is_pooled_transactional_id,
                                  is_sink_transactional_id)

SCHEMA = StructType([StructField("kind", StringType()), StructField("checkpoint_id", LongType()),
                     StructField("value", StringType())])


def _name(p, a, s):
    return f"x-p{p}-a{a}-s{s}"


def test_pool_takes_the_lowest_free_slot_per_task_attempt():
    pool = TransactionalIdPool(_name, {"x-p0-a0-s0", "x-p0-a0-s2"})
    assert pool.acquire(5, 0, 0) == "x-p0-a0-s1"  # s0 holds a transaction still to commit
    assert pool.acquire(5, 0, 0) == "x-p0-a0-s3"  # a second epoch of the same task
    assert pool.acquire(5, 0, 1) == "x-p0-a1-s0"  # a speculative copy: its own ids
    assert pool.acquire(5, 1, 0) == "x-p1-a0-s0"


def test_pooled_and_incrementing_names_are_this_sinks_and_no_one_elses():
    assert is_pooled_transactional_id("orders", "orders-p3-a0-s1")
    assert not is_sink_transactional_id("orders", "orders-eu-p3-a0-s1")
    assert is_sink_transactional_id("orders", "orders-b7-p3-a0-e2")
    assert not is_pooled_transactional_id("orders", "orders-b7-p3-a0-e2")
    with pytest.raises(InvalidOptionError, match="transaction.naming.strategy"):
        KafkaSinkOptions.from_options({"kafka.bootstrap.servers": "h:1", "checkpointLocation":
                                       "/c", "transaction.naming.strategy": "random"})


def test_a_prefix_ending_like_a_run_tag_is_refused_with_its_fix():
    """``orders-r0123abcd``'s pooled ids without a run tag are ``orders``'s ids of run
    ``0123abcd``: the sweep of ``orders`` would fence and abort them, pre-committed or not."""
    base = {"kafka.bootstrap.servers": "h:1", "checkpointLocation": "/c"}
    with pytest.raises(InvalidOptionError,
                       match=r"transactionalIdPrefix.*'orders-r0123abcd'.*'orders'.*"
                             r"'orders-r0123abcd-sink'"):
        KafkaSinkOptions.from_options({**base, "transactionalIdPrefix": "orders-r0123abcd"})
    for fine in ("orders-r0123abc", "orders-rDEADBEEF", "orders-r0123abcd-sink", "orders-r"):
        assert KafkaSinkOptions.from_options(
            {**base, "transactionalIdPrefix": fine}).transactional_id_prefix == fine


PREFIXES = ["orders", "orders-eu", "orders-r0123abcd", "orders-r0123abcd-sink", "orders-r0123abc",
            "orders-rDEADBEEF", "orders-p0-a0-s0", "orders-b1-p0-e1", "orders-r",
            "orders-2pc-check"]


def test_no_id_of_one_accepted_prefix_is_claimed_by_another():
    """Every id a sink of an accepted prefix makes (pooled, with a run tag or none, including run
    tags spelled like another prefix's end; incrementing) belongs to that prefix alone, so no
    sweep ever fences another query's transaction."""
    base = {"kafka.bootstrap.servers": "h:1", "checkpointLocation": "/c"}
    accepted = {}
    for prefix in PREFIXES:
        try:
            accepted[prefix] = KafkaSinkOptions.from_options(
                {**base, "transactionalIdPrefix": prefix})
        except InvalidOptionError:
            continue
    assert "orders-r0123abcd" not in accepted and len(accepted) == len(PREFIXES) - 1
    for prefix, opts in accepted.items():
        ids = [opts.pooled_transactional_id(p, a, s, run)
               for run in (None, "0123abcd", "deadbeef") for p in (0, 3) for a in (0, 1)
               for s in (0, 2)]
        ids += [opts.transactional_id(7, 3, e, attempt=a) for e in (None, 2) for a in (0, 1)]
        for other in accepted:
            for tid in ids:
                assert is_sink_transactional_id(other, tid) == (other == prefix), (other, tid)


def _writer(tmp_path, **extra):
    return KafkaTwoPhaseCommitWriter({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out",
                                      "transactionalIdPrefix": "x",
                                      "checkpoint.storage": str(tmp_path / "storage"),
                                      "checkpointLocation": str(tmp_path / "chk"), **extra},
                                     SCHEMA)


def _record(writer, batch_id, tids, committed=()):
    handles = [{"transactional_id": t, "producer_id": 1, "producer_epoch": 0,
                "batch_id": batch_id, "partition_id": 0, "checkpoint_id": i + 1, "records": 1,
                "partitions": []} for i, t in enumerate(tids)]
    done = {f"b{batch_id}-p0-e{i + 1}": i + 1 for i, t in enumerate(tids) if t in committed}
    writer.committer().backend.put(batch_path(batch_id), json.dumps(
        {"batch_id": batch_id, "handles": handles, "barriers": [], "acks": [],
         "committed": done, "records": len(tids)}).encode())


def test_a_recorded_transaction_keeps_its_id_until_it_is_committed(tmp_path):
    """The driver snapshots the ids of recorded, unfinished transactions when Spark pickles the
    writer for a batch's tasks; the tasks never reuse one of them (a new producer's
    init_transactions would abort a transaction a checkpoint still has to commit)."""
    _record(_writer(tmp_path), 3, ["x-p0-a0-s0", "x-p0-a0-s1"], committed={"x-p0-a0-s0"})
    task = pickle.loads(pickle.dumps(_writer(tmp_path)))  # batch 4's tasks
    assert task.next_transactional_id(4, 0, 0, 2) == "x-p0-a0-s0"  # its transaction committed
    assert task.next_transactional_id(4, 0, 0, 3) == "x-p0-a0-s2"  # s1 is still pre-committed
    _record(_writer(tmp_path), 3, ["x-p0-a0-s0", "x-p0-a0-s1"],
            committed={"x-p0-a0-s0", "x-p0-a0-s1"})
    task = pickle.loads(pickle.dumps(_writer(tmp_path)))  # batch 5's tasks
    assert task.next_transactional_id(5, 0, 0, 3) == "x-p0-a0-s0"
    assert task.next_transactional_id(5, 0, 0, 4) == "x-p0-a0-s1"


def test_a_writer_not_shipped_by_spark_refuses_to_guess(tmp_path):
    with pytest.raises(RuntimeError, match="not pickled"):
        _writer(tmp_path).next_transactional_id(0, 0, 0, 1)


def test_incrementing_strategy_keeps_the_old_names(tmp_path):
    writer = _writer(tmp_path, **{"transaction.naming.strategy": "incrementing"})
    assert writer.next_transactional_id(7, 3, 1, 2) == "x-b7-p3-a1-e2"


def test_finished_older_records_are_read_once_per_process(tmp_path):
    """The driver computes the ids in use before every batch: finished records older than the
    newest (which only a replay could record again) are not read again, so the cost per batch
    stays flat on S3 (issue 13)."""
    w = _writer(tmp_path)
    for b in (1, 2, 3):
        _record(w, b, ["x-p0-a0-s0"], committed={"x-p0-a0-s0"})
    _record(w, 4, ["x-p0-a0-s1"])
    committer = w.committer()
    reads = []
    real_get = committer.backend.get
    committer.backend.get = lambda path: reads.append(path) or real_get(path)
    assert committer.recorded_open_names() == {"x-p0-a0-s1"}
    reads.clear()
    _record(w, 4, ["x-p0-a0-s1"], committed={"x-p0-a0-s1"})  # batch 4 commits
    assert committer.recorded_open_names() == set()
    # batches 1-3 were finished: not read again (the run start is: a new run forgets them)
    assert reads == ["_run.json", batch_path(4)]

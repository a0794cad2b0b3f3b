"""Issue 13: an executor's Python worker reuses its transactional producers across batches
(:mod:`barrier_sink.producer_reuse`), on a real broker. A reused producer must behave exactly as
a new one toward the transaction coordinator: it initialises the new id (fencing and aborting
what the id had open), and nothing of its previous transaction carries over."""

from __future__ import annotations

import uuid

import pytest

from barrier_sink import producer_reuse
from barrier_sink.lingering import list_lingering
from barrier_sink.transaction import (EndResult, TransactionalWriter, commit_handle,
                                      fence_and_abort)
from integration_tests.sink_support import read_committed_topic


@pytest.fixture
def config(bootstrap):
    # A setting of its own keeps other tests' parked producers out of these counts.
    return {"bootstrap_servers": bootstrap, "client_id": "reuse-" + uuid.uuid4().hex[:6]}


def _writer(config, tid):
    return TransactionalWriter(config, tid, 60_000, 0, 0, 1).open()


def _pre_commit(writer, topic, value):
    writer.send(topic, value)
    handle = writer.pre_commit()
    writer.close_without_finishing()
    return handle


def test_the_next_transaction_takes_over_the_parked_producer(config, topic_factory):
    topic, prefix = topic_factory(1, prefix="reuse"), "reuse-" + uuid.uuid4().hex[:6]
    first = _writer(config, f"{prefix}-p0-a0-s0")
    producer = first._producer
    h1 = _pre_commit(first, topic, b"one")
    assert producer_reuse.parked_count() >= 1
    second = _writer(config, f"{prefix}-p1-a0-s0")
    assert second._producer is producer  # connections and I/O thread reused
    h2 = _pre_commit(second, topic, b"two")
    assert (h1.transactional_id, h2.transactional_id) == (f"{prefix}-p0-a0-s0",
                                                          f"{prefix}-p1-a0-s0")
    assert h1.producer_id != h2.producer_id  # each id initialised for itself
    assert h2.partitions == [[topic, 0]] and h2.records == 1
    assert [commit_handle(config, h) for h in (h1, h2)] == [EndResult.COMMITTED] * 2
    assert sorted(read_committed_topic(config["bootstrap_servers"], topic)) == [b"one", b"two"]
    assert list_lingering(config, prefix) == []


def test_a_reused_producer_initialises_its_id_like_a_new_one(config, topic_factory):
    """The id's earlier transaction was fenced by the driver (a replay's cleanup): the parked
    producer reopening the id gets a new epoch and commits only its own records."""
    topic, tid = topic_factory(1, prefix="reuse_fence"), f"reuse-{uuid.uuid4().hex[:6]}-p0-a0-s0"
    stale = _pre_commit(_writer(config, tid), topic, b"stale")
    fence_and_abort(config, tid)
    again = _writer(config, tid)
    fresh = _pre_commit(again, topic, b"fresh")
    assert (fresh.producer_id, fresh.producer_epoch) != (stale.producer_id, stale.producer_epoch)
    assert commit_handle(config, stale) is EndResult.FENCED
    assert commit_handle(config, fresh) is EndResult.COMMITTED
    assert read_committed_topic(config["bootstrap_servers"], topic) == [b"fresh"]


def test_failed_producers_are_closed_and_parking_is_bounded(config, topic_factory):
    topic, prefix = topic_factory(1, prefix="reuse_bound"), "reuse-" + uuid.uuid4().hex[:6]
    before = producer_reuse.parked_count()
    aborted = _writer(config, f"{prefix}-p0-a0-s0")
    producer = aborted._producer
    aborted.send(topic, b"x")
    aborted.abort()
    assert producer_reuse.parked_count() == before and producer._closed
    open_now = [_writer(config, f"{prefix}-p{i}-a0-s0") for i in range(producer_reuse.MAX_IDLE + 2)]
    handles = [_pre_commit(w, topic, b"v%d" % i) for i, w in enumerate(open_now)]
    assert producer_reuse.parked_count() == before + producer_reuse.MAX_IDLE
    assert all(commit_handle(config, h) is EndResult.COMMITTED for h in handles)


def test_the_previous_coordinator_is_guessed_only_while_it_is_in_the_cluster(config,
                                                                               topic_factory):
    """The reused producer sends its InitProducerId straight to the previous id's coordinator
    (no FindCoordinator). A coordinator that is no longer in the cluster is not guessed: the
    sender would wait for it until max_block_ms (here 8 s) and the open would fail."""
    config = {**config, "max_block_ms": 8_000}
    topic, prefix = topic_factory(1, prefix="guess"), "guess-" + uuid.uuid4().hex[:6]
    first = _writer(config, f"{prefix}-p0-a0-s0")
    producer = first._producer
    coordinator = producer._transaction_manager._transaction_coordinator
    assert coordinator is not None
    h1 = _pre_commit(first, topic, b"one")
    second = _writer(config, f"{prefix}-p1-a0-s0")
    assert second._producer is producer
    assert second._producer._transaction_manager._transaction_coordinator == coordinator
    h2 = _pre_commit(second, topic, b"two")
    producer._transaction_manager._transaction_coordinator = 999  # a broker that left
    third = _writer(config, f"{prefix}-p2-a0-s0")
    assert third._producer is producer
    h3 = _pre_commit(third, topic, b"three")
    for h in (h1, h2, h3):
        assert commit_handle(config, h) is EndResult.COMMITTED
    assert sorted(read_committed_topic(config["bootstrap_servers"], topic)) == [
        b"one", b"three", b"two"]


def test_driver_commits_reuse_their_producers(config, topic_factory):
    """The driver finishes transactions through resumed producers; after an EndTxn was
    answered the producer is parked for the next handle (commit of 2 transactions: 65 -> 23 ms,
    benchmarks/bench_commit.py). A fenced handle's producer is closed, never parked, and a
    replayed commit of a committed handle still succeeds."""
    topic, prefix = topic_factory(1, prefix="driver"), "driver-" + uuid.uuid4().hex[:6]
    handles = [_pre_commit(_writer(config, f"{prefix}-p{i}-a0-s0"), topic, b"v%d" % i)
               for i in range(3)]
    fenced = _pre_commit(_writer(config, f"{prefix}-p9-a0-s0"), topic, b"lost")
    fence_and_abort(config, fenced.transactional_id)
    before = producer_reuse.counts()
    assert [commit_handle(config, h) for h in handles] == [EndResult.COMMITTED] * 3
    after = producer_reuse.counts()
    assert after["created"] - before["created"] <= 1 and after["reused"] - before["reused"] >= 2
    parked = producer_reuse.parked_count()
    assert commit_handle(config, fenced) is EndResult.FENCED
    assert producer_reuse.parked_count() == parked - 1  # taken for the fenced one and closed
    assert commit_handle(config, handles[0]) is EndResult.COMMITTED  # replayed: idempotent
    assert sorted(read_committed_topic(config["bootstrap_servers"], topic)) == [
        b"v0", b"v1", b"v2"]

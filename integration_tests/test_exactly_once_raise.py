"""Exactly-once when a protocol step *raises* (a broker timeout, a failed storage put, a failing
task) instead of the whole pipeline being killed: Spark then aborts the batch (``writer.abort``
after a failed ``commit``) and the query fails; an operator restarts it in a new Spark session.

One pipeline per sink is failed at every protocol step in turn (each restart fails at the next
step; the file sink at the steps where its own code or files differ, ``FILES_SINK_POINTS``, and
at every step with ``BARRIER_KAFKA_SLOW=1``), then run to the end. After every failure the
committed output is a duplicate-free prefix; at the end every expected record is there exactly
once, no transaction of the sink is open, and the consumer group's offsets equal the last
completed checkpoint. Before issue 12, a raise after ``chk-n/_metadata`` made ``abort`` roll back
the completed checkpoint's transactions and every restart then failed in recovery.
"""

from __future__ import annotations

import os
import uuid

import pytest

from barrier_core.faults import FaultPoint, fault_env
from integration_tests.pipeline_support import (PACKED_SOURCE, RECOMMENDED_OPERATOR,
                                                RUNTIMES_IN_BACKEND, produce_input,
                                                run_fault_chain)

RECORDS = 80_000
KEYS = 499
BATCH = 6_000


@pytest.fixture(scope="module")
def raise_input(kafka_admin, bootstrap):
    return produce_input(kafka_admin, bootstrap, RECORDS, KEYS)


#: Steps every pipeline passes; ``operator_runtime`` only with ``runtime_store="backend"``.
SPARK_STORE_POINTS = [p for p in FaultPoint if p is not FaultPoint.OPERATOR_RUNTIME]

#: The steps of ``SPARK_STORE_POINTS`` after which the file sink's state or its ``abort`` differ:
#: a task failing before, while and after staging its files (Spark's abort then has no message
#: of it), the driver's commit failing with the batch recorded (the abort compares the tasks'
#: files with the record's), after ``_metadata``, and between publishing files. A failure at
#: the others leaves it as one of these does (the keyed operator's snapshot: no file staged;
#: the commit before the batch record: as before ``_metadata``, with no record to compare; the
#: group offsets: every file published); the Kafka sink's chain fails there.
FILES_SINK_POINTS = SPARK_STORE_POINTS if os.environ.get("BARRIER_KAFKA_SLOW") else [
    FaultPoint.TASK_OPEN, FaultPoint.TASK_WRITE, FaultPoint.AFTER_PRECOMMIT,
    FaultPoint.COMMIT_BEFORE_METADATA, FaultPoint.COMMIT_AFTER_METADATA,
    FaultPoint.COMMIT_MID_TRANSACTIONS, FaultPoint.AFTER_TRANSACTIONS]


def _raise_chain(workdir: str, points) -> list:
    chain = []
    for point in points:
        crash_dir = os.path.join(workdir, f"fail-{point.value}")
        chain.append((point.value, fault_env(crash_dir, fail_at=f"{point.value}:2"),
                      os.path.join(crash_dir, f"failed-{point.value}"),
                      lambda rc: rc not in (0, -9)))  # the failure fails the query
    return chain


@pytest.mark.parametrize("sink", ["kafka", "files"])
def test_raise_at_every_protocol_step_then_restart(sink, bootstrap, raise_input, topic_factory,
                                                   tmp_path):
    output = topic_factory(2, prefix=f"eo_out_raise_{sink}")
    output_path = str(tmp_path / "files-out") if sink == "files" else None
    workdir = str(tmp_path)
    group, prefix = f"eo-raise-{uuid.uuid4().hex[:6]}", f"eo-raise-{uuid.uuid4().hex[:6]}"
    points = SPARK_STORE_POINTS if sink == "kafka" else FILES_SINK_POINTS
    run_fault_chain(bootstrap, raise_input, output, workdir, group, prefix, RECORDS,
                    _raise_chain(workdir, points), BATCH, output_path)


def test_raise_at_the_operator_steps_with_runtimes_in_the_backend(bootstrap, raise_input,
                                                                  topic_factory, tmp_path):
    """With each key group's state between batches in the state backend
    (``runtime_store="backend"``) and the recommended settings: a call raises after its
    snapshots are durable, one after it stored its runtime for the batch and before its rows
    left (``operator_runtime``), a sink task after writing; each failure fails the query, and
    each restart runs the batch again from the runtimes the batch before left."""
    output = topic_factory(2, prefix="eo_out_raise_runtimes")
    workdir = str(tmp_path)
    group, prefix = f"eo-rrt-{uuid.uuid4().hex[:6]}", f"eo-rrt-{uuid.uuid4().hex[:6]}"
    points = [FaultPoint.OPERATOR_SNAPSHOT, FaultPoint.OPERATOR_RUNTIME, FaultPoint.TASK_WRITE]
    run_fault_chain(bootstrap, raise_input, output, workdir, group, prefix, RECORDS,
                    _raise_chain(workdir, points), BATCH,
                    extra_args=RECOMMENDED_OPERATOR + PACKED_SOURCE + RUNTIMES_IN_BACKEND)


def test_a_range_call_whose_snapshot_store_fails_then_restart(bootstrap, raise_input,
                                                               topic_factory, tmp_path):
    """With the recommended settings, one keyed operator call runs a whole range of key groups
    and stores their snapshots together. The third call that stores snapshots raises after its
    blobs landed and before any acknowledgement left (as a storage error while making them
    durable would): the task, the batch and the query fail. Committed output stays a
    duplicate-free prefix, and the restart, which writes the same snapshot paths again, ends
    exactly-once (no open transaction, group offsets at the last completed checkpoint)."""
    output = topic_factory(2, prefix="eo_out_range_snapshot")
    workdir = str(tmp_path)
    group, prefix = f"eo-rsnap-{uuid.uuid4().hex[:6]}", f"eo-rsnap-{uuid.uuid4().hex[:6]}"
    point = FaultPoint.OPERATOR_SNAPSHOT.value
    crash_dir = os.path.join(workdir, "fail")
    chain = [(point, fault_env(crash_dir, fail_at=f"{point}:3"),
              os.path.join(crash_dir, f"failed-{point}"), lambda rc: rc not in (0, -9))]
    run_fault_chain(bootstrap, raise_input, output, workdir, group, prefix, RECORDS, chain,
                    BATCH, extra_args=RECOMMENDED_OPERATOR + PACKED_SOURCE)


def test_a_failed_batch_leaves_no_transaction_open(bootstrap, raise_input, topic_factory,
                                                   tmp_path):
    """A sink task raises after pre-committing (the batch's second task to do so); ``local[2]``
    runs a task once, so the job fails and Spark aborts the batch. The failed task returned no
    message: before stop 61 its pre-committed transaction stayed open until the query's next
    start or ``kafka.transaction.timeout.ms`` (15 minutes by default), and held every
    ``read_committed`` reader of its partitions. Right after the failed run, before any
    restart, Kafka's own ``kafka-transactions list`` shows none of the sink's transactions;
    the restart then ends exactly-once."""
    from integration_tests.pipeline_support import (assert_exactly_once,
                                                    assert_no_open_transactions,
                                                    assert_prefix_exactly_once, run_pipeline)

    output = topic_factory(2, prefix="eo_out_failed_batch")
    workdir = str(tmp_path)
    group, prefix = f"eo-fail-{uuid.uuid4().hex[:6]}", f"eo-fail-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "fail")
    rc = run_pipeline(bootstrap, raise_input, output, workdir, group, prefix,
                      fault_env(crash_dir, fail_at=f"{FaultPoint.AFTER_PRECOMMIT.value}:2"),
                      max_offsets_per_trigger=BATCH)
    assert os.path.exists(os.path.join(crash_dir, "failed-after_precommit")), \
        f"the fault never fired (exit {rc}); see {workdir}/run.log"
    assert rc not in (0, -9), f"the failure did not fail the query (exit {rc})"
    assert_no_open_transactions(bootstrap, prefix)
    assert assert_prefix_exactly_once(bootstrap, output) < RECORDS
    rc = run_pipeline(bootstrap, raise_input, output, workdir, group, prefix,
                      max_offsets_per_trigger=BATCH)
    assert rc == 0, f"final run failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, raise_input, output, workdir, group, prefix, RECORDS)


def test_a_query_stopped_while_a_task_opens_its_transaction_leaves_none_open(
        bootstrap, raise_input, topic_factory, tmp_path):
    """``query.stop()`` while a sink task is about to open its transaction (a test-only delay
    holds the first task there for 1.5 s): Spark fails the job and aborts the batch at once,
    while the batch's tasks are still being cancelled. In random stops of 1-second batches
    (stop 61) such tasks opened their transactions after the abort's sweep, and those stayed
    open until the next start or ``kafka.transaction.timeout.ms``; since stop 62 the abort keeps
    sweeping for a few seconds when a task returned nothing. After the stopped run has ended
    (Spark stopped, so none of its tasks can still write), Kafka's own ``kafka-transactions
    list`` shows none of the sink's transactions open; a restart then ends exactly-once."""
    from integration_tests.pipeline_support import (assert_exactly_once,
                                                    assert_no_open_transactions, run_pipeline)

    output = topic_factory(2, prefix="eo_out_stopped")
    workdir = str(tmp_path)
    group, prefix = f"eo-stop-{uuid.uuid4().hex[:6]}", f"eo-stop-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "stop")
    delayed = os.path.join(crash_dir, f"delayed-{FaultPoint.TASK_OPEN.value}")
    rc = run_pipeline(bootstrap, raise_input, output, workdir, group, prefix,
                      fault_env(crash_dir, delay_at=f"{FaultPoint.TASK_OPEN.value}:1:1.5"),
                      max_offsets_per_trigger=BATCH, extra_args=("--stop-when", delayed))
    assert rc == 0, f"the stopped run failed (exit {rc}); see {workdir}/run.log"
    assert os.path.exists(delayed), f"no task reached the delay; see {workdir}/run.log"
    assert_no_open_transactions(bootstrap, prefix)
    rc = run_pipeline(bootstrap, raise_input, output, workdir, group, prefix,
                      max_offsets_per_trigger=BATCH)
    assert rc == 0, f"final run failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, raise_input, output, workdir, group, prefix, RECORDS)

"""Exactly-once, proven by killing the pipeline: a Kafka -> aligned keyed count -> Kafka
pipeline over 100,000 input records is SIGKILLed (driver JVM, driver Python and every worker,
as one process group) at each step of the checkpoint protocol, restarted from the same
checkpoint location, and its ``read_committed`` output is checked record by record: every
expected output exactly once, consumer-group offsets equal to the last completed checkpoint,
no transaction left open. The same pipeline ending in the Parquet file sink is killed the same
way and its published files are checked the same way, at the steps where the file sink's own
code or files differ (``FILES_SINK_CRASH_POINTS``; every step with ``BARRIER_KAFKA_SLOW=1``).
"""

from __future__ import annotations

import os
import uuid

import pytest

from barrier_core.faults import FaultPoint, fault_env
from integration_tests.pipeline_support import (PACKED_SOURCE, RECOMMENDED_OPERATOR,
                                                RUNTIMES_IN_BACKEND, STATELESS_STREAMS_ADAPTIVE,
                                                assert_exactly_once, kill_chain, produce_input,
                                                run_fault_chain, run_pipeline)

RECORDS = 100_000
KEYS = 997

# (crash point, occurrence): the occurrence puts the crash after at least one completed
# checkpoint, so recovery has committed and uncommitted work to tell apart.
CRASH_POINTS = [
    (FaultPoint.OPERATOR_SNAPSHOT, 3),
    (FaultPoint.TASK_WRITE, 3),
    (FaultPoint.AFTER_PRECOMMIT, 3),
    (FaultPoint.COMMIT_BEFORE_RECORD, 2),
    (FaultPoint.COMMIT_BEFORE_METADATA, 2),
    (FaultPoint.COMMIT_AFTER_METADATA, 2),
    (FaultPoint.COMMIT_MID_TRANSACTIONS, 2),
    (FaultPoint.AFTER_TRANSACTIONS, 2),
    (FaultPoint.BEFORE_OFFSET_COMMIT, 2),
]

#: The steps of ``CRASH_POINTS`` after which the file sink's state differs: its tasks' files
#: staged or not, pre-committed or not, the batch recorded by the driver (its replay aborts the
#: record's files) or not, some or all of a checkpoint's files published. A kill at the others
#: leaves it as one of these does (the keyed operator's snapshot: no file staged; the driver's
#: commit before the batch record: as after the pre-commit; the group offsets: every file
#: published), and the Kafka sink's chain kills there. ``BARRIER_KAFKA_SLOW=1`` kills the file
#: sink at every step.
FILES_SINK_CRASH_POINTS = [p for p, _ in CRASH_POINTS] if os.environ.get("BARRIER_KAFKA_SLOW") \
    else [FaultPoint.TASK_WRITE, FaultPoint.AFTER_PRECOMMIT, FaultPoint.COMMIT_BEFORE_METADATA,
          FaultPoint.COMMIT_AFTER_METADATA, FaultPoint.COMMIT_MID_TRANSACTIONS,
          FaultPoint.AFTER_TRANSACTIONS]


@pytest.fixture(scope="module")
def input_topic(kafka_admin, bootstrap):
    return produce_input(kafka_admin, bootstrap, RECORDS, KEYS)


@pytest.mark.parametrize("sink", ["kafka", "files"])
def test_sigkill_at_every_protocol_step_in_one_run(sink, bootstrap, input_topic, topic_factory,
                                                   tmp_path):
    """One pipeline, killed at every protocol step in turn (each restart dies at the next
    step; the file sink at ``FILES_SINK_CRASH_POINTS``), then run to the end: after every kill
    the committed output (read_committed for the Kafka sink, the published files for the file
    sink) is a duplicate-free prefix, and at the end every expected record is there exactly
    once. The Kafka-sink run reads its four input partitions in two tasks a batch
    (maxPartitions=2), the file-sink run in four."""
    output = topic_factory(2, prefix=f"eo_out_chain_{sink}")
    output_path = str(tmp_path / "files-out") if sink == "files" else None
    workdir = str(tmp_path)
    group, prefix = f"eo-chain-{uuid.uuid4().hex[:6]}", f"eo-chain-{uuid.uuid4().hex[:6]}"
    packing = ("--source-option", "maxPartitions=2") if sink == "kafka" else ()
    points = [point for point, _ in CRASH_POINTS] if sink == "kafka" else FILES_SINK_CRASH_POINTS
    run_fault_chain(bootstrap, input_topic, output, workdir, group, prefix, RECORDS,
                    kill_chain(workdir, points), 8_000,
                    output_path, extra_args=packing)


#: The steps a call of the operator with its runtimes in the state backend adds to or passes
#: on a batch's way (``keyed_process(..., runtime_store="backend")``), in protocol order.
RUNTIME_CRASH_POINTS = [FaultPoint.OPERATOR_SNAPSHOT, FaultPoint.OPERATOR_RUNTIME,
                        FaultPoint.TASK_WRITE, FaultPoint.COMMIT_AFTER_METADATA,
                        FaultPoint.AFTER_TRANSACTIONS]


def test_sigkill_at_each_step_with_runtimes_in_the_backend(bootstrap, input_topic,
                                                          topic_factory, tmp_path):
    """The chain above with each key group's state between batches in the state backend and
    the recommended operator settings (ranges, Arrow records, packed source rows): a kill after
    a batch stored its runtimes but before its rows reached the sink (``operator_runtime``), or
    anywhere later, and every restart runs the batch again from the runtimes the batch before
    left; the output is a duplicate-free prefix after each kill and exactly-once at the end.

    The session runs stateless streams adaptively, as one built without
    ``barrier_kafka.recommended_spark_conf()`` does on Spark 4.1+: each batch's shuffle is a
    Spark job of its own, then the operator and the sink a second one. The other fault tests
    with runtimes in the backend (raise, random kills, task retries and speculation on a
    cluster) run with the recommended settings, one job a batch."""
    output = topic_factory(2, prefix="eo_out_chain_runtimes")
    workdir = str(tmp_path)
    group, prefix = f"eo-rt-{uuid.uuid4().hex[:6]}", f"eo-rt-{uuid.uuid4().hex[:6]}"
    run_fault_chain(bootstrap, input_topic, output, workdir, group, prefix, RECORDS,
                    kill_chain(workdir, RUNTIME_CRASH_POINTS), 8_000,
                    extra_args=RECOMMENDED_OPERATOR + PACKED_SOURCE + RUNTIMES_IN_BACKEND
                    + STATELESS_STREAMS_ADAPTIVE)


@pytest.mark.skipif(not os.environ.get("BARRIER_KAFKA_SLOW"),
                    reason="one fresh pipeline per crash point (~4 min each); "
                           "set BARRIER_KAFKA_SLOW=1")
@pytest.mark.parametrize("point,occurrence", CRASH_POINTS, ids=[p.value for p, _ in CRASH_POINTS])
def test_sigkill_at_each_protocol_step_loses_and_duplicates_nothing(
        point, occurrence, bootstrap, input_topic, topic_factory, tmp_path):
    output = topic_factory(2, prefix=f"eo_out_{point}")
    workdir = str(tmp_path)
    group, prefix = f"eo-{point}-{uuid.uuid4().hex[:6]}", f"eo-{point}-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "crash")
    rc = run_pipeline(bootstrap, input_topic, output, workdir, group, prefix,
                      fault_env(crash_dir, crash_at=f"{point.value}:{occurrence}"))
    assert os.path.exists(os.path.join(crash_dir, "crashed")), \
        f"the pipeline never reached {point} (exit {rc}); see {workdir}/run.log"
    assert rc == -9, f"expected the SIGKILL at {point}, got exit {rc}"
    rc = run_pipeline(bootstrap, input_topic, output, workdir, group, prefix)
    assert rc == 0, f"restart failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, input_topic, output, workdir, group, prefix, RECORDS)

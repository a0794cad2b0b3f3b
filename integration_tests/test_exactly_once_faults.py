"""Exactly-once through other faults: a Kafka broker restart in the middle of the run, and a
failing task whose batch Spark aborts (nothing it wrote may ever become visible): here the
broker refuses the task's records; an injected failure at every protocol step, ``task_write``
included, is test_exactly_once_raise.py's chain."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from kafka.admin import KafkaAdminClient

from barrier_demo.pipeline import PipelineConfig, completed_offsets
from barrier_core.faults import FaultPoint, fault_env
from integration_tests.pipeline_support import (assert_exactly_once, assert_no_open_transactions,
                                                assert_prefix_exactly_once, produce_input,
                                                run_pipeline)
from kafka_harness.broker import KafkaBroker

RECORDS = 40_000
KEYS = 101


def test_records_the_broker_refuses_fail_the_query_and_lose_nothing(bootstrap, kafka_admin,
                                                                   topic_factory, tmp_path):
    """The output topic refuses every record batch (``max.message.bytes`` below a batch's
    size). The first batch's tasks fail with the refusal and the limit named, nothing is
    visible or left open, and once the topic's limit is raised the restarted query writes
    everything exactly once. (Old main failed here only by luck, with kafka-python's 'Cannot
    perform send because at least one previous transactional or idempotent request has
    failed', since later records followed the refused batch; when the refused batch was a
    task's last, it committed the rest and lost it: test_sink_transactions.py.)"""
    from kafka import KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType

    records = 8_000
    topic = topic_factory(4, prefix="eo_refused_in")
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    for i in range(records):  # 200-byte keys: every output record is over 400 bytes
        producer.send(topic, key=b"k%d-" % (i % KEYS) + b"x" * 200, value=b"v%07d" % i)
    producer.flush()
    producer.close()
    # 300 bytes: below any output record batch, above the transaction markers the broker
    # writes when the refused transactions are aborted
    output = topic_factory(2, prefix="eo_refused", configs={"max.message.bytes": "300"})
    workdir = str(tmp_path)
    group, prefix = f"eo-ref-{uuid.uuid4().hex[:6]}", f"eo-ref-{uuid.uuid4().hex[:6]}"
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=4_000)
    log = open(os.path.join(workdir, "run.log")).read()
    assert rc != 0, "records Kafka refused must fail the query"
    assert "RecordsNotWrittenError" in log and "max.message.bytes" in log
    assert assert_prefix_exactly_once(bootstrap, output) == 0
    assert_no_open_transactions(bootstrap, prefix)
    kafka_admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, output,
                                              configs={"max.message.bytes": "1048588"})])
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=4_000)
    assert rc == 0
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, records)


def test_broker_killed_and_restarted_during_the_run(tmp_path):
    """A dedicated broker is SIGKILLed while the pipeline runs and started again on the same
    ports and log directory (log and transaction-state recovery); if the query fails during the
    outage it is restarted, as an operator would. The outcome must still be exactly-once."""
    broker = KafkaBroker(data_dir=str(tmp_path / "broker")).start()
    try:
        bootstrap = broker.bootstrap
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        topic = produce_input(admin, bootstrap, RECORDS, KEYS)
        from kafka_harness.topics import create_topic

        output = create_topic(admin, "eo_restart_out_" + uuid.uuid4().hex[:6], 2)
        admin.close()
        workdir = str(tmp_path / "work")
        os.makedirs(workdir)
        group, prefix = f"eo-rs-{uuid.uuid4().hex[:6]}", f"eo-rs-{uuid.uuid4().hex[:6]}"
        cfg = PipelineConfig(bootstrap, topic, output, workdir, group, prefix)
        cmd = [sys.executable, "-m", "barrier_demo.pipeline", "--bootstrap", bootstrap,
               "--input", topic, "--output", output, "--workdir", workdir, "--group", group,
               "--prefix", prefix, "--max-offsets-per-trigger", "5000", "--timeout", "600"]
        with open(os.path.join(workdir, "run.log"), "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            deadline = time.monotonic() + 300
            while completed_offsets(cfg) is None:  # wait for the first completed checkpoint
                assert proc.poll() is None, "pipeline ended before its first checkpoint"
                assert time.monotonic() < deadline, "no checkpoint completed within 300s"
                time.sleep(0.5)
            broker.restart(hard=True)
            try:
                rc = proc.wait(timeout=660)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                raise
        restarts = 0
        while rc != 0 and restarts < 2:  # the query may have failed while the broker was down
            restarts += 1
            rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                              max_offsets_per_trigger=5000)
        assert rc == 0, f"pipeline did not finish after the broker restart; see {workdir}/run.log"
        assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, RECORDS)
    finally:
        broker.stop()


def test_checkpoint_location_spelled_three_ways(bootstrap, kafka_admin, topic_factory,
                                                tmp_path):
    """Issue 12, hole 5: the default transactionalIdPrefix hashed the raw checkpointLocation.
    The same query restarted with ``file:///x/`` after ``/x`` got new transactional ids on the
    same storage, and recovery committed the old ids and the replay's new ids alike. Killed
    after a checkpoint completed (nothing committed yet), restarted under another spelling and
    killed mid-commit, then run to the end under a third: exactly-once."""
    from barrier_sink.options import KafkaSinkOptions

    topic = produce_input(kafka_admin, bootstrap, 30_000, KEYS)
    output = topic_factory(2, prefix="eo_spell")
    workdir = str(tmp_path)
    location = os.path.join(workdir, "spark-checkpoint")
    spellings = [location, f"file://{location}/", location + "/"]
    group = f"eo-spell-{uuid.uuid4().hex[:6]}"
    crashes = [FaultPoint.COMMIT_AFTER_METADATA, FaultPoint.COMMIT_MID_TRANSACTIONS, None]
    for spelling, point in zip(spellings, crashes):
        env = (fault_env(os.path.join(workdir, f"crash-{point.value}"),
                         crash_at=f"{point.value}:2") if point else None)
        rc = run_pipeline(bootstrap, topic, output, workdir, group, "", env,
                          max_offsets_per_trigger=5_000, checkpoint_location=spelling)
        assert rc == (-9 if point else 0), f"exit {rc} with {spelling!r}; see run.log"
        assert_prefix_exactly_once(bootstrap, output)
    prefix = KafkaSinkOptions.from_options({"kafka.bootstrap.servers": bootstrap,
                                            "checkpointLocation": location}
                                           ).transactional_id_prefix
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, 30_000)


def test_restart_slower_than_the_checkpoint_timeout(bootstrap, kafka_admin, topic_factory,
                                                    tmp_path):
    """Issue 12 (found by the random-kill soak): the first checkpoint was pending when the
    query died, and the query came back after ``execution.checkpointing.timeout``. Old main
    measured the timeout from the trigger, so the restarted run's first commit expired the
    checkpoint and, with no tolerated failures, failed the query again (and every restart that
    took as long). The time the query is down must not count: the restarted run completes the
    checkpoint and the pipeline ends exactly-once.

    The first run keeps the default timeout: its first batch (Python workers starting) must reach
    the crash point, not expire on a busy machine (CI saw it expire at 20 s)."""
    timeout_ms = 30_000
    topic = produce_input(kafka_admin, bootstrap, 20_000, KEYS)
    output = topic_factory(2, prefix="eo_slow_restart")
    workdir = str(tmp_path)
    group, prefix = f"eo-slow-{uuid.uuid4().hex[:6]}", f"eo-slow-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "crash")
    args = ["--sink-option", f"execution.checkpointing.timeout={timeout_ms}"]
    point = FaultPoint.COMMIT_BEFORE_METADATA.value
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      fault_env(crash_dir, crash_at=f"{point}:1"), max_offsets_per_trigger=5_000)
    crashed = os.path.join(crash_dir, "crashed")
    assert rc == -9 and os.path.exists(crashed), f"exit {rc}; see {workdir}/run.log"
    # Checkpoint 1 was triggered before the crash; stay down until its timeout has passed.
    down_until = os.path.getmtime(crashed) + timeout_ms / 1000 + 1
    while time.time() < down_until:
        time.sleep(down_until - time.time())
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=5_000, extra_args=args)
    assert rc == 0, f"the restarted query failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, 20_000)


def test_checkpoint_expired_in_a_running_query(bootstrap, kafka_admin, topic_factory, tmp_path):
    """Checkpoint expiry end to end: one sink task of a batch is slowed past
    ``execution.checkpointing.timeout``, so the checkpoint that batch carries has expired by the
    time the batch commits. With one tolerated failure the query goes on: the expired
    checkpoint's transactions are not lost but committed with the next completed checkpoint, the
    next checkpoint triggers (the expired one released its slot) and the output is exactly-once,
    with the expiry recorded in the checkpoint statistics."""
    from state_backends.registry import backend_from_uri
    from state_backends.stats import FAILED, load_all_stats

    topic = produce_input(kafka_admin, bootstrap, 20_000, KEYS)
    output = topic_factory(2, prefix="eo_expire")
    workdir = str(tmp_path)
    group, prefix = f"eo-exp-{uuid.uuid4().hex[:6]}", f"eo-exp-{uuid.uuid4().hex[:6]}"
    # Far above an ordinary batch on a busy machine (a few seconds), far below the delay.
    timeout_ms = 25_000
    args = ["--sink-option", f"execution.checkpointing.timeout={timeout_ms}",
            "--sink-option", "execution.checkpointing.tolerable-failed-checkpoints=1"]
    slow = f"{FaultPoint.TASK_WRITE.value}:3:{timeout_ms / 1000 + 15}"
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      fault_env(os.path.join(workdir, "delay"), delay_at=slow),
                      max_offsets_per_trigger=5_000, extra_args=args)
    assert rc == 0, f"exit {rc}; see {workdir}/run.log"
    stats = load_all_stats(backend_from_uri(os.path.join(workdir, "storage")))
    expired = [s for s in stats if s.status == FAILED]
    assert len(expired) == 1 and "CHECKPOINT_EXPIRED" in expired[0].failure_reason, \
        [(s.checkpoint_id, s.status, s.failure_reason) for s in stats]
    assert max(s.checkpoint_id for s in stats) > expired[0].checkpoint_id
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, 20_000)


def test_a_kill_in_the_first_offset_log_write_does_not_block_the_restart(bootstrap, kafka_admin,
                                                                       topic_factory, tmp_path):
    """The random-kill test once killed a new pipeline while Spark wrote ``offsets/0``: the kill
    left Spark's temporary ``offsets/.0.<uuid>.tmp`` (and its checksum), and on Spark 4.1+ every
    restart then failed at once with STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY. The same
    leftovers are laid here; the restarted pipeline (which clears them before ``start()``,
    ``barrier_kafka.spark_checkpoint``) runs to the end exactly once."""
    from tests.test_spark_checkpoint import killed_in_first_write

    records = 6_000
    topic = produce_input(kafka_admin, bootstrap, records, KEYS)
    output = topic_factory(2, prefix="eo_out_dead_first_write")
    workdir = str(tmp_path)
    group, prefix = f"eo-dfw-{uuid.uuid4().hex[:6]}", f"eo-dfw-{uuid.uuid4().hex[:6]}"
    dead = killed_in_first_write(os.path.join(workdir, "spark-checkpoint"))
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=2_000)
    assert rc == 0, f"the restart failed (exit {rc}); see {workdir}/run.log"
    assert not any(os.path.exists(p) for p in dead)
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, records)

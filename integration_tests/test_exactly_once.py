"""Exactly-once, proven by killing the pipeline: a Kafka -> aligned keyed count -> Kafka
pipeline over 200,000 input records is SIGKILLed (driver JVM, driver Python and every worker,
as one process group) at each step of the checkpoint protocol, restarted from the same
checkpoint location, and its ``read_committed`` output is checked record by record: every
expected output exactly once, consumer-group offsets equal to the last completed checkpoint,
no transaction left open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from barrier_demo.verify import verify
from barrier_sink.lingering import list_lingering
from kafka_harness.topics import create_topic

RECORDS = 200_000
KEYS = 997
PIPELINE_TIMEOUT_S = 900

# (crash point, occurrence): the occurrence puts the crash after at least one completed
# checkpoint, so recovery has committed and uncommitted work to tell apart.
CRASH_POINTS = [
    ("task_write", 3),
    ("after_precommit", 3),
    ("commit_before_record", 2),
    ("commit_before_metadata", 2),
    ("commit_after_metadata", 2),
    ("commit_mid_transactions", 2),
    ("before_offset_commit", 2),
]


@pytest.fixture(scope="module")
def input_topic(kafka_admin, bootstrap):
    name = "eo_in_" + uuid.uuid4().hex[:8]
    create_topic(kafka_admin, name, 4)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024,
                             acks=1)
    for i in range(RECORDS):
        producer.send(name, key=b"k%d" % (i % KEYS), value=b"v%07d" % i)
    producer.flush(timeout=120)
    producer.close()
    return name


def run_pipeline(bootstrap, input_topic, output, workdir, group, prefix, env_extra=None):
    env = dict(os.environ)
    env.pop("BARRIER_KAFKA_CRASH_AT", None)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "barrier_demo.pipeline", "--bootstrap", bootstrap,
           "--input", input_topic, "--output", output, "--workdir", workdir, "--group", group,
           "--prefix", prefix, "--max-offsets-per-trigger", "40000",
           "--timeout", str(PIPELINE_TIMEOUT_S)]
    with open(os.path.join(workdir, "run.log"), "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=PIPELINE_TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            raise


def group_offsets(bootstrap, group, topic):
    from kafka import TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        got = admin.list_group_offsets({group: tps})[group]
    finally:
        admin.close()
    return {str(tp.partition): om.offset for tp, om in got.items()}


def assert_exactly_once(bootstrap, input_topic, output, workdir, group, prefix):
    verdict = verify(bootstrap, input_topic, output)
    assert verdict.input_records == RECORDS
    assert (verdict.duplicates, verdict.lost, verdict.unexpected) == (0, 0, 0), verdict
    assert verdict.output_records == RECORDS
    assert list_lingering({"bootstrap_servers": bootstrap}, prefix) == []
    with open(os.path.join(workdir, "storage", "_completed_offsets.json")) as f:
        completed = json.load(f)
    assert sum(completed["offsets"][input_topic].values()) == RECORDS
    # The source commits the last checkpoint's offsets to the group (also when idle).
    assert group_offsets(bootstrap, group, input_topic) == completed["offsets"][input_topic]


@pytest.mark.slow
@pytest.mark.parametrize("point,occurrence", CRASH_POINTS, ids=[p for p, _ in CRASH_POINTS])
def test_sigkill_at_each_protocol_step_loses_and_duplicates_nothing(
        point, occurrence, bootstrap, input_topic, topic_factory, tmp_path):
    output = topic_factory(2, prefix=f"eo_out_{point}")
    workdir = str(tmp_path)
    group, prefix = f"eo-{point}-{uuid.uuid4().hex[:6]}", f"eo-{point}-{uuid.uuid4().hex[:6]}"
    crash_dir = os.path.join(workdir, "crash")
    rc = run_pipeline(bootstrap, input_topic, output, workdir, group, prefix,
                      {"BARRIER_KAFKA_CRASH_AT": f"{point}:{occurrence}",
                       "BARRIER_KAFKA_CRASH_DIR": crash_dir})
    assert os.path.exists(os.path.join(crash_dir, "crashed")), \
        f"the pipeline never reached {point} (exit {rc}); see {workdir}/run.log"
    assert rc == -9, f"expected the SIGKILL at {point}, got exit {rc}"
    rc = run_pipeline(bootstrap, input_topic, output, workdir, group, prefix,
                      {"BARRIER_KAFKA_CRASH_DIR": crash_dir})
    assert rc == 0, f"restart failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, input_topic, output, workdir, group, prefix)

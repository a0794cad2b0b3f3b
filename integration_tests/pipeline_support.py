"""Helpers of the exactly-once tests: input production, the pipeline as a killable child
process group, and the read_committed checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from barrier_demo.verify import verify
from barrier_sink.lingering import list_lingering
from kafka_harness.topics import create_topic

PIPELINE_TIMEOUT_S = 900


def produce_input(admin, bootstrap: str, records: int, keys: int, partitions: int = 4) -> str:
    """A new topic holding ``records`` records with keys ``k0 .. k<keys-1>``."""
    name = "eo_in_" + uuid.uuid4().hex[:8]
    create_topic(admin, name, partitions)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024,
                             acks=1)
    for i in range(records):
        producer.send(name, key=b"k%d" % (i % keys), value=b"v%07d" % i)
    producer.flush(timeout=120)
    producer.close()
    return name


def run_pipeline(bootstrap, input_topic, output, workdir, group, prefix, env_extra=None,
                 max_offsets_per_trigger=40_000):
    env = dict(os.environ)
    env.pop("BARRIER_KAFKA_CRASH_AT", None)
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "barrier_demo.pipeline", "--bootstrap", bootstrap,
           "--input", input_topic, "--output", output, "--workdir", workdir, "--group", group,
           "--prefix", prefix, "--max-offsets-per-trigger", str(max_offsets_per_trigger),
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


def assert_exactly_once(bootstrap, input_topic, output, workdir, group, prefix, records):
    """Every expected output exactly once, no open transaction, group offsets = last
    completed checkpoint = the whole input."""
    verdict = verify(bootstrap, input_topic, output)
    assert verdict.input_records == records
    assert (verdict.duplicates, verdict.lost, verdict.unexpected) == (0, 0, 0), verdict
    assert verdict.output_records == records
    assert list_lingering({"bootstrap_servers": bootstrap}, prefix) == []
    with open(os.path.join(workdir, "storage", "_completed_offsets.json")) as f:
        completed = json.load(f)
    assert sum(completed["offsets"][input_topic].values()) == records
    # The source commits the last checkpoint's offsets to the group (also when idle).
    assert group_offsets(bootstrap, group, input_topic) == completed["offsets"][input_topic]


def assert_prefix_exactly_once(bootstrap, output):
    """Mid-run check: what read_committed shows has no duplicate and, per key, is a prefix
    k:1..k:m of the expected output (nothing after a gap)."""
    from collections import Counter, defaultdict

    from barrier_demo.verify import read_topic

    got = Counter(read_topic(bootstrap, output))
    dups = {v: n for v, n in got.items() if n > 1}
    assert not dups, f"duplicates visible to read_committed: {list(dups.items())[:5]}"
    per_key = defaultdict(set)
    for v in got:
        key, _, i = v.decode().rpartition(":")
        per_key[key].add(int(i))
    gaps = {k: sorted(ix)[:3] for k, ix in per_key.items() if ix != set(range(1, len(ix) + 1))}
    assert not gaps, f"keys whose committed output has a gap: {list(gaps.items())[:5]}"
    return sum(got.values())

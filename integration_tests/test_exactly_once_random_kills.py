"""Exactly-once under SIGKILLs at uniformly random times, not only at the named protocol steps.

Kafka's own ``VerifiableProducer`` writes the input (value = sequence number, keys ``0 .. K-1`` in
turn). The pipeline (barrier-kafka source -> aligned keyed running count -> 2PC Kafka sink) is
started, and after a delay drawn uniformly from ``[0.5 s, 14 s]`` its whole process tree (driver
JVM, driver Python, every Python worker) is SIGKILLed; this repeats ``KILLS`` times (20 by
default, 100 with ``BARRIER_KAFKA_SLOW=1``, or ``BARRIER_KAFKA_RANDOM_KILLS=<n>``), then a last
run finishes. After every kill the ``read_committed`` output is a duplicate-free prefix. At the
end every input sequence number is in the output exactly once (output ``k:i`` is the i-th record
of key k, i.e. sequence number ``k + (i - 1) * K``), Kafka's ``kafka-transactions`` tool lists no
open transaction of the sink and ``kafka-consumer-groups`` shows the last completed checkpoint.
The seed is printed and can be replayed with ``BARRIER_KAFKA_RANDOM_SEED``.

Every other run (the second, the fourth, ..., and the last) reads with the source packing its
records per key group of the operator (``packedKeyGroups``): both layouts are killed at random,
and each restart changes the layout under the same checkpoint.
"""

from __future__ import annotations

import os
import random
import uuid
from collections import Counter

import pytest

from barrier_demo.verify import read_topic
from integration_tests.pipeline_support import (PACKED_SOURCE, assert_no_open_transactions,
                                                assert_offsets_committed, kill_at_random_times,
                                                run_pipeline, start_pipeline_process)
from kafka_harness.tools import verifiable_produce
from kafka_harness.topics import create_topic


def _kills(default: int = 20) -> int:
    if os.environ.get("BARRIER_KAFKA_RANDOM_KILLS"):
        return int(os.environ["BARRIER_KAFKA_RANDOM_KILLS"])
    return 100 if os.environ.get("BARRIER_KAFKA_SLOW") else default


KILLS = _kills()
KEYS = 97
BATCH = 3_000


def kill_at_random_then_exactly_once(bootstrap, kafka_admin, topic_factory, tmp_path,
                                     kills: int, args=(), per_kill: int = 4_500):
    """``kills`` SIGKILLs at uniformly random times of a pipeline run with ``args`` (the
    source's packed rows on every other run, and on the last), then a last run: every input
    record is in the ``read_committed`` output exactly once, nothing is open, and the group is
    at the last completed checkpoint (the module docstring)."""
    seed = int(os.environ.get("BARRIER_KAFKA_RANDOM_SEED", random.randrange(1 << 30)))
    print(f"random kill seed: {seed} (replay with BARRIER_KAFKA_RANDOM_SEED={seed})")
    rng = random.Random(seed)
    # Enough input that no run finishes before its kill (90,000 for 20 kills with the
    # defaults' 4,500 a kill; a faster layout needs more a kill).
    records = per_kill * kills
    topic = create_topic(kafka_admin, "eo_rand_in_" + uuid.uuid4().hex[:8], 4)
    verifiable_produce(bootstrap, topic, records, KEYS)
    output = topic_factory(2, prefix="eo_rand_out")
    workdir = str(tmp_path)
    group, prefix = f"eo-rand-{uuid.uuid4().hex[:6]}", f"eo-rand-{uuid.uuid4().hex[:6]}"
    runs = []

    def start():
        runs.append(tuple(args) + (PACKED_SOURCE if len(runs) % 2 else ()))
        return start_pipeline_process(bootstrap, topic, output, workdir, group, prefix,
                                      max_offsets_per_trigger=BATCH, extra_args=runs[-1])

    visible = kill_at_random_times(rng, kills, start, bootstrap, output)
    print(f"output visible after each kill: {visible} (the last run does the rest)")
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=BATCH, extra_args=tuple(args) + PACKED_SOURCE)
    assert rc == 0, f"final run failed (exit {rc}); see {workdir}/run.log"
    sequence = Counter()
    for value in read_topic(bootstrap, output):
        key, _, i = value.decode().rpartition(":")
        sequence[int(key) + (int(i) - 1) * KEYS] += 1
    lost = [s for s in range(records) if sequence[s] == 0]
    duplicated = {s: n for s, n in sequence.items() if n > 1}
    unexpected = [s for s in sequence if not 0 <= s < records]
    print(f"random kills: {kills} kills, {records} records, {len(lost)} lost, "
          f"{len(duplicated)} duplicated, {len(unexpected)} unexpected")
    assert (lost[:5], list(duplicated.items())[:5], unexpected[:5]) == ([], [], [])
    assert_no_open_transactions(bootstrap, prefix)
    assert_offsets_committed(bootstrap, topic, workdir, group, records)


@pytest.mark.timeout(300 + 25 * KILLS)  # each kill: up to 14 s of run plus a restart
def test_sigkill_at_uniformly_random_times(bootstrap, kafka_admin, topic_factory, tmp_path):
    kill_at_random_then_exactly_once(bootstrap, kafka_admin, topic_factory, tmp_path, KILLS)

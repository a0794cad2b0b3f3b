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
from integration_tests.pipeline_support import (assert_no_open_transactions,
                                                assert_offsets_committed, kill_at_random_times,
                                                run_pipeline, start_pipeline_process)
from kafka_harness.tools import verifiable_produce
from kafka_harness.topics import create_topic


def _kills() -> int:
    if os.environ.get("BARRIER_KAFKA_RANDOM_KILLS"):
        return int(os.environ["BARRIER_KAFKA_RANDOM_KILLS"])
    return 100 if os.environ.get("BARRIER_KAFKA_SLOW") else 20


KILLS = _kills()
# Enough input that no run finishes before its kill, however many kills (90,000 for 20).
RECORDS = 4_500 * KILLS
KEYS = 97
BATCH = 3_000
#: The pipeline's arguments for a packed run (its operator's max_parallelism is 16).
PACKED = ("--source-option", "packedKeyGroups=16")


@pytest.mark.timeout(300 + 25 * KILLS)  # each kill: up to 14 s of run plus a restart
def test_sigkill_at_uniformly_random_times(bootstrap, kafka_admin, topic_factory, tmp_path):
    seed = int(os.environ.get("BARRIER_KAFKA_RANDOM_SEED", random.randrange(1 << 30)))
    print(f"random kill seed: {seed} (replay with BARRIER_KAFKA_RANDOM_SEED={seed})")
    rng = random.Random(seed)
    topic = create_topic(kafka_admin, "eo_rand_in_" + uuid.uuid4().hex[:8], 4)
    verifiable_produce(bootstrap, topic, RECORDS, KEYS)
    output = topic_factory(2, prefix="eo_rand_out")
    workdir = str(tmp_path)
    group, prefix = f"eo-rand-{uuid.uuid4().hex[:6]}", f"eo-rand-{uuid.uuid4().hex[:6]}"
    runs = []

    def start():
        runs.append(PACKED if len(runs) % 2 else ())
        return start_pipeline_process(bootstrap, topic, output, workdir, group, prefix,
                                      max_offsets_per_trigger=BATCH, extra_args=runs[-1])

    kill_at_random_times(rng, KILLS, start, bootstrap, output)
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=BATCH, extra_args=PACKED)
    assert rc == 0, f"final run failed (exit {rc}); see {workdir}/run.log"
    sequence = Counter()
    for value in read_topic(bootstrap, output):
        key, _, i = value.decode().rpartition(":")
        sequence[int(key) + (int(i) - 1) * KEYS] += 1
    lost = [s for s in range(RECORDS) if sequence[s] == 0]
    duplicated = {s: n for s, n in sequence.items() if n > 1}
    unexpected = [s for s in sequence if not 0 <= s < RECORDS]
    print(f"random kills: {KILLS} kills, {RECORDS} records, {len(lost)} lost, "
          f"{len(duplicated)} duplicated, {len(unexpected)} unexpected")
    assert (lost[:5], list(duplicated.items())[:5], unexpected[:5]) == ([], [], [])
    assert_no_open_transactions(bootstrap, prefix)
    assert_offsets_committed(bootstrap, topic, workdir, group, RECORDS)

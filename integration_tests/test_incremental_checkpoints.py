"""Incremental checkpoints (``keyed_process(..., incremental_checkpoints=True)``) for real: the
pipeline (barrier-kafka source -> keyed running count -> 2PC Kafka sink) over 5,000 keys, of which
each batch touches 1,500, is SIGKILLed at random times and restarted, then finishes. Output is
exactly once, no transaction stays open, the group offsets are the last completed checkpoint's;
that checkpoint's snapshots chain on older checkpoints' deltas, every part is stored, folding them
gives exactly the counts of the input before its cut, and retention left no unreferenced blob.
Then a new query restored from a savepoint of it (in its own storage) continues every key's count
exactly once. ``BARRIER_KAFKA_INCREMENTAL_KILLS`` sets the number of kills (default 3); the seed
replays with ``BARRIER_KAFKA_RANDOM_SEED``."""

from __future__ import annotations

import os
import random
import uuid
from collections import Counter

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from barrier_demo.verify import read_topic
from barrier_ops.testing import snapshot_values
from integration_tests.pipeline_support import (assert_exactly_once, kill_at_random_times,
                                                produce_input, run_pipeline,
                                                start_pipeline_process)
from state_backends.checkpoint_store import CompletedCheckpointStore
from state_backends.registry import backend_from_uri

KILLS = int(os.environ.get("BARRIER_KAFKA_INCREMENTAL_KILLS", "3"))
KEYS = 5_000
BATCH = 1_500
RECORDS = 45_000
EXTRA = 6_000
INCREMENTAL = ["--incremental-checkpoints"]


def keys_before(bootstrap, topic, cut=None):
    """``{key: records}`` of ``topic`` below ``cut`` (``{partition: offset}``; None: all)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        stop = {tp: ends[tp] if cut is None else int(cut[str(tp.partition)]) for tp in parts}
        counts: Counter = Counter()
        while any(consumer.position(tp) < stop[tp] for tp in parts):
            for tp, records in consumer.poll(timeout_ms=1000).items():
                counts.update(r.key.decode() for r in records if r.offset < stop[tp])
        return counts
    finally:
        consumer.close()


@pytest.mark.timeout(600 + 25 * KILLS)
def test_incremental_checkpoints_under_random_kills_then_restore(bootstrap, kafka_admin,
                                                                 topic_factory, tmp_path):
    seed = int(os.environ.get("BARRIER_KAFKA_RANDOM_SEED", random.randrange(1 << 30)))
    print(f"random kill seed: {seed} (replay with BARRIER_KAFKA_RANDOM_SEED={seed})")
    rng = random.Random(seed)
    topic = produce_input(kafka_admin, bootstrap, RECORDS, KEYS)
    output = topic_factory(2, prefix="inc_out")
    workdir = str(tmp_path / "a")
    os.makedirs(workdir)
    group, prefix = f"inc-{uuid.uuid4().hex[:6]}", f"inc-{uuid.uuid4().hex[:6]}"
    kill_at_random_times(rng, KILLS, lambda: start_pipeline_process(
        bootstrap, topic, output, workdir, group, prefix, max_offsets_per_trigger=BATCH,
        extra_args=INCREMENTAL), bootstrap, output, low=3.0)
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=BATCH, extra_args=INCREMENTAL)
    assert rc == 0, f"final run failed (exit {rc}); see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, RECORDS)

    backend = backend_from_uri(os.path.join(workdir, "storage"))
    store = CompletedCheckpointStore(backend)
    n = store.latest_id()
    meta = store.load(n)  # every part of every chain is stored
    chained = [h for h in meta.operators if h.chain]
    assert chained, "no key group chained deltas: the test did not exercise them"
    print(f"checkpoint {n}: {len(chained)} of {len(meta.operators)} key groups chain "
          f"{max(len(h.chain) for h in chained)} parts at most; wrote {meta.state_size_bytes} "
          "bytes")
    truth = keys_before(bootstrap, topic, meta.source_offsets[topic])
    assert snapshot_values(backend, n, "running-count", 16) == truth
    named = {p for m in store.completed_ids() for h in store.load(m).operators
             for p, _ in h.parts}
    orphans = [p for p in backend.list("") if "/op-" in p and p not in named
               and int(p.split("/")[0][4:]) <= n]
    assert orphans == [], f"retention left snapshot blobs no checkpoint names: {orphans[:5]}"

    # A new query restored from a savepoint of checkpoint n, in its own storage, continues.
    restored = str(tmp_path / "b")
    os.makedirs(restored)
    store.create_savepoint("sp", target=backend_from_uri(os.path.join(restored, "storage")))
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    for i in range(RECORDS, RECORDS + EXTRA):
        producer.send(topic, key=b"k%d" % (i % KEYS), value=b"v%07d" % i)
    producer.flush(timeout=60)
    producer.close()
    output_b = topic_factory(2, prefix="inc_out_b")
    rc = run_pipeline(bootstrap, topic, output_b, restored, f"inc-b-{uuid.uuid4().hex[:6]}",
                      f"inc-b-{uuid.uuid4().hex[:6]}", max_offsets_per_trigger=BATCH,
                      extra_args=INCREMENTAL + ["--restore-from", "savepoints/sp"])
    assert rc == 0, f"restored run failed (exit {rc}); see {restored}/run.log"
    total = keys_before(bootstrap, topic)
    got = Counter(v.decode() for v in read_topic(bootstrap, output_b))
    expected = Counter(f"{k}:{c}" for k in total for c in range(truth[k] + 1, total[k] + 1))
    assert got == expected

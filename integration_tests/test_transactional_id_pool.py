"""Issue 13: the Kafka sink's transactional ids stay bounded however many batches run.

Old main opened a new transactional.id per batch, task and epoch; the broker keeps every one for
``transactional.id.expiration.ms`` (7 days) with a producer id, which took Flink's users' brokers
out of memory (FLINK-34554). With the default ``transaction.naming.strategy`` POOLING each task
attempt reuses its ids once their transactions ended: over a run of many batches the broker
knows a handful of the sink's ids, and the output is still exactly-once.
"""

from __future__ import annotations

import re
import uuid

from kafka.admin import KafkaAdminClient

from barrier_sink.options import is_sink_transactional_id
from integration_tests.pipeline_support import (assert_exactly_once, produce_input,
                                                run_pipeline)

RECORDS = 16_000  # 8 batches: twice the ids the pool may hold, half what old main opened
BATCH = 2_000


def sink_ids_known_to_the_broker(bootstrap: str, prefix: str) -> set:
    """Every transactional id of the sink the brokers still keep, finished ones included
    (Kafka's ListTransactions)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listing = admin.list_transactions()
    finally:
        admin.close()
    return {t.transactional_id for rows in listing.values() for t in rows
            if is_sink_transactional_id(prefix, t.transactional_id)}


def test_many_batches_use_a_bounded_set_of_transactional_ids(bootstrap, kafka_admin,
                                                            topic_factory, tmp_path):
    topic = produce_input(kafka_admin, bootstrap, RECORDS, 101)
    output = topic_factory(2, prefix="pool_out")
    workdir = str(tmp_path)
    group, prefix = f"pool-{uuid.uuid4().hex[:6]}", f"pool-{uuid.uuid4().hex[:6]}"
    rc = run_pipeline(bootstrap, topic, output, workdir, group, prefix,
                      max_offsets_per_trigger=BATCH)
    assert rc == 0, f"exit {rc}; see {workdir}/run.log"
    assert_exactly_once(bootstrap, topic, output, workdir, group, prefix, RECORDS)
    ids = sink_ids_known_to_the_broker(bootstrap, prefix)
    batches = RECORDS // BATCH
    # Two sink tasks, one checkpoint per batch committed by the next commit: each task needs at
    # most two ids at once. Old main: one new id per task and batch (>= 2 x 8).
    assert 0 < len(ids) <= 2 * 2 < batches, sorted(ids)
    # one run of the query: every id carries that run's tag, read from the tasks' context
    assert len({re.fullmatch(rf"{prefix}-r([0-9a-f]{{8}})-p\d+-a\d+-s\d+", t).group(1)
                for t in ids}) == 1, sorted(ids)

"""Sample input for the demo and the notebooks (driver): topics and keyed JSON events.

Event ``i`` has key ``user-<i mod keys>`` and value ``{"event": i}``, so a key's events and a
running count over them are easy to check against what a pipeline wrote.
"""

from __future__ import annotations

import time
from typing import Mapping


def create_topics(bootstrap: str, partitions_by_topic: Mapping[str, int]) -> None:
    """Create each topic with its number of partitions (replication 1)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, n, 1) for name, n in partitions_by_topic.items()],
                            timeout_ms=30000)
    finally:
        admin.close()


def produce_events(bootstrap: str, topic: str, first: int, count: int, keys: int) -> float:
    """Send events ``first .. first+count-1`` to ``topic``; returns the seconds it took."""
    from kafka import KafkaProducer

    started = time.monotonic()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                             batch_size=512 * 1024)
    try:
        for i in range(first, first + count):
            producer.send(topic, key=b"user-%d" % (i % keys), value=b'{"event": %d}' % i)
        producer.flush(timeout=120)
    finally:
        producer.close()
    return time.monotonic() - started

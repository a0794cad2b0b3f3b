"""Topic helpers for tests and the demo (driver)."""

from __future__ import annotations


def create_topic(admin, name: str, partitions: int = 1, configs: dict = None) -> str:
    """Create ``name`` with ``partitions`` partitions (replication 1) and topic ``configs``
    (e.g. ``{"retention.ms": "-1"}``) through ``admin``."""
    from kafka.admin import NewTopic

    admin.create_topics([NewTopic(name, partitions, 1, topic_configs=dict(configs or {}))],
                        timeout_ms=30000)
    return name

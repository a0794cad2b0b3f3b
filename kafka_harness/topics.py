"""Topic helpers for tests and the demo (driver)."""

from __future__ import annotations


def create_topic(admin, name: str, partitions: int = 1) -> str:
    """Create ``name`` with ``partitions`` partitions (replication 1) through ``admin``."""
    from kafka.admin import NewTopic

    admin.create_topics([NewTopic(name, partitions, 1)], timeout_ms=30000)
    return name

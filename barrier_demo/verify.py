"""Verify the exactly-once pipeline's output with a ``read_committed`` consumer (driver).

For every input key k with N_k records the output must hold ``k:1 .. k:N_k`` exactly once.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List

from kafka import KafkaConsumer, TopicPartition


@dataclass(frozen=True)
class Verdict:
    input_records: int
    output_records: int
    duplicates: int
    lost: int
    unexpected: int

    @property
    def is_exactly_once(self) -> bool:
        return self.duplicates == 0 and self.lost == 0 and self.unexpected == 0


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed",
               timeout_s: float = 60.0, values: bool = True) -> List[bytes]:
    """All values (or keys) of ``topic``, reading until every partition's position reaches its
    end offset (for read_committed: the last stable offset) or ``timeout_s`` passes."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                             enable_auto_commit=False, max_partition_fetch_bytes=8 << 20,
                             fetch_max_bytes=64 << 20)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        out: List[bytes] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msgs in consumer.poll(timeout_ms=500, max_records=100_000).values():
                out.extend((m.value if values else m.key) for m in msgs)
            ends = consumer.end_offsets(parts)
            if all(consumer.position(tp) >= ends[tp] for tp in parts):
                return out
        raise TimeoutError(f"could not read {topic} to its end within {timeout_s:.0f}s "
                           "(an open transaction pins the last stable offset?)")
    finally:
        consumer.close()


def expected_output(bootstrap: str, input_topic: str) -> Counter:
    keys = Counter(k.decode() for k in read_topic(bootstrap, input_topic, "read_uncommitted",
                                                  values=False))
    return Counter(f"{k}:{i}".encode() for k, n in keys.items() for i in range(1, n + 1))


def read_published_files(path: str, options: Dict[str, str] = None) -> List[bytes]:
    """All ``value`` cells (as bytes, from a string or binary column) of the Parquet files the
    barrier-files sink published at ``path`` (the files its manifests list: what a reader
    following the published set sees)."""
    import io

    import pyarrow.parquet as pq

    from barrier_sink.file_sink import published_files
    from barrier_sink.file_store import file_store_from_path

    store = file_store_from_path(path, options or {})
    base = store.uri("")
    out: List[bytes] = []
    for uri in published_files(path, options):
        table = pq.read_table(io.BytesIO(store.get(uri[len(base):])), columns=["value"])
        out.extend(v if isinstance(v, bytes) else v.encode()
                   for v in table.column("value").to_pylist())
    return out


def verify(bootstrap: str, input_topic: str, output_topic: str) -> Verdict:
    """Compare the ``read_committed`` content of ``output_topic`` with the expected output."""
    return compare(expected_output(bootstrap, input_topic),
                   Counter(read_topic(bootstrap, output_topic)))


def verify_files(bootstrap: str, input_topic: str, path: str,
                 options: Dict[str, str] = None) -> Verdict:
    """Compare the published files of the barrier-files sink with the expected output."""
    return compare(expected_output(bootstrap, input_topic),
                   Counter(read_published_files(path, options)))


def compare(expected: Counter, got: Counter) -> Verdict:
    duplicates = sum(n - 1 for v, n in got.items() if n > 1 and v in expected)
    lost = sum(1 for v in expected if v not in got)
    unexpected = sum(n for v, n in got.items() if v not in expected)
    return Verdict(sum(expected.values()), sum(got.values()), duplicates, lost, unexpected)


def committed_group_offsets(bootstrap: str, group: str, topic: str,
                            partitions) -> Dict[str, int]:
    """``{partition: offset}`` the consumer group ``group`` committed for ``partitions`` of
    ``topic`` (-1: none), as lag dashboards read them."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, int(p)) for p in partitions]
        got = admin.list_group_offsets({group: tps})[group]
        return {str(tp.partition): (om.offset if om is not None else -1)
                for tp, om in got.items()}
    finally:
        admin.close()


def summarize(v: Verdict) -> Dict[str, int]:
    return {"input_records": v.input_records, "output_records": v.output_records,
            "duplicates": v.duplicates, "lost": v.lost, "unexpected": v.unexpected}

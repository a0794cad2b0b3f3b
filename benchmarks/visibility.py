"""When a benchmark's output became visible to a ``read_committed`` consumer, measured without
reading it while the pipeline runs.

Reading every output record as it arrives costs the benchmark's own process CPU in proportion
to the output (kafka-python fetch, decompression, decoding: a few microseconds a record), on the
same cores as the pipeline it measures. A pipeline emitting one row per input record then pays
for its checker's reading and the one emitting one row per key does not. Instead:

* :class:`StableOffsetLog` (a thread in the benchmark's driver process) polls the topic's last
  stable offsets, the offsets a ``read_committed`` consumer may read up to (Kafka's LSO: the
  first offset of the oldest open transaction, or the high watermark when none is open; for a
  non-transactional producer always the high watermark), and logs when each value was first
  seen: one ListOffsets request every ``interval_s``.
* after the run, :func:`final_count_offsets` reads the output once with a ``read_committed``
  consumer and finds, per partition, the offset of the last record the run waited for.
* :meth:`StableOffsetLog.visible_at` is the first logged moment at which every one of those
  offsets was below its partition's stable offset: the moment the output was readable, to within
  one poll interval.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Dict, List, Optional, Tuple


class StableOffsetLog:
    """Logs ``(wall-clock seconds, {partition: last stable offset})`` whenever the stable offsets
    of ``topic`` change, from :meth:`start` until :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float = 0.02):
        self._bootstrap, self._topic, self._interval_s = bootstrap, topic, interval_s
        self.entries: List[Tuple[float, Dict[int, int]]] = []
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def start(self) -> "StableOffsetLog":
        consumer, parts = _read_committed_consumer(self._bootstrap, self._topic)
        self._thread = threading.Thread(target=self._poll, args=(consumer, parts),
                                        name=f"stable-offsets-{self._topic}", daemon=True)
        self._thread.start()
        return self

    def _poll(self, consumer, parts) -> None:
        try:
            last = None
            while not self._stopping.is_set():
                offsets = {tp.partition: o for tp, o in consumer.end_offsets(parts).items()}
                seen = time.time()
                if offsets != last:
                    self.entries.append((seen, offsets))
                    last = offsets
                self._stopping.wait(self._interval_s)
        except BaseException as e:  # reported by stop(): a silent gap would shift the figure
            self._error = e
        finally:
            consumer.close()

    def stop(self) -> None:
        """Stops polling; raises what stopped the poller early, if anything did."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"polling the stable offsets of {self._topic} failed") \
                from self._error

    def visible_at(self, last_offsets: Dict[int, int]) -> Optional[float]:
        """The first logged moment at which every ``partition -> offset`` in ``last_offsets`` was
        readable (offset < stable offset); None if it never was while polling."""
        return first_time_past(self.entries, last_offsets)


def first_time_past(entries: List[Tuple[float, Dict[int, int]]],
                    last_offsets: Dict[int, int]) -> Optional[float]:
    """The time of the first entry whose stable offset exceeds every offset in
    ``last_offsets`` (stable offsets only grow, so every later entry does too)."""
    for seen, stable in entries:
        if all(stable.get(p, 0) > o for p, o in last_offsets.items()):
            return seen
    return None


def _read_committed_consumer(bootstrap: str, topic: str, **config):
    """A ``read_committed`` consumer (no group commits) and every partition of ``topic``, in
    order; the consumer is closed if the partitions cannot be listed."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, **config)
    try:
        return consumer, [TopicPartition(topic, p)
                          for p in sorted(consumer.partitions_for_topic(topic))]
    except BaseException:
        consumer.close()
        raise


@contextmanager
def committed_reader(bootstrap: str, topic: str, fetch_max_wait_ms: int = 50):
    """A ``read_committed`` consumer assigned every partition of ``topic`` from its beginning,
    closed on exit."""
    consumer, parts = _read_committed_consumer(bootstrap, topic,
                                               fetch_max_wait_ms=fetch_max_wait_ms)
    try:
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        yield consumer
    finally:
        consumer.close()


def final_count_offsets(bootstrap: str, topic: str, expected: Dict[str, int],
                        timeout_s: float) -> Optional[Dict[int, int]]:
    """Reads ``topic`` (values ``<key>:<count>``) with a ``read_committed`` consumer until the
    count ``expected[key]`` of every key was seen; returns, per partition, the highest offset of
    the first record showing a key's expected count, or None if some key's never showed within
    ``timeout_s``."""
    with committed_reader(bootstrap, topic) as consumer:
        missing, last = dict(expected), {}
        deadline = time.monotonic() + timeout_s
        while missing and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=100, max_records=100_000).items():
                for m in msgs:
                    key, _, count = m.value.decode().rpartition(":")
                    if missing.get(key) == int(count):
                        del missing[key]
                        last[tp.partition] = max(last.get(tp.partition, -1), m.offset)
        return None if missing else last

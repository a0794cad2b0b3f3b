"""A running count per key, one output row per input record (runs on executors).

For the k-th record of key ``key`` (in partition/offset order, across checkpoints and restores)
it emits ``(key, "<key>:<k>")``, or ``(key, "<key>:<k>", k)`` with ``with_count=True``. With
exactly-once, the output of a key is ``key:1 .. key:N`` with no gap and no repeat, so any lost or
duplicated record shows: the demo, the exactly-once tests and the notebooks check exactly that.
"""

from __future__ import annotations

from barrier_ops.function import KeyedProcessFunction

OUTPUT_SCHEMA = "key string, value string"
OUTPUT_SCHEMA_WITH_COUNT = "key string, value string, count long"


class RunningCount(KeyedProcessFunction):
    """Keyed state ``count`` (value state); emits one row per record of the key."""

    def __init__(self, with_count: bool = False) -> None:
        self.with_count = with_count

    def process_records(self, key, records, state):
        count = state.value_state("count", 0)
        start = count.value()
        count.update(start + len(records))
        k = bytes(key).decode("utf-8", "replace") if isinstance(key, (bytes, bytearray)) \
            else str(key)
        if self.with_count:
            return [(k, f"{k}:{start + i}", start + i) for i in range(1, len(records) + 1)]
        return [(k, f"{k}:{start + i}") for i in range(1, len(records) + 1)]

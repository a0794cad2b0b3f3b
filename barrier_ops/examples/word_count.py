"""Word count over a barrier-kafka stream, checkpointed per key group.

Build the plan on the driver; the counting runs on executors. Feed it
``spark.readStream.format("barrier-kafka")...load()`` (after ``barrier_kafka.register(spark)``).

Each Kafka value is split on whitespace; the output has one row per word and epoch segment with
the running count, plus ``ack`` and ``barrier`` control rows (``docs/internals/protocol.md``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from barrier_ops.function import KeyedProcessFunction
from barrier_ops.operator import keyed_process
from barrier_ops.passthrough import explode_records, filter_records

OUTPUT_SCHEMA = "word string, count long"


class CountPerKey(KeyedProcessFunction):
    """Running count per key in a ``ValueState``; emits ``(key, count)`` once per call."""

    def __init__(self, decode: bool = True) -> None:
        self.decode = decode

    def process_records(self, key, records, state):
        count = state.value_state("count", 0)
        count.update(count.value() + len(records))
        if self.decode and isinstance(key, (bytes, bytearray)):
            key = bytes(key).decode("utf-8", "replace")
        return [(key, count.value())]


def word_count(df: DataFrame, state_backend, operator_id: str = "word-count",
               **kwargs) -> DataFrame:
    """Split ``value`` into words and count them with keyed state (driver)."""
    lines = filter_records(df, F.col("value").isNotNull())
    words = explode_records(lines, "word",
                            F.split(F.trim(F.col("value").cast("string")), r"\s+"))
    words = filter_records(words, F.length("word") > 0)
    return keyed_process(words, "word", CountPerKey(), OUTPUT_SCHEMA, operator_id=operator_id,
                         state_backend=state_backend, **kwargs)


def keyed_count(df: DataFrame, key_col: str, state_backend, operator_id: str = "keyed-count",
                **kwargs) -> DataFrame:
    """Count records per ``key_col`` (e.g. the Kafka ``key``) with keyed state (driver)."""
    return keyed_process(df, key_col, CountPerKey(), OUTPUT_SCHEMA, operator_id=operator_id,
                         state_backend=state_backend, **kwargs)

"""Row layout shared by the source, the operators and the sinks (pure data, runs anywhere).

Every row has a ``kind``:

* ``record``  - a Kafka record (Spark's Kafka source columns). ``checkpoint_id`` is the record's
  epoch: the id of the first checkpoint whose barrier follows it on its channel (records between
  barrier n-1 and barrier n carry n). The source knows it when planning (ids are consecutive), so
  2PC sinks commit a record's transaction when that checkpoint completes. The other barrier
  columns are null on records.
* ``barrier`` - CheckpointBarrier ``checkpoint_id`` on channel ``topic``/``partition``; ``offset`` is
  the barrier's position: records of that channel with a smaller offset belong to checkpoint
  ``checkpoint_id``'s state, the rest to later ones. ``barrier_channels`` lists every channel
  ("topic:partition") that delivers this checkpoint's barrier, so aligners know whom to wait for.
* ``ack``     - emitted by operators only (never by the source): a key group acknowledges a
  checkpoint; carries ``ack`` JSON (see ``docs/internals/protocol.md``).
"""

from __future__ import annotations

from typing import Tuple

from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

KIND_RECORD = "record"
KIND_BARRIER = "barrier"
KIND_ACK = "ack"

KAFKA_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
HEADERS_FIELD = StructField(
    "headers", ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())])))
BARRIER_FIELDS = [
    StructField("kind", StringType(), False),
    StructField("checkpoint_id", LongType()),
    StructField("checkpoint_timestamp", LongType()),
    StructField("barrier_channels", ArrayType(StringType())),
]


def source_schema(include_headers: bool = False) -> StructType:
    """Schema of ``spark.readStream.format("barrier-kafka")``: Spark's Kafka columns (plus
    ``headers`` when ``includeHeaders`` is true) followed by the barrier columns."""
    fields = list(KAFKA_FIELDS)
    if include_headers:
        fields.append(HEADERS_FIELD)
    return StructType(fields + list(BARRIER_FIELDS))


def channel_name(topic: str, partition: int) -> str:
    """Channel id used in ``barrier_channels`` and by the aligners: ``"topic:partition"``."""
    return f"{topic}:{partition}"


def split_channel(channel: str) -> Tuple[str, int]:
    """``"topic:partition"`` -> ``(topic, partition)``; topics may contain ':' (operator output
    channels ``op:<id>:<key group>``), partitions never do."""
    topic, _, partition = str(channel).rpartition(":")
    return topic, int(partition)


def spark_arrow_schema(schema: StructType):
    """The Arrow schema PySpark expects for ``schema`` with UTC timestamps (the schema a data
    source's Arrow batches must match). PySpark >= 4.1 takes ``timezone="UTC"``, 4.0 takes
    ``timestamp_utc=True``; runs anywhere."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # PySpark 4.0
        return to_arrow_schema(schema, timestamp_utc=True)

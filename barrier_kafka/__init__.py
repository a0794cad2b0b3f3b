"""barrier-kafka: Flink-style checkpoint barriers, barrier alignment and two-phase commit for Spark
Structured Streaming over Kafka.

Call :func:`register` once per SparkSession (driver) so ``format("barrier-kafka")`` (source and
exactly-once Kafka sink) and ``format("barrier-files")`` resolve. This package is the top of the
layering (``docs/internals/protocol.md``): it imports the source and the sinks, nothing imports it.
"""

from __future__ import annotations

from barrier_core.exceptions import BarrierKafkaError, InvalidOptionError
from barrier_kafka.available_now import run_available_now
from barrier_kafka.datasource import data_sources

__all__ = ["register", "run_available_now", "BarrierKafkaError", "InvalidOptionError"]
__version__ = "0.1.0"


def register(spark) -> None:
    """Register the barrier-kafka data sources with ``spark`` (runs on the driver).

    After this, ``spark.readStream.format("barrier-kafka")`` and the two-phase-commit sinks'
    short names resolve. Idempotent: registering twice is harmless.
    """
    for cls in data_sources():
        spark.dataSource.register(cls)

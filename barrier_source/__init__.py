"""barrier-kafka: Flink-style checkpoint barriers for Spark Structured Streaming over Kafka.

Call :func:`register` once per SparkSession (driver) so ``format("barrier-kafka")`` resolves.
"""

from __future__ import annotations

from barrier_source.exceptions import BarrierKafkaError, InvalidOptionError

__all__ = ["register", "BarrierKafkaError", "InvalidOptionError"]
__version__ = "0.1.0"


def register(spark) -> None:
    """Register the barrier-kafka data sources with ``spark`` (runs on the driver).

    After this, ``spark.readStream.format("barrier-kafka")`` and the two-phase-commit sinks'
    short names resolve. Idempotent: registering twice is harmless.
    """
    from barrier_source.datasource import data_sources

    for cls in data_sources():
        spark.dataSource.register(cls)

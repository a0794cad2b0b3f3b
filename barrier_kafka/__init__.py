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
from barrier_kafka.spark_settings import log_missing_once, recommended_spark_conf

__all__ = ["register", "run_available_now", "compiled_spark_home", "recommended_spark_conf",
           "BarrierKafkaError", "InvalidOptionError"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # compiled_spark_home is imported on first use: ``python -m barrier_kafka.spark_home`` must
    # find its module not imported yet, and the Python workers that import this package for its
    # data sources never need it.
    if name == "compiled_spark_home":
        from barrier_kafka.spark_home import compiled_spark_home

        return compiled_spark_home
    raise AttributeError(f"module 'barrier_kafka' has no attribute {name!r}")


def register(spark) -> None:
    """Register the barrier-kafka data sources with ``spark`` (runs on the driver).

    After this, ``spark.readStream.format("barrier-kafka")`` and the two-phase-commit sinks'
    short names resolve. Idempotent: registering twice is harmless. Logs once, at INFO, the
    settings of :func:`recommended_spark_conf` the session was built without. Raises
    :class:`~barrier_kafka.spark_home.SparkHomeError` when ``SPARK_HOME`` is a compiled Spark
    home (:func:`compiled_spark_home`) built from a PySpark that has changed since.
    """
    from barrier_kafka.spark_home import check_current

    check_current()
    for cls in data_sources():
        spark.dataSource.register(cls)
    log_missing_once(spark)

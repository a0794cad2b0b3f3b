"""A local SparkSession with the barrier-kafka data sources registered (driver)."""

from __future__ import annotations

import contextlib
import os
import sys


def conf_pairs(pairs, flag: str = "--conf") -> dict:
    """``KEY=VALUE`` command-line arguments (``flag``, repeatable) as a dict of Spark settings;
    ``ValueError`` naming the argument and the expected form for one without a key or ``=``."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} "
                             "spark.python.unix.domain.socket.enabled=true")
        conf[key.strip()] = value.strip()
    return conf


@contextlib.contextmanager
def sql_conf(spark, key: str, value: str):
    """Within: the session ``spark``'s SQL setting ``key`` is ``value``; after, what it was
    (unset again if it was). A streaming query copies the session's SQL settings when it
    starts, so one started within keeps ``value`` for its life."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def cluster_conf(master: str) -> dict:
    """Settings that make executors of a standalone ``master`` run this project: the driver's
    Python, the project root on PYTHONPATH, and the test switches (``BARRIER_KAFKA_*``) in
    their environment (executors do not inherit the driver's)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    conf = {"spark.pyspark.python": sys.executable, "spark.executor.memory": "768m",
            "spark.executorEnv.PYTHONPATH": root}
    for k, v in os.environ.items():
        if k.startswith("BARRIER_KAFKA_"):
            conf[f"spark.executorEnv.{k}"] = v
    return conf


def build_spark(app_name: str = "barrier-kafka-tests", shuffle_partitions: int = 4,
                master: str = "local[2]", **conf):
    """A SparkSession with the plugin registered (driver): ``local[2]`` unless ``master``
    names a standalone cluster (``spark://...``, see :mod:`kafka_harness.spark_cluster`) or a
    Spark Connect server (``sc://...``, see :mod:`kafka_harness.spark_connect`; the server's
    own settings apply, ``conf`` is set on the session)."""
    from pyspark.sql import SparkSession

    import barrier_kafka
    from kafka_harness.jvm_startup import driver_java_options

    if master.startswith("sc://"):  # a Spark Connect server (kafka_harness.spark_connect)
        spark = SparkSession.builder.remote(master).getOrCreate()
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        for k, v in conf.items():
            spark.conf.set(k, v)
        barrier_kafka.register(spark)
        return spark
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "2g")
               .config("spark.sql.streaming.stopTimeout", "60s")
               .config("spark.python.worker.reuse", "true")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    settings = barrier_kafka.recommended_spark_conf()   # as docs/operations.md recommends
    settings.update(cluster_conf(master) if master.startswith("spark://") else {})
    settings.update(conf)
    java_options = driver_java_options(settings.get("spark.driver.extraJavaOptions", ""))
    if java_options:  # a class archive and, in tests, a quicker JIT (kafka_harness.jvm_startup)
        settings["spark.driver.extraJavaOptions"] = java_options
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    barrier_kafka.register(spark)
    return spark

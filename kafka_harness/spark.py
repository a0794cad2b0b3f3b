"""A local SparkSession with the barrier-kafka data sources registered (driver)."""

from __future__ import annotations


def build_spark(app_name: str = "barrier-kafka-tests", shuffle_partitions: int = 4, **conf):
    """A local[2] SparkSession with the plugin registered (driver)."""
    from pyspark.sql import SparkSession

    import barrier_source

    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "2g")
               .config("spark.sql.streaming.stopTimeout", "60s")
               .config("spark.python.worker.reuse", "true")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    barrier_source.register(spark)
    return spark

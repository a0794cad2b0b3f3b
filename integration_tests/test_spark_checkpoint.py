"""A query killed while Spark wrote its first offset-log entry, on real Spark (local[2]): the
kill leaves Spark's temporary file ``offsets/.0.<uuid>.tmp``, and from Spark 4.1 on every restart
fails with ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY`` (SPARK-53103's check of a new query
counts the file, which Spark's logs never read). With
:func:`barrier_kafka.spark_checkpoint.clear_dead_first_writes` before ``start()`` the same query
starts and runs. The exactly-once pipeline's own restart after such a kill is in
``test_exactly_once_faults.py``."""

from __future__ import annotations

import os

import pyspark
import pytest

from barrier_kafka.spark_checkpoint import clear_dead_first_writes
from tests.test_spark_checkpoint import killed_in_first_write

CHECKS_NEW_LOCATIONS = tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 1)


def start_count(spark, location: str, folder: str):
    """A stateful query (Spark's count by line) over the text files of ``folder``."""
    return (spark.readStream.text(folder).groupBy("value").count()
            .writeStream.format("noop").outputMode("update")
            .option("checkpointLocation", location).start())


def test_a_dead_first_offset_write_blocks_a_restart_until_cleared(spark, tmp_path):
    location = str(tmp_path / "chk")
    dead = killed_in_first_write(location)
    folder = str(tmp_path / "in")
    os.makedirs(folder)
    with open(os.path.join(folder, "a.txt"), "w") as f:
        f.write("x\ny\nx\n")
    if CHECKS_NEW_LOCATIONS:
        query = start_count(spark, location, folder)
        with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
            query.awaitTermination(120)
    assert sorted(clear_dead_first_writes(location)) == sorted(dead)
    query = start_count(spark, location, folder)
    try:
        query.processAllAvailable()
        assert query.exception() is None
        assert query.lastProgress["batchId"] >= 0
        assert os.listdir(os.path.join(location, "offsets"))  # batch 0 was planned
    finally:
        query.stop()

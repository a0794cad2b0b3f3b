"""``keyed_process(..., parallelism=N)`` on real Spark (local[2]): Spark runs one group per range
of key groups, each task one range, and the counts, checkpoint snapshots and output channels are
those of the operator without ranges (issue 15)."""

from __future__ import annotations

from barrier_ops.examples.word_count import OUTPUT_SCHEMA, CountPerKey
from barrier_ops.operator import keyed_process
from barrier_ops.testing import make_script, write_script
from integration_tests.operator_helpers import assert_counted_like_the_script, script_stream
from state_backends.filesystem import FilesystemStateBackend

MAXP = 8


def test_two_ranges_of_eight_key_groups_count_exactly(script_spark, tmp_path):
    script = make_script(11, partitions=2, records=60, checkpoints=3, batches=4,
                         keys="abcdefghijklmnop")
    path = write_script(script, str(tmp_path / "script.json"))
    out = keyed_process(script_stream(script_spark, path), "key", CountPerKey(), OUTPUT_SCHEMA,
                        operator_id="ranged", state_backend=f"file://{tmp_path}/state",
                        max_parallelism=MAXP, parallelism=2)
    query = (out.writeStream.format("memory").queryName("ranged")
             .option("checkpointLocation", str(tmp_path / "chk")).outputMode("append").start())
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["stateOperators"]]
    finally:
        query.stop()
    rows = script_spark.sql("select * from ranged").collect()
    # Spark kept one state row per range, not one per key group
    assert progress and progress[-1]["stateOperators"][0]["numRowsTotal"] == 2
    # exact counts and snapshots; every key group still has its own gap-free output channel
    # and acks each checkpoint
    assert_counted_like_the_script(rows, script, FilesystemStateBackend(str(tmp_path / "state")),
                                   "ranged", MAXP)

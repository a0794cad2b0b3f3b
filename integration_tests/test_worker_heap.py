"""The keyed operator's user function runs in a Python worker whose long-lived heap is frozen
(barrier_core.worker_heap), on real Spark (local[2]), and its output is the same."""

from __future__ import annotations

import gc

from barrier_ops.function import KeyedProcessFunction
from barrier_ops.operator import keyed_process
from barrier_ops.testing import make_script, reference_counts, write_script
from integration_tests.operator_helpers import run_to_end, script_stream


class CountAndHeap(KeyedProcessFunction):
    """A running count per key that also reports how many objects the worker's collector has
    frozen when the function runs (executor)."""

    def process_records(self, key, records, state):
        n = state.value_state("n", 0)
        n.update(n.value() + len(records))
        return [(key.decode(), n.value(), gc.get_freeze_count())]


def test_the_function_runs_on_a_frozen_heap_and_counts_every_record(script_spark, tmp_path):
    script = make_script(11, partitions=2, records=30, checkpoints=2, batches=3)
    path = write_script(script, str(tmp_path / "script.json"))
    out = keyed_process(script_stream(script_spark, path), "key", CountAndHeap(),
                        "key string, n long, frozen long", operator_id="heap",
                        state_backend=f"file://{tmp_path}/state", max_parallelism=4)
    rows = [r for r in run_to_end(out, "heap", tmp_path / "chk").collect() if r.kind == "record"]
    assert rows and min(r.frozen for r in rows) > 1000
    final = {}
    for r in rows:
        final[r.key] = max(final.get(r.key, 0), r.n)
    assert final == dict(reference_counts(script))


def test_python_workers_know_they_are_workers_and_the_driver_process_does_not(spark):
    from pyspark.sql.functions import udf

    from barrier_core.worker_heap import in_python_worker

    is_worker = udf(lambda _: in_python_worker(), "boolean")
    assert spark.range(2).select(is_worker("id").alias("w")).collect() == [(True,), (True,)]
    assert not in_python_worker()

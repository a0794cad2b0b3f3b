"""bench_pipeline.attribute: the median ms per phase of a run's batches with input, read from
Spark's progress (no sink records here: the phases only the 2PC sink reports are NaN)."""

from __future__ import annotations

import math

from benchmarks.bench_pipeline import ATTRIBUTION, attribute


def _progress(batch_id, rows, trigger, add_batch, planning):
    return {"batchId": batch_id, "numInputRows": rows,
            "durationMs": {"triggerExecution": trigger, "addBatch": add_batch,
                           "queryPlanning": planning}}


def test_planning_is_its_own_phase_inside_what_spark_spends_outside_add_batch(tmp_path):
    progress = [_progress(0, 100, 500, 400, 60), _progress(1, 100, 300, 250, 20),
                _progress(2, 100, 340, 260, 40), _progress(3, 0, 15, 0, 0)]
    phases = attribute(progress, str(tmp_path))
    assert ATTRIBUTION.index("spark") < ATTRIBUTION.index("planning")
    assert phases["batches"] == 3                      # the batch without input is left out
    assert phases["batch"] == 340
    assert phases["spark"] == 80                       # medians of 100, 50, 80
    assert phases["planning"] == 40                    # of 60, 20, 40
    assert math.isnan(phases["send"])


def test_a_progress_without_query_planning_reports_it_as_not_measured(tmp_path):
    progress = [{"batchId": 0, "numInputRows": 5,
                 "durationMs": {"triggerExecution": 90, "addBatch": 70}}]
    phases = attribute(progress, str(tmp_path))
    assert phases["spark"] == 20
    assert math.isnan(phases["planning"])

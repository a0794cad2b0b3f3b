"""``bench_idle``'s arithmetic: an idle window's CPU as cores by kind, their medians over rounds,
the ratio to Spark's pipeline, and which batches read input."""

from __future__ import annotations

import math

import pytest

from benchmarks import process_cpu
from benchmarks.bench_idle import COLUMNS, cores, input_batches, medians, ratio


def _spent(**by_kind):
    return {k: by_kind.get(k.replace(" ", "_"), 0.0) for k in process_cpu.KINDS}


def test_cores_are_cpu_seconds_per_second_and_the_jit_is_not_counted_twice():
    got = cores(_spent(spark_jvm=3.0, python_driver=2.0, kafka_broker=1.0), jit_s=1.5,
                seconds=10.0)
    assert got["spark jvm"] == pytest.approx(0.3)
    assert got[process_cpu.JIT] == pytest.approx(0.15)
    assert got["python driver"] == pytest.approx(0.2)
    assert got["total"] == pytest.approx(0.6)   # the JIT's 0.15 is inside the JVM's 0.3


def test_a_kind_that_spent_nothing_is_zero_not_missing():
    got = cores({}, jit_s=0.0, seconds=2.0)
    assert set(got) == set(COLUMNS) | {"total"}
    assert all(v == 0.0 for v in got.values())


def test_an_empty_window_is_refused():
    with pytest.raises(ValueError, match="measures nothing"):
        cores(_spent(spark_jvm=1.0), jit_s=0.0, seconds=0.0)


def test_medians_per_column_and_nan_without_runs():
    runs = [cores(_spent(spark_jvm=s), 0.0, 1.0) for s in (0.1, 0.5, 0.3)]
    assert medians(runs)["spark jvm"] == pytest.approx(0.3)
    assert medians(runs)["total"] == pytest.approx(0.3)
    assert all(math.isnan(v) for v in medians([]).values())


def test_ratio_to_native_and_nan_when_native_spent_nothing_or_is_absent():
    native = medians([cores(_spent(spark_jvm=0.2), 0.0, 1.0)])
    eo = medians([cores(_spent(python_driver=0.3), 0.0, 1.0)])
    assert ratio(native, eo) == pytest.approx(1.5)
    assert math.isnan(ratio(None, eo))
    assert math.isnan(ratio(medians([cores({}, 0.0, 1.0)]), eo))


def test_input_batches_leave_out_plannings_that_read_nothing():
    progress = [{"batchId": 4, "numInputRows": 10}, {"batchId": 5, "numInputRows": 0},
                {"batchId": 6}, {"batchId": 7, "numInputRows": 1}]
    assert input_batches(progress) == {4, 7}

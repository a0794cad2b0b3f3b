"""``bench_pipeline.run_split``: a run's wall time split into query start, first batch, the other
batches and the wait until the output is visible, from Spark's progress reports."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from benchmarks.bench_pipeline import cell_ratio, run_split, median_ratio


def _progress(at_s: float, rows: int, ms: int) -> dict:
    stamp = datetime.fromtimestamp(at_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return {"timestamp": stamp[:-3] + "Z", "numInputRows": rows,
            "durationMs": {"triggerExecution": ms}}


def test_the_split_adds_up_to_the_run():
    t0 = 1_800_000_000.0
    progress = [_progress(t0 + 1.25, 100, 700), _progress(t0 + 1.95, 100, 400),
                _progress(t0 + 2.35, 0, 5), _progress(t0 + 2.40, 100, 300)]
    split = run_split(progress, t0, t0 + 2.9)
    assert split == pytest.approx({"start": 1.25, "first": 0.7, "rest": 0.7, "tail": 0.2},
                                  abs=1e-3)
    assert sum(split.values()) == pytest.approx(2.9 - 0.05, abs=1e-3)  # the batch without input aside


def test_no_batch_with_input_gives_no_split():
    assert run_split([_progress(1.0, 0, 5)], 0.0, 2.0) == {}
    assert run_split([], 0.0, 2.0) == {}


def test_the_median_ratio_compares_the_batches_after_the_first():
    # native's later batches took 3.0 s (median), the variant's 2.5 s: it is faster there
    assert median_ratio([2.8, 3.0, 3.4], [2.4, 2.5, 2.9]) == pytest.approx(1.2)
    assert cell_ratio(median_ratio([2.8, 3.0, 3.4], [2.4, 2.5, 2.9])) == "1.20x"


def test_a_run_of_one_batch_has_no_median_ratio():
    one_batch = run_split([_progress(1.0, 100, 700)], 0.0, 2.0)["rest"]
    assert one_batch == 0
    assert cell_ratio(median_ratio([one_batch], [one_batch])) == "-"
    assert cell_ratio(median_ratio(None, [1.0])) == "-"
    assert cell_ratio(median_ratio([1.0], [float("nan")])) == "-"

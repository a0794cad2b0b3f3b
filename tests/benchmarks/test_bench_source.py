"""``bench_source``: the ratio table divides the right variants (the issue's goals are read off
it), and ``--spark-home`` points the session at the home it names."""

from __future__ import annotations

import argparse
import os

import pytest

from barrier_kafka.spark_home import SparkHomeError, compiled_spark_home, source_home
from benchmarks.bench_source import (CEILING, OFF, ON, ONE_WAVE, PACKED, PERF, SMALL_BATCHES,
                                     add_spark_home_argument, print_table, use_spark_home)


def _ratio_rows(out: str) -> dict:
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].endswith(("x", "%")):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def test_ratios_are_records_per_second_of_the_variant_over_its_peer(capsys):
    # seconds for 1,000,000 records: Spark's source 4 s, ConsumerPerformance 1 s
    times = {"spark kafka": [4.0, 5.0, 6.0], ON: [5.0, 5.0, 5.0], OFF: [4.0, 4.0, 4.0],
             PACKED: [8.0, 8.0, 8.0], SMALL_BATCHES: [4.0, 4.0, 4.0],
             ONE_WAVE: [2.0, 2.5, 3.0], CEILING: [3.0, 3.0, 3.0], PERF: [1.0, 1.0, 1.0]}
    print_table(1_000_000, times, [1.0, 2.0], "compiled Spark home, 2 cores")
    out = capsys.readouterr().out
    assert "compiled Spark home, 2 cores, load average 1.0-2.0" in out
    rows = _ratio_rows(out)
    assert rows["barrier-kafka / spark kafka (>= 1.0x)"] == ("0.80x", "1.00x")
    assert rows["barrier-kafka / ConsumerPerformance (>= 0.5x)"] == ("0.20x", "0.20x")
    assert rows["maxPartitions=cores / spark kafka"] == ("2.00x", "2.00x")
    assert rows["maxPartitions=cores / ConsumerPerformance"] == ("0.50x", "0.40x")
    assert rows["ceiling / ConsumerPerformance"] == ("0.33x", "0.33x")
    assert rows["barrier cost, every batch vs off (< 2%)"] == ("+20.0%", "+20.0%")


@pytest.mark.parametrize("choice", ["installed", "compiled"])
def test_spark_home_argument_points_spark_home_at_that_home(choice, monkeypatch):
    parser = argparse.ArgumentParser()
    add_spark_home_argument(parser)
    assert parser.parse_args([]).spark_home == "compiled"
    monkeypatch.delenv("SPARK_HOME", raising=False)
    if choice == "compiled":
        try:
            compiled_spark_home()
        except SparkHomeError as exc:  # the harness then runs from the installed home too
            pytest.skip(f"no compiled Spark home here: {exc}")
    use_spark_home(parser.parse_args(["--spark-home", choice]).spark_home)
    expected = compiled_spark_home() if choice == "compiled" else source_home()
    assert os.environ["SPARK_HOME"] == str(expected)
    assert (expected / "python" / "lib").is_dir()

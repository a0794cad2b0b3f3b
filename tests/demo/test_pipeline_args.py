"""``python -m barrier_demo.pipeline`` arguments checked before anything starts (no Spark, no
broker here): ``--spark-conf`` takes KEY=VALUE pairs over the session's settings."""

from __future__ import annotations

import pytest

from barrier_demo.pipeline import main
from kafka_harness.spark import conf_pairs

REQUIRED = ["--bootstrap", "127.0.0.1:1", "--input", "in", "--output", "out", "--workdir", "w",
            "--group", "g", "--prefix", "p"]


def test_spark_conf_pairs():
    assert conf_pairs(["spark.a=1", " spark.b = x=y "], "--spark-conf") == {
        "spark.a": "1", "spark.b": "x=y"}


@pytest.mark.parametrize("bad", ["spark.sql.adaptive.enabled", "=true", " =x"])
def test_a_spark_conf_without_key_or_value_stops_before_spark_starts(bad, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(REQUIRED + ["--spark-conf", "spark.ok=1", "--spark-conf", bad])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"--spark-conf {bad!r}: expected KEY=VALUE" in err

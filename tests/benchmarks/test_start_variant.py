"""``bench_pipeline.start_variant``: each pipeline name the benchmarks take starts the pipeline
its words say, with the settings passed through (the start functions are replaced here; the
benchmarks run the real ones)."""

from __future__ import annotations

import argparse

import pytest

from barrier_kafka.spark_settings import STATELESS_AQE
from benchmarks import bench_pipeline
from benchmarks.bench_pipeline import (EXTRA_VARIANTS, SHUFFLE_PARTITIONS, VARIANTS,
                                       required_bootstrap, start_variant, variant_names)


class _Conf:
    """A session's SQL settings (``spark.conf``), as the recommended session has them."""

    def __init__(self):
        self.values = {STATELESS_AQE: "false"}

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        self.values.pop(key, None)


class _Spark:
    def __init__(self):
        self.conf = _Conf()


SPARK = _Spark()


@pytest.fixture
def started(monkeypatch):
    """The pipelines started: (kind, args, keywords, the session's stateless-AQE setting)."""
    calls = []

    def start(kind):
        return lambda *a, **kw: calls.append((kind, a, kw, SPARK.conf.get(STATELESS_AQE))) or "q"

    monkeypatch.setattr(bench_pipeline, "start_native", start("native"))
    monkeypatch.setattr(bench_pipeline, "start_exactly_once", start("eo"))
    return calls


def _start(name, **kw):
    return start_variant(SPARK, name, "bootstrap", "src", "out", "work", 10_000, **kw)


def test_native_starts_sparks_pipeline_with_the_trigger(started):
    assert _start("native", trigger_s=1.0) == "q"
    assert started == [("native", (SPARK, "bootstrap", "src", "out", "work", 10_000, 1.0), {},
                        "false")]


@pytest.mark.parametrize("name", [v for v in VARIANTS + EXTRA_VARIANTS if v != "native"])
def test_every_exactly_once_name_sets_what_its_words_say(started, name):
    _start(name, max_parallelism=128, max_partitions=2, trigger_s=5.0)
    (kind, args, kw, stateless_aqe), = started
    words = name.split()
    assert kind == "eo" and args[-1] == 10_000
    assert kw["runtime_store"] == ("backend" if "runtimes" in words else "spark")
    # started with stateless streams adaptive ("adaptive"), else with the session's setting,
    # which the session has again after either
    assert stateless_aqe == ("true" if "adaptive" in words else "false")
    assert SPARK.conf.get(STATELESS_AQE) == "false"
    assert kw["per_key"] is ("per-key" in words)
    assert kw["lean"] is ("lean" in words)
    assert kw["packed"] is ("packed" in words)
    assert kw["records_format"] == ("arrow" if "arrow" in words else "pandas")
    assert kw["parallelism"] == (SHUFFLE_PARTITIONS if "ranges" in words else None)
    assert (kw["max_parallelism"], kw["max_partitions"], kw["trigger_s"]) == (128, 2, 5.0)


def test_ranges_take_the_parallelism_given(started):
    _start("eo per-record arrow ranges", parallelism=4)
    assert started[0][2]["parallelism"] == 4


def test_variant_names_keeps_the_order_and_refuses_an_unknown_name_naming_the_valid_ones(
        capsys):
    parser = argparse.ArgumentParser()
    assert variant_names(parser, " native, eo per-key arrow ranges packed ,") == [
        "native", "eo per-key arrow ranges packed"]
    with pytest.raises(SystemExit) as refused:
        variant_names(parser, "native,eo per-kye")
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "'eo per-kye'" in err and repr(VARIANTS[1]) in err


def test_required_bootstrap_is_the_environments_or_an_error_saying_how_to_start_a_broker(
        monkeypatch, capsys):
    parser = argparse.ArgumentParser()
    monkeypatch.setenv("BARRIER_KAFKA_BOOTSTRAP", "127.0.0.1:39092")
    assert required_bootstrap(parser) == "127.0.0.1:39092"
    monkeypatch.delenv("BARRIER_KAFKA_BOOTSTRAP")
    with pytest.raises(SystemExit):
        required_bootstrap(parser)
    assert "python -m kafka_harness broker" in capsys.readouterr().err

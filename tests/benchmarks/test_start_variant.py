"""``bench_pipeline.start_variant``: each pipeline name the benchmarks take starts the pipeline
its words say, with the settings passed through (the start functions are replaced here; the
benchmarks run the real ones)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import bench_pipeline
from benchmarks.bench_pipeline import (EXTRA_VARIANTS, SHUFFLE_PARTITIONS, VARIANTS,
                                       required_bootstrap, start_variant, variant_names)


@pytest.fixture
def started(monkeypatch):
    calls = []
    monkeypatch.setattr(bench_pipeline, "start_native",
                        lambda *a, **kw: calls.append(("native", a, kw)) or "q")
    monkeypatch.setattr(bench_pipeline, "start_exactly_once",
                        lambda *a, **kw: calls.append(("eo", a, kw)) or "q")
    return calls


def _start(name, **kw):
    return start_variant("spark", name, "bootstrap", "src", "out", "work", 10_000, **kw)


def test_native_starts_sparks_pipeline_with_the_trigger(started):
    assert _start("native", trigger_s=1.0) == "q"
    assert started == [("native", ("spark", "bootstrap", "src", "out", "work", 10_000, 1.0), {})]


@pytest.mark.parametrize("name", [v for v in VARIANTS + EXTRA_VARIANTS if v != "native"])
def test_every_exactly_once_name_sets_what_its_words_say(started, name):
    _start(name, max_parallelism=128, max_partitions=2, trigger_s=5.0)
    (kind, args, kw), = started
    words = name.split()
    assert kind == "eo" and args[-1] == 10_000
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

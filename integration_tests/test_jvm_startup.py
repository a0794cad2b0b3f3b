"""The Spark drivers the tests start map one class archive (kafka_harness.jvm_startup): written
once per machine by a warm-up run, offered only once a JVM has mapped it, never half-written."""

from __future__ import annotations

import os

import pytest

from kafka_harness import jvm_startup


def test_the_test_session_driver_maps_the_archive(spark):
    archive = jvm_startup.archive_path()
    assert archive is not None and archive.is_file(), "pytest_sessionstart wrote no archive"
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                     .getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in arguments
    assert "-XX:TieredStopAtLevel=1" in arguments  # tests only (QUICK_JIT_ENV)
    assert "sharing" in jvm.java.lang.System.getProperty("java.vm.info")


def test_options_keep_the_users_and_add_the_jit_tier_only_when_asked(monkeypatch, tmp_path):
    monkeypatch.setenv("BARRIER_KAFKA_CACHE", str(tmp_path))
    monkeypatch.delenv(jvm_startup.QUICK_JIT_ENV, raising=False)
    assert jvm_startup.driver_java_options("-Dx=1") == "-Dx=1"  # no archive here yet
    archive = jvm_startup.archive_path()
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = jvm_startup.driver_java_options("-Dx=1")
    assert options.startswith("-Dx=1 ") and f"-XX:SharedArchiveFile={archive}" in options
    assert "TieredStopAtLevel" not in options  # benchmarks and the demo compile fully
    monkeypatch.setenv(jvm_startup.QUICK_JIT_ENV, "1")
    assert jvm_startup.driver_java_options().endswith("-XX:TieredStopAtLevel=1")


@pytest.mark.parametrize("failure", ["no archive written", "archive not mappable"])
def test_a_failed_warm_up_offers_no_archive_and_leaves_no_file(monkeypatch, tmp_path, failure):
    monkeypatch.setenv("BARRIER_KAFKA_CACHE", str(tmp_path))
    calls = []

    def warm_up(options, check_only=False):
        calls.append(options)
        staging = options.split("=", 1)[1].split()[0]
        if not check_only and failure == "archive not mappable":
            with open(staging, "wb") as f:
                f.write(b"half an archive")
        if check_only:
            raise RuntimeError("warm-up run exited 1: An error has occurred while processing "
                               "the shared archive file")

    monkeypatch.setattr(jvm_startup, "_run_warm_up", warm_up)
    assert jvm_startup.ensure_archive() is None
    assert calls and all(".staging" in c for c in calls)
    assert os.listdir(tmp_path / "jvm") == []  # neither the archive nor a staging file
    assert "SharedArchiveFile" not in jvm_startup.driver_java_options()

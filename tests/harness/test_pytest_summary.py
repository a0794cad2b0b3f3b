"""The compatibility matrix reads a child pytest's verdict from its summary line, even when
Spark's JVM printed a stack trace after it (the 4.0.5 child of a CI run on 9ec9ab0 passed and
was reported failed)."""

from __future__ import annotations

from kafka_harness.pyspark_versions import pytest_summary

TRACE = ("26/11/26 22:20:01 WARN StateStore: Error running maintenance task\n"
         "java.lang.IllegalStateException: SparkEnv not active\n"
         "\tat java.base/java.lang.Thread.run(Thread.java:840)\n")


def test_the_summary_line_is_found_above_a_late_stack_trace():
    out = "tests/a.py ....\n870 passed, 1 skipped, 37 warnings in 286.67s (0:04:46)\n" + TRACE
    assert pytest_summary(out) == "870 passed, 1 skipped, 37 warnings in 286.67s (0:04:46)"


def test_a_failed_run_keeps_its_failure():
    out = "FAILED tests/a.py::t - assert 1 == 2\n==== 1 failed, 869 passed in 12.01s ====\n"
    assert pytest_summary(out) == "1 failed, 869 passed in 12.01s"


def test_no_summary_is_said_so():
    assert pytest_summary(TRACE) == "(no summary)"
    assert pytest_summary("") == "(no summary)"

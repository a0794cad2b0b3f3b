"""Fault hooks cannot fire by accident: without the one switch nothing happens, whatever the
other variables say; an unknown point name is an error, not a fault that silently never fires."""

from __future__ import annotations

import os

import pytest

from barrier_core import faults
from barrier_core.faults import FaultPoint, InjectedFailure, fault_env, fault_point


@pytest.fixture
def clean_env(monkeypatch):
    for name in (faults.SWITCH, faults.CRASH_AT, faults.FAIL_AT, faults.CRASH_DIR,
                 faults.DELAY_AT, faults.FIRST_ATTEMPTS):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_armed_point_without_the_switch_does_nothing(clean_env, tmp_path):
    clean_env.setenv(faults.FAIL_AT, "task_write")
    clean_env.setenv(faults.CRASH_DIR, str(tmp_path))
    fault_point(FaultPoint.TASK_WRITE)
    assert os.listdir(tmp_path) == []


def test_raise_fires_once_at_the_nth_arrival(clean_env, tmp_path):
    for k, v in fault_env(str(tmp_path), fail_at="commit_after_metadata:2").items():
        clean_env.setenv(k, v)
    fault_point(FaultPoint.COMMIT_BEFORE_RECORD)  # another point: no effect
    fault_point(FaultPoint.COMMIT_AFTER_METADATA)  # first arrival
    with pytest.raises(InjectedFailure, match="commit_after_metadata"):
        fault_point(FaultPoint.COMMIT_AFTER_METADATA)
    fault_point(FaultPoint.COMMIT_AFTER_METADATA)  # fired once: the restart runs through
    assert faults.fired(str(tmp_path), "failed-commit_after_metadata") == \
        {"point": "commit_after_metadata", "task": None, "pid": os.getpid()}  # not a task


@pytest.mark.parametrize("first_attempts", [False, True])
def test_first_attempts_only_lets_retries_and_copies_pass(clean_env, tmp_path, monkeypatch,
                                                          first_attempts):
    for k, v in fault_env(str(tmp_path), fail_at="task_write:2",
                          first_attempts=first_attempts).items():
        clean_env.setenv(k, v)
    tasks = iter([{"batch": 4, "partition": 0, "attempt": 0},
                  {"batch": 4, "partition": 0, "attempt": 1},   # a retry or speculative copy
                  {"batch": 4, "partition": 1, "attempt": 0}])
    monkeypatch.setattr(faults, "_spark_task", lambda: next(tasks))
    fault_point(FaultPoint.TASK_WRITE)
    if first_attempts:   # the copy is not counted: the next first attempt is the 2nd arrival
        fault_point(FaultPoint.TASK_WRITE)
        with pytest.raises(InjectedFailure):
            fault_point(FaultPoint.TASK_WRITE)
        failed_in = {"batch": 4, "partition": 1, "attempt": 0}
    else:
        with pytest.raises(InjectedFailure):
            fault_point(FaultPoint.TASK_WRITE)
        failed_in = {"batch": 4, "partition": 0, "attempt": 1}
    assert faults.fired(str(tmp_path), "failed-task_write")["task"] == failed_in


def test_unknown_point_is_an_error(clean_env, tmp_path):
    for k, v in fault_env(str(tmp_path), crash_at="commit_after_metdata").items():
        clean_env.setenv(k, v)
    with pytest.raises(ValueError, match="unknown fault point 'commit_after_metdata'"):
        fault_point(FaultPoint.TASK_WRITE)

"""``benchmarks.stage_times``: one query's batch jobs split by stage from Spark's event log, and
the log read a run at a time."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.stage_times import EventLogTail, event_log_conf, stage_times


def _job(job_id, query, batch, stages, at, end):
    return [{"Event": "SparkListenerJobStart", "Job ID": job_id, "Submission Time": at,
             "Stage IDs": stages, "Properties": {"sql.streaming.queryId": query,
                                                 "streaming.sql.batchId": str(batch)}},
            {"Event": "SparkListenerJobEnd", "Job ID": job_id, "Completion Time": end}]


def _stage(stage_id, at, end):
    return {"Event": "SparkListenerStageCompleted",
            "Stage Info": {"Stage ID": stage_id, "Submission Time": at, "Completion Time": end}}


def _task(stage_id, task_id, python_ms=None):
    acc = [{"Name": "number of output rows", "Update": "40"}]
    if python_ms is not None:
        acc.append({"Name": "time to execute Python code", "Update": str(python_ms)})
    return {"Event": "SparkListenerTaskEnd", "Stage ID": stage_id,
            "Task Info": {"Task ID": task_id, "Accumulables": acc}}


def _batch(job_id, batch, at, read_ms, update_ms, python_ms, query="q1"):
    s1, s2 = 2 * job_id, 2 * job_id + 1
    return (_job(job_id, query, batch, [s2, s1], at, at + read_ms + update_ms + 5)
            + [_stage(s1, at, at + read_ms), _stage(s2, at + read_ms + 5,
                                                     at + read_ms + 5 + update_ms),
               _task(s1, 10 * job_id), _task(s2, 10 * job_id + 1, python_ms[0]),
               _task(s2, 10 * job_id + 2, python_ms[1])])


def test_the_medians_cover_the_query_s_batches_with_input():
    events = (_batch(1, 0, 1_000, 60, 200, (70, 90)) + _batch(2, 1, 2_000, 80, 220, (50, 60))
              + _batch(3, 2, 3_000, 70, 210, (40, 100))
              + _batch(4, 3, 4_000, 999, 999, (999, 999))          # a batch without input
              + _batch(5, 0, 5_000, 999, 999, (999, 999), query="other"))
    out = stage_times(events, "q1", batch_ids=[0, 1, 2])
    # the slowest task's Python time of each batch: 90, 60, 100
    assert {k: v for k, v in out.items() if k != "read python"} == pytest.approx(
        {"job": 285, "read stage": 70, "update stage": 210, "update python": 90,
         "between": 5, "batches": 3})
    assert math.isnan(out["read python"])   # PySpark reports no Python time for the source
    assert stage_times(events, "q1")["batches"] == 4


def test_a_job_whose_stages_are_not_all_logged_is_left_out():
    events = _job(1, "q1", 0, [1, 2], 0, 300) + [_stage(1, 0, 100)]
    events += _job(2, "q1", 1, [3], 1_000, 1_100)            # never ended
    out = stage_times(events, "q1")
    assert out["batches"] == 1 and out["read stage"] == 100 and out["update stage"] == 100
    assert out["between"] == 200
    assert stage_times([], "q1")["batches"] == 0 and math.isnan(stage_times([], "q1")["job"])


def test_the_tail_reads_each_complete_line_once(tmp_path):
    assert EventLogTail(str(tmp_path / "missing")).read() == []
    log = tmp_path / "app-1.inprogress"
    first, second = {"Event": "A"}, {"Event": "B"}
    log.write_text(json.dumps(first) + "\n" + json.dumps(second)[:5])   # B half written
    tail = EventLogTail(str(tmp_path))
    assert tail.read() == [first]
    with open(log, "a") as f:
        f.write(json.dumps(second)[5:] + "\n")
    assert tail.read() == [second]
    assert tail.read() == []
    conf = event_log_conf(str(tmp_path))
    assert conf["spark.eventLog.dir"] == f"file://{tmp_path}"
    assert conf["spark.eventLog.compress"] == "false"

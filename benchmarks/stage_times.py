"""Where a batch's Spark job goes, stage by stage, from Spark's own event log (benchmark driver).

The attribution of ``bench_pipeline`` says how long the sink's tasks waited and what the sink did;
it cannot say how much of a stage is Python and how much is Spark around it. Spark's event log
can: every task's run time and the SQL metrics PySpark keeps for its Python runners (``time to
execute Python code``: the Python worker's wall time on a task after its setup, waiting for its
input from the JVM included; PySpark 4.3 reports it for ``applyInPandasWithState``, not for a
Python data source's reader or writer).
Reading the log needs no hook in the library and no profiler.

* :func:`event_log_conf`: the session settings that write an uncompressed, unrolled log to a
  folder (one file, appended as the session runs);
* :class:`EventLogTail`: the events appended since the previous read, so a long benchmark
  parses each run's part of the file once;
* :func:`stage_times`: the median over one query's batches of its job's wall time, the first
  stage (the source and the shuffle write), the last stage (the keyed operator, Spark's
  aggregation, and the sink), the Python time inside each, and the job's time outside its
  stages (scheduling between them).
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Dict, Iterable, List, Optional

#: The SQL metric PySpark's Python runners report for a task's wall time in the Python worker.
PYTHON_TIME = "time to execute Python code"
COLUMNS = ("job", "read stage", "read python", "update stage", "update python", "between")


def event_log_conf(directory: str) -> Dict[str, str]:
    """Settings that make a new session write its event log, uncompressed, to ``directory``."""
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + directory,
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


class EventLogTail:
    """The events a session appended to its event log in ``directory`` since the last
    :meth:`read` (benchmark driver). Spark flushes the log at each stage and job end, so the
    events of a finished batch are there once ``processAllAvailable`` returned."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._offset = 0

    def read(self) -> List[dict]:
        names = sorted(os.listdir(self._directory)) if os.path.isdir(self._directory) else []
        if not names:
            return []
        with open(os.path.join(self._directory, names[0]), "rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]   # a line still being written waits
        self._offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def stage_times(events: Iterable[dict], query_id: str,
                batch_ids: Optional[Iterable[int]] = None) -> Dict[str, float]:
    """Median ms over the jobs of query ``query_id`` (those of ``batch_ids`` when given: the
    batches that read input) of :data:`COLUMNS`: the job from submission to end, its first and
    last stage from submission to completion, the slowest task's Python time in each (NaN when
    PySpark reports none), and the job's time outside its stages. A job of one stage counts it
    as both. ``batches``: how many jobs the medians cover."""
    wanted = None if batch_ids is None else {str(b) for b in batch_ids}
    jobs, ends, stages = [], {}, {}
    python: Dict[int, Dict[int, float]] = {}   # stage -> task -> Python ms
    for e in events:
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            props = e.get("Properties") or {}
            if props.get("sql.streaming.queryId") == query_id and (
                    wanted is None or props.get("streaming.sql.batchId") in wanted):
                jobs.append(e)
        elif kind == "SparkListenerJobEnd":
            ends[e["Job ID"]] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            stages[info["Stage ID"]] = info
        elif kind == "SparkListenerTaskEnd":
            spent = _python_ms(e.get("Task Info", {}).get("Accumulables", []))
            if spent is not None:
                python.setdefault(e["Stage ID"], {})[e["Task Info"]["Task ID"]] = spent
    rows = []
    for job in jobs:
        ran = [stages[s] for s in sorted(job["Stage IDs"])
               if s in stages and "Completion Time" in stages[s]]
        if job["Job ID"] not in ends or not ran:
            continue
        spans = [s["Completion Time"] - s["Submission Time"] for s in ran]
        took = ends[job["Job ID"]] - job["Submission Time"]
        py = [max(python[s["Stage ID"]].values()) if python.get(s["Stage ID"]) else float("nan")
              for s in (ran[0], ran[-1])]
        rows.append({"job": took, "read stage": spans[0], "read python": py[0],
                     "update stage": spans[-1], "update python": py[1],
                     "between": took - sum(spans)})
    out = {k: median_ms(r[k] for r in rows) for k in COLUMNS}
    out["batches"] = len(rows)
    return out


def _python_ms(accumulables: list) -> Optional[float]:
    """A task's Python time: the sum of its updates of :data:`PYTHON_TIME` (one a Python runner
    that reports it), or None."""
    found = [float(a["Update"]) for a in accumulables
             if a.get("Name") == PYTHON_TIME and a.get("Update") is not None]
    return sum(found) if found else None


def median_ms(values: Iterable[Optional[float]]) -> float:
    """The median of the values reported (None and NaN are not), NaN when none was."""
    values = [v for v in values if v is not None and v == v]
    return statistics.median(values) if values else float("nan")


def cell(value: float) -> str:
    """A table cell of whole ms: ``-`` for a value not reported (NaN)."""
    return "-" if value != value else f"{value:.0f}"

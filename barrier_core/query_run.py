"""When the current run of the query started, recorded in ``checkpoint.storage`` (driver).

A query that crashes and restarts replays its last batch and goes on from Spark's checkpoint:
a checkpoint that was pending when the old run died can still complete in the new run (its
barriers are in the replayed data and in the barriers the source still owes). The time the query
was down must not count against that checkpoint's ``execution.checkpointing.timeout``: otherwise
every restart slower than the timeout expires it and, with no tolerated failures, fails the
restarted query again (Flink aborts the checkpoints a failover cuts off without counting them).

One writer, one reader: the barrier-kafka source writes ``_run.json`` when its stream reader is
created (driver planner worker, once per query run, one small put); the checkpoint coordinator
reads it when it is built (driver commit worker) and measures each pending checkpoint's timeout
from its trigger or from the run start, whichever is later.
"""

from __future__ import annotations

import json

RUN_FILE = "_run.json"


def record_run_start(backend, started_ms: int) -> None:
    """Record that a run of the query started at ``started_ms`` (wall clock, ms) (driver)."""
    backend.put(RUN_FILE, json.dumps({"started_ms": int(started_ms)}).encode())


def read_run_start(backend) -> int:
    """Start of the current run in ms, or 0 when no source recorded one (driver). One read:
    the coordinator calls this at every commit."""
    data = backend.get_if_exists(RUN_FILE)
    if data is None:  # no source recorded one
        return 0
    try:
        return int(json.loads(data)["started_ms"])
    except (ValueError, KeyError, TypeError):
        return 0  # unreadable: fall back to the trigger time (the stricter timeout)

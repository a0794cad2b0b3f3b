"""``Trigger.AvailableNow`` with the same result on every supported PySpark version (driver: the
user's process).

PySpark >= 4.2 gives Python data sources admission control, so one AvailableNow run reads
everything available in batches of ``maxOffsetsPerTrigger``. PySpark 4.0 and 4.1 do not: Spark
runs AvailableNow as a single micro-batch there (its fallback for such sources, as
``Trigger.Once``), so one run reads at most ``maxOffsetsPerTrigger`` records. Nothing is lost
(the next run continues where it stopped), but a notebook or a scheduled job expecting "everything
available now" would stop early. :func:`run_available_now` starts AvailableNow runs until one
reads nothing; on PySpark >= 4.2 that is the first run. Every run is a normal query with its own
checkpoints, so the exactly-once guarantees are those of the sink, run after run.
"""

from __future__ import annotations

import json
import logging
from typing import List

logger = logging.getLogger(__name__)

MAX_RUNS = 10_000


def run_available_now(writer) -> List[dict]:
    """Start ``writer`` (a configured ``DataStreamWriter``, not started) with
    ``Trigger.AvailableNow`` until it has read everything available; return the progress of
    every micro-batch as plain dicts (``numInputRows`` always set, also through Spark Connect,
    whose progress objects leave it to a property). Raises the query's exception if a run
    fails."""
    from barrier_source.read_limits import ADMISSION_CONTROL

    progress: List[dict] = []
    for run in range(1, MAX_RUNS + 1):
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()
        batches = [_as_dict(p) for p in query.recentProgress]
        progress.extend(batches)
        if ADMISSION_CONTROL or not any(b["numInputRows"] for b in batches):
            return progress
        logger.info("barrier-kafka: AvailableNow run %d read one micro-batch (PySpark < 4.2 "
                    "runs AvailableNow as a single batch); starting the next run", run)
    raise RuntimeError(f"AvailableNow did not catch up after {MAX_RUNS} runs")


def _as_dict(progress) -> dict:
    """A ``StreamingQueryProgress`` (classic or Spark Connect) as a dict with ``numInputRows``
    set: its property sums the sources where the JSON leaves the total out (Connect)."""
    out = json.loads(progress.json)
    out["numInputRows"] = int(progress.numInputRows or 0)
    return out

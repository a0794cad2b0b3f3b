"""What a sink task hands to the driver (``WriterCommitMessage``). Must be picklable and
importable on the driver, so it lives in its own module, never in ``__main__``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from pyspark.sql.datasource import WriterCommitMessage


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """One task's pre-commit of one micro-batch (runs on an executor, read on the driver).

    ``handles``: pre-committed transactions / staged files (JSON dicts of the sink's handle type).
    ``barriers``: barrier rows that reached the sink: ``{"checkpoint_id", "channel", "offset",
    "channels", "timestamp"}``. ``acks``: ack JSON strings emitted by operators.
    ``timings``: where the task's wall time went, in ms (:class:`TaskTimings` keys).
    ``run`` and ``task_attempt``: the streaming query run and the task attempt id of the attempt
    that sent it (:func:`barrier_sink.attempt_claims.current_attempt`; None outside a task).
    """

    batch_id: int
    partition_id: int
    handles: List[dict] = field(default_factory=list)
    barriers: List[dict] = field(default_factory=list)
    acks: List[str] = field(default_factory=list)
    records: int = 0
    timings: Dict[str, float] = field(default_factory=dict)
    run: Optional[str] = None
    task_attempt: Optional[int] = None


#: Keys of ``SinkCommitMessage.timings``: the task's whole ``write`` call; the time spent waiting
#: for its next input batch (Spark's upstream work in the same task: shuffle read and keyed
#: operators); opening transactions (producer and ``InitProducerId``, or staging files);
#: handing records to them; pre-committing (flush). The Kafka sink adds two counts,
#: ``created_producers`` and ``reused_producers`` (:mod:`barrier_sink.producer_reuse`).
TASK_TIMINGS = ("task_ms", "input_wait_ms", "open_ms", "write_ms", "pre_commit_ms")


def slowest_task(messages) -> Dict[str, float]:
    """The timings of the task with the longest ``write`` (the batch's critical path), with
    ``tasks`` = how many tasks reported (driver commit worker)."""
    timed = [m.timings for m in messages if getattr(m, "timings", None)]
    if not timed:
        return {}
    return {**max(timed, key=lambda t: t.get("task_ms", 0)), "tasks": len(timed)}

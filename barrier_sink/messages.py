"""What a sink task hands to the driver (``WriterCommitMessage``). Must be picklable and
importable on the driver, so it lives in its own module, never in ``__main__``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from pyspark.sql.datasource import WriterCommitMessage


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """One task's pre-commit of one micro-batch (runs on an executor, read on the driver).

    ``handles``: pre-committed transactions / staged files (JSON dicts of the sink's handle type).
    ``barriers``: barrier rows that reached the sink: ``{"checkpoint_id", "channel", "offset",
    "channels", "timestamp"}``. ``acks``: ack JSON strings emitted by operators.
    """

    batch_id: int
    partition_id: int
    handles: List[dict] = field(default_factory=list)
    barriers: List[dict] = field(default_factory=list)
    acks: List[str] = field(default_factory=list)
    records: int = 0

"""Why checkpoints fail, and when too many failures fail the query (driver).

As in Flink: each :class:`CheckpointFailureReason` carries its message and whether it counts
towards ``execution.checkpointing.tolerable-failed-checkpoints``;
:class:`CheckpointFailureManager` counts *consecutive* counted failures of checkpoints newer than
the last successful one and raises :class:`CheckpointException` with reason
``TOO_MANY_CHECKPOINT_FAILURES`` once the count exceeds the tolerable number. A success resets
the count. Counting is idempotent per checkpoint id (a replayed batch that re-reports the same
failure does not count twice).
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Dict, Optional

from barrier_core.exceptions import BarrierKafkaError

logger = logging.getLogger(__name__)


class CheckpointFailureReason(Enum):
    """Reason a checkpoint did not complete; ``.message`` explains it, ``.counts`` says whether
    it counts as a failure for the tolerable-failed-checkpoints threshold."""

    CHECKPOINT_EXPIRED = ("Checkpoint expired before completing.", True)
    CHECKPOINT_SUBSUMED = ("Checkpoint has been subsumed by a newer completed checkpoint.", False)
    CHECKPOINT_DECLINED = ("Checkpoint was declined by a task.", True)
    CHECKPOINT_CANCELLED = ("Checkpoint was cancelled.", False)
    FINALIZE_CHECKPOINT_FAILURE = ("Failure to finalize checkpoint (metadata write failed).", True)
    IO_EXCEPTION = ("An I/O error occurred while writing the checkpoint.", True)
    TOO_MANY_CHECKPOINT_FAILURES = ("Exceeded checkpoint tolerable failure threshold.", False)

    def __init__(self, message: str, counts: bool) -> None:
        self.message = message
        self.counts = counts


class CheckpointException(BarrierKafkaError):
    """A checkpoint failed (``reason``), or the query must fail because too many did."""

    def __init__(self, reason: CheckpointFailureReason, detail: str = "",
                 checkpoint_id: Optional[int] = None) -> None:
        self.reason = reason
        self.checkpoint_id = checkpoint_id
        self.detail = detail
        prefix = f"checkpoint {checkpoint_id}: " if checkpoint_id is not None else ""
        super().__init__(f"{prefix}{reason.message}" + (f" {detail}" if detail else ""))


class CheckpointFailureManager:
    """Counts consecutive checkpoint failures (driver; state persisted by the coordinator).

    Parameters
    ----------
    tolerable_failed_checkpoints : int or None
        Consecutive counted failures tolerated; the next one raises. ``None``: unlimited.
    """

    def __init__(self, tolerable_failed_checkpoints: Optional[int] = 0) -> None:
        if tolerable_failed_checkpoints is not None and tolerable_failed_checkpoints < 0:
            from barrier_core.exceptions import InvalidOptionError

            raise InvalidOptionError(
                "execution.checkpointing.tolerable-failed-checkpoints must be >= 0, got "
                f"{tolerable_failed_checkpoints}")
        self.tolerable = tolerable_failed_checkpoints
        self.last_succeeded_id = 0
        self.counted: Dict[int, str] = {}  # checkpoint id -> reason name

    @property
    def continuous_failures(self) -> int:
        return len(self.counted)

    def handle_checkpoint_success(self, checkpoint_id: int) -> None:
        """Reset the count (Flink: ``handleCheckpointSuccess``)."""
        self.last_succeeded_id = max(self.last_succeeded_id, checkpoint_id)
        self.counted = {n: r for n, r in self.counted.items() if n > self.last_succeeded_id}

    def handle_checkpoint_failure(self, checkpoint_id: int, reason: CheckpointFailureReason,
                                  detail: str = "") -> None:
        """Count one failure; raise ``CheckpointException(TOO_MANY_CHECKPOINT_FAILURES)`` when
        the consecutive count exceeds the tolerable number."""
        self.record_failure(checkpoint_id, reason)
        self.check()

    def record_failure(self, checkpoint_id: int, reason: CheckpointFailureReason) -> bool:
        """Count a failure without raising (call :meth:`check` later). True if it counted."""
        if not reason.counts or checkpoint_id <= self.last_succeeded_id:
            return False
        if checkpoint_id in self.counted:
            return False
        self.counted[checkpoint_id] = reason.name
        logger.warning("checkpoint %d: failed (%s); %d consecutive failure(s), %s tolerated",
                       checkpoint_id, reason.name, len(self.counted),
                       "unlimited" if self.tolerable is None else self.tolerable)
        return True

    def check(self) -> None:
        """Raise if the recorded failures already exceed the threshold."""
        if self.tolerable is None or len(self.counted) <= self.tolerable:
            return
        last = max(self.counted)
        reason = CheckpointFailureReason[self.counted[last]]
        raise CheckpointException(
            CheckpointFailureReason.TOO_MANY_CHECKPOINT_FAILURES,
            f"{len(self.counted)} consecutive checkpoints failed (tolerable: {self.tolerable}; "
            f"execution.checkpointing.tolerable-failed-checkpoints). Last failure: checkpoint "
            f"{last}: {reason.message}", last)

    def to_json(self) -> dict:
        return {"last_succeeded_id": self.last_succeeded_id,
                "counted": {str(k): v for k, v in sorted(self.counted.items())}}

    def load_json(self, doc: dict) -> None:
        self.last_succeeded_id = int(doc.get("last_succeeded_id", 0))
        self.counted = {int(k): str(v) for k, v in (doc.get("counted") or {}).items()}

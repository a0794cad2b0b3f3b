"""The coordinator's settings and the record of a checkpoint's outcome (driver commit worker)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from barrier_core.exceptions import InvalidOptionError
from barrier_coordinator.completed import CompletedCheckpoint
from barrier_coordinator.failure import CheckpointFailureReason


@dataclass(frozen=True)
class CheckpointOutcome:
    """Checkpoint ``checkpoint_id`` completed (``completed`` set) or was aborted (``reason``
    set; ``CHECKPOINT_SUBSUMED`` means its data is covered by a newer completed checkpoint,
    never that it must be rolled back)."""

    checkpoint_id: int
    completed: Optional[CompletedCheckpoint] = None
    reason: Optional[CheckpointFailureReason] = None


@dataclass(frozen=True)
class CoordinatorConfig:
    """Coordinator settings, named after Flink's checkpoint config.

    ``operators``: declared ``{operator_id: num_key_groups}`` whose key groups every checkpoint
    expects (``on_batch`` also learns operators from their acks).
    """

    checkpoint_timeout_ms: int = 600_000
    tolerable_failed_checkpoints: Optional[int] = 0
    num_retained: int = 1
    stats_history: int = 10  # web.checkpoints.history: ids whose stats are kept
    operators: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.checkpoint_timeout_ms <= 0:
            raise InvalidOptionError("execution.checkpointing.timeout must be > 0 ms, got "
                                     f"{self.checkpoint_timeout_ms}")

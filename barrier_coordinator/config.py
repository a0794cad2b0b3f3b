"""The coordinator's settings and the listener protocol of checkpoint outcomes (driver)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Protocol

from barrier_core.exceptions import InvalidOptionError
from barrier_coordinator.completed import CompletedCheckpoint
from barrier_coordinator.failure import CheckpointFailureReason


class CheckpointListener(Protocol):
    """Receives checkpoint outcomes (source offset commit, sink transaction commit).

    Both methods may be called more than once for the same checkpoint (batch replay): they
    must be idempotent. Completion of n is notified before the aborts of the older pending
    checkpoints it subsumed; a ``CHECKPOINT_SUBSUMED`` abort means that checkpoint's data is
    covered by n (commit everything <= n), never that it must be rolled back.
    """

    def notify_checkpoint_complete(self, checkpoint_id: int,
                                   completed: CompletedCheckpoint) -> None: ...

    def notify_checkpoint_aborted(self, checkpoint_id: int,
                                  reason: CheckpointFailureReason) -> None: ...


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

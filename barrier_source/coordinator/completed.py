"""``CompletedCheckpoint``: a checkpoint whose every task acknowledged and whose metadata is
durably written (driver). Immutable; converts to and from
:class:`state_backends.metadata.CheckpointMetadata`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from state_backends.base import SnapshotHandle
from state_backends.metadata import CheckpointMetadata, Offsets


@dataclass(frozen=True)
class CompletedCheckpoint:
    """Result of ``PendingCheckpoint.finalize``.

    ``source_offsets`` (alias ``offsets``) is ``{topic: {partition: offset}}``: where barrier n
    sits on each channel, i.e. the consumer-group offsets to commit for n and the start offsets
    of a query restored from n. ``completion_batch`` is the Spark batch whose commit completed
    it (``None`` outside Spark).
    """

    checkpoint_id: int
    timestamp_ms: int
    completed_at_ms: int
    source_offsets: Offsets = field(default_factory=dict)
    operators: Tuple[SnapshotHandle, ...] = ()
    sink_transactions: Tuple[Any, ...] = ()
    is_savepoint: bool = False
    completion_batch: Optional[int] = None
    properties: Dict[str, Any] = field(default_factory=dict)

    @property
    def offsets(self) -> Offsets:
        return self.source_offsets

    @property
    def duration_ms(self) -> int:
        return self.completed_at_ms - self.timestamp_ms

    @property
    def state_size_bytes(self) -> int:
        return sum(h.size_bytes for h in self.operators)

    def to_metadata(self) -> CheckpointMetadata:
        return CheckpointMetadata(
            checkpoint_id=self.checkpoint_id, timestamp_ms=self.timestamp_ms,
            completed_at_ms=self.completed_at_ms, source_offsets=self.source_offsets,
            operators=self.operators, sink_transactions=self.sink_transactions,
            is_savepoint=self.is_savepoint, completion_batch=self.completion_batch,
            properties=self.properties)

    @classmethod
    def from_metadata(cls, meta: CheckpointMetadata) -> "CompletedCheckpoint":
        return cls(meta.checkpoint_id, meta.timestamp_ms, meta.completed_at_ms,
                   meta.source_offsets, meta.operators, meta.sink_transactions,
                   meta.is_savepoint, meta.completion_batch, dict(meta.properties))

    def __str__(self) -> str:
        return f"CompletedCheckpoint {self.checkpoint_id} @ {self.timestamp_ms}"

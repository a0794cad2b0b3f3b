"""``CompletedCheckpoint``: a checkpoint whose every task acknowledged and whose metadata is
durably written (driver). Immutable; it is the checkpoint's
:class:`state_backends.metadata.CheckpointMetadata` (the content of ``chk-<n>/_metadata``) seen
from the coordinator, with the coordinator's conveniences on top."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from state_backends.metadata import CheckpointMetadata, Offsets


@dataclass(frozen=True)
class CompletedCheckpoint(CheckpointMetadata):
    """Result of ``PendingCheckpoint.finalize``.

    ``source_offsets`` (alias ``offsets``) is ``{topic: {partition: offset}}``: where barrier n
    sits on each channel, i.e. the consumer-group offsets to commit for n and the start offsets
    of a query restored from n. ``completion_batch`` is the Spark batch whose commit completed
    it (``None`` outside Spark).
    """

    @property
    def offsets(self) -> Offsets:
        return self.source_offsets

    @property
    def duration_ms(self) -> int:
        return self.completed_at_ms - self.timestamp_ms

    def to_metadata(self) -> CheckpointMetadata:
        return CheckpointMetadata(**{f.name: getattr(self, f.name)
                                     for f in dataclasses.fields(CheckpointMetadata)})

    @classmethod
    def from_metadata(cls, meta: CheckpointMetadata) -> "CompletedCheckpoint":
        values = {f.name: getattr(meta, f.name) for f in dataclasses.fields(CheckpointMetadata)}
        values["properties"] = dict(meta.properties)
        return cls(**values)

    def __str__(self) -> str:
        return f"CompletedCheckpoint {self.checkpoint_id} @ {self.timestamp_ms}"

"""Exceptions of the ``state_backends`` package.

Every error derives from :class:`StateBackendError`, itself a
:class:`barrier_core.exceptions.BarrierKafkaError`. Messages name the checkpoint and the path
(``file:///...`` or ``s3://bucket/key``) they concern and never contain credentials.
"""

from __future__ import annotations

from typing import Optional

from barrier_core.exceptions import BarrierKafkaError, InvalidOptionError


class StateBackendError(BarrierKafkaError):
    """A state backend could not read, write, list or delete (I/O, S3 error, unreachable bucket)."""


class InvalidBackendOptionError(StateBackendError, InvalidOptionError):
    """A backend URI or option is unknown or malformed; the message names it and the fix."""


class SnapshotNotFoundError(StateBackendError, FileNotFoundError):
    """``get`` of a path that does not exist (the message names the full location)."""


class CheckpointMetadataError(StateBackendError):
    """A checkpoint's ``_metadata`` cannot be used. Carries ``checkpoint_id`` and ``path``.

    Operator action: restore from an older checkpoint explicitly
    (``CompletedCheckpointStore.restore(fallback_to_previous=True)`` or ``checkpoint_id=...``).
    """

    def __init__(self, message: str, checkpoint_id: Optional[int] = None,
                 path: Optional[str] = None) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id
        self.path = path


class CorruptMetadataError(CheckpointMetadataError):
    """``_metadata`` is not valid JSON (truncated, overwritten) or misses required fields."""


class IncompatibleLayoutError(CheckpointMetadataError):
    """The checkpoint was written by a layout version this code cannot read."""


class MissingChunkError(CheckpointMetadataError):
    """A snapshot blob the metadata refers to is absent or has the wrong size."""


class CheckpointNotFoundError(StateBackendError, LookupError):
    """No completed checkpoint (or savepoint) with the requested id / name."""

"""State backends: where checkpoint snapshots and checkpoint metadata are stored.

``backend_from_uri("file:///tmp/chk")``, ``"s3://bucket/prefix"`` or ``"memory://name"`` gives a
backend; every backend passes the same contract test suite (``tests/state_backends``).
:class:`CompletedCheckpointStore` lists, loads, retains and discards checkpoints;
:mod:`state_backends.stats` reads checkpoint statistics.
"""

from state_backends.base import SnapshotHandle, StateBackend
from state_backends.checkpoint_store import CompletedCheckpointStore, RestorePoint
from state_backends.exceptions import (CheckpointMetadataError, CheckpointNotFoundError,
                                       CorruptMetadataError, IncompatibleLayoutError,
                                       InvalidBackendOptionError, MissingChunkError,
                                       SnapshotNotFoundError, StateBackendError)
from state_backends.metadata import LAYOUT_VERSION, CheckpointMetadata
from state_backends.registry import SUPPORTED_BACKENDS, backend_from_uri

__all__ = [
    "SnapshotHandle", "StateBackend", "CompletedCheckpointStore", "RestorePoint",
    "CheckpointMetadata", "LAYOUT_VERSION", "SUPPORTED_BACKENDS", "backend_from_uri",
    "StateBackendError", "InvalidBackendOptionError", "SnapshotNotFoundError",
    "CheckpointMetadataError", "CorruptMetadataError", "IncompatibleLayoutError",
    "MissingChunkError", "CheckpointNotFoundError",
]

"""``CheckpointMetadata``: the content of ``chk-<n>/_metadata`` (driver).

The metadata object is written last, in one atomic ``put``; its presence is what makes a
checkpoint complete. It names everything a restore needs: the source offsets of checkpoint n
(``{topic: {partition: offset}}``, the position of barrier n on each channel), the operator
snapshot handles, and the sink's pre-committed transaction handles (opaque JSON).

Parsing is strict: truncated or corrupt JSON, missing fields and layout versions this code does
not know all raise a :class:`~state_backends.exceptions.CheckpointMetadataError` subclass naming
the checkpoint and the full path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from state_backends.base import SnapshotHandle
from state_backends.exceptions import CorruptMetadataError, IncompatibleLayoutError

#: Layout version written by this code; readers accept exactly the versions in ``READABLE``.
LAYOUT_VERSION = 1
READABLE_LAYOUT_VERSIONS = frozenset({1})

Offsets = Dict[str, Dict[str, int]]


def normalize_offsets(offsets: Optional[Dict[str, Dict[Any, Any]]]) -> Offsets:
    """``{topic: {partition: offset}}`` with string partition keys and int offsets, sorted."""
    out: Offsets = {}
    for topic in sorted(offsets or {}):
        parts = offsets[topic]
        out[str(topic)] = {str(p): int(parts[p]) for p in sorted(parts, key=lambda x: int(x))}
    return out


@dataclass(frozen=True)
class CheckpointMetadata:
    """Everything needed to restore checkpoint ``checkpoint_id``. Immutable, JSON-serialisable."""

    checkpoint_id: int
    timestamp_ms: int
    completed_at_ms: int
    source_offsets: Offsets = field(default_factory=dict)
    operators: Tuple[SnapshotHandle, ...] = ()
    sink_transactions: Tuple[Any, ...] = ()
    is_savepoint: bool = False
    completion_batch: Optional[int] = None
    properties: Dict[str, Any] = field(default_factory=dict)
    layout_version: int = LAYOUT_VERSION

    @property
    def state_size_bytes(self) -> int:
        return sum(h.size_bytes for h in self.operators)

    def operator_handles(self) -> Dict[str, Dict[int, SnapshotHandle]]:
        """``{operator_id: {key_group: handle}}``."""
        out: Dict[str, Dict[int, SnapshotHandle]] = {}
        for h in self.operators:
            out.setdefault(h.operator_id, {})[h.key_group] = h
        return out

    def to_json(self) -> dict:
        return {
            "layout_version": self.layout_version,
            "checkpoint_id": self.checkpoint_id,
            "timestamp_ms": self.timestamp_ms,
            "completed_at_ms": self.completed_at_ms,
            "is_savepoint": self.is_savepoint,
            "completion_batch": self.completion_batch,
            "source_offsets": normalize_offsets(self.source_offsets),
            "operators": [h.to_json() for h in self.operators],
            "sink_transactions": list(self.sink_transactions),
            "properties": self.properties,
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, checkpoint_id: Optional[int] = None,
                   location: str = "<metadata>") -> "CheckpointMetadata":
        """Parse strictly. ``checkpoint_id`` (if given) must match; ``location`` is for errors."""
        label = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "checkpoint"

        def corrupt(why: str) -> CorruptMetadataError:
            return CorruptMetadataError(f"{label}: metadata at {location} is corrupt: {why}",
                                        checkpoint_id, location)

        if not data:
            raise corrupt("the file is empty")
        try:
            doc = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise corrupt("not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            hint = " (truncated?)" if exc.pos >= len(data.rstrip()) - 1 else ""
            raise corrupt(f"invalid JSON at byte {exc.pos}{hint}: {exc.msg}") from None
        if not isinstance(doc, dict):
            raise corrupt(f"expected a JSON object, found {type(doc).__name__}")
        version = doc.get("layout_version")
        if version not in READABLE_LAYOUT_VERSIONS:
            raise IncompatibleLayoutError(
                f"{label}: metadata at {location} has layout version {version!r}; this "
                f"barrier-kafka reads versions {sorted(READABLE_LAYOUT_VERSIONS)}. Restore with "
                "the version that wrote it, or start from another checkpoint.",
                checkpoint_id, location)
        try:
            meta = cls(
                checkpoint_id=int(doc["checkpoint_id"]),
                timestamp_ms=int(doc["timestamp_ms"]),
                completed_at_ms=int(doc["completed_at_ms"]),
                source_offsets=normalize_offsets(doc["source_offsets"]),
                operators=tuple(SnapshotHandle.from_json(h) for h in doc["operators"]),
                sink_transactions=tuple(doc["sink_transactions"]),
                is_savepoint=bool(doc["is_savepoint"]),
                completion_batch=(None if doc.get("completion_batch") is None
                                  else int(doc["completion_batch"])),
                properties=dict(doc.get("properties") or {}),
                layout_version=int(version),
            )
        except KeyError as exc:
            raise corrupt(f"missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise corrupt(f"malformed field: {exc}") from None
        if checkpoint_id is not None and meta.checkpoint_id != checkpoint_id:
            raise corrupt(f"it describes checkpoint {meta.checkpoint_id}")
        return meta

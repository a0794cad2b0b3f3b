"""The ``StateBackend`` interface (contract shared by every backend).

Backends are created on the driver and pickled to executors: constructors store only picklable
configuration and open clients lazily. Layout under the backend's root (readable by tools)::

    chk-<n>/op-<operator_id>/kg-<key_group>   snapshot blobs of checkpoint n
    chk-<n>/_metadata                          written LAST and atomically: n is complete iff present
    chk-<n>/_stats.json                        checkpoint statistics
    savepoints/<name>/...                      user-triggered, never discarded by retention

Guarantees every implementation must give:

1. ``put`` is atomic: a reader sees the whole object or none of it (filesystem: write to a temp
   file + fsync + rename; S3: a single PUT; memory: dict assignment).
2. ``get`` of a missing path raises ``SnapshotNotFoundError`` naming the path.
3. No secret (S3 keys) appears in ``repr``, logs or error messages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterable, List, Optional


@dataclass(frozen=True)
class SnapshotHandle:
    """Where one key group's snapshot of one checkpoint lives. Picklable; travels in ack rows.

    ``inline`` carries the bytes themselves (memory backend: snapshots travel with the ack).
    """

    checkpoint_id: int
    operator_id: str
    key_group: int
    path: Optional[str]
    size_bytes: int
    inline: Optional[bytes] = field(default=None, repr=False)

    def to_json(self) -> dict:
        import base64

        out = {"checkpoint_id": self.checkpoint_id, "operator_id": self.operator_id,
               "key_group": self.key_group, "path": self.path, "size_bytes": self.size_bytes}
        if self.inline is not None:
            out["inline"] = base64.b64encode(self.inline).decode("ascii")
        return out

    @classmethod
    def from_json(cls, d: dict) -> "SnapshotHandle":
        import base64

        inline = base64.b64decode(d["inline"]) if d.get("inline") is not None else None
        return cls(int(d["checkpoint_id"]), d["operator_id"], int(d["key_group"]), d.get("path"),
                   int(d["size_bytes"]), inline)


def snapshot_path(checkpoint_id: int, operator_id: str, key_group: int) -> str:
    return f"chk-{checkpoint_id}/op-{operator_id}/kg-{key_group}"


def metadata_path(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}/_metadata"


class StateBackend(ABC):
    """Blob store plus the checkpoint layout on top of it.

    Subclasses implement the five primitives (``put``, ``get``, ``exists``, ``list``,
    ``delete_prefix``); the checkpoint-level methods are built on them.
    """

    #: True when snapshots are carried inline in handles (memory backend).
    inline_snapshots: bool = False

    # ------------------------------------------------------------------ primitives
    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Atomically store ``data`` at ``path`` (relative to the backend root)."""

    @abstractmethod
    def get(self, path: str) -> bytes:
        """Return the bytes at ``path``; raise ``SnapshotNotFoundError`` if absent."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        ...

    @abstractmethod
    def list(self, prefix: str = "") -> List[str]:
        """Relative paths of every object under ``prefix``, sorted."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix`` (idempotent)."""

    @abstractmethod
    def describe(self) -> str:
        """Human-readable location without secrets, e.g. ``s3://bucket/prefix``."""

    # ------------------------------------------------------------------ snapshots (executor)
    def write_snapshot(self, checkpoint_id: int, operator_id: str, key_group: int,
                       data: bytes) -> SnapshotHandle:
        """Store one key group's state for ``checkpoint_id``; runs on executors."""
        path = snapshot_path(checkpoint_id, operator_id, key_group)
        if self.inline_snapshots:
            return SnapshotHandle(checkpoint_id, operator_id, key_group, None, len(data), data)
        self.put(path, data)
        return SnapshotHandle(checkpoint_id, operator_id, key_group, path, len(data))

    def read_snapshot(self, handle: SnapshotHandle) -> bytes:
        if handle.inline is not None:
            return handle.inline
        return self.get(handle.path)

    def checkpoint_ids_on_storage(self) -> Iterable[int]:
        """Ids of every ``chk-<n>`` folder, complete or not."""
        ids = set()
        for p in self.list(""):
            head = p.split("/", 1)[0]
            if head.startswith("chk-") and head[4:].isdigit():
                ids.add(int(head[4:]))
        return sorted(ids)

"""The ``StateBackend`` interface (contract shared by every backend).

Backends are created on the driver and pickled to executors: constructors store only picklable
configuration and open clients lazily. Layout under the backend's root (readable by tools)::

    chk-<n>/op-<operator_id>/kg-<key_group>   snapshot blobs of checkpoint n
    chk-<n>/_metadata                          written LAST and atomically: n is complete iff present
    chk-<n>/_stats.json                        checkpoint statistics (also kept for failed ones)
    savepoints/<name>/...                      user-triggered, never discarded by retention
    pending/                                   the coordinator's durable pending checkpoints

Guarantees every implementation must give:

1. ``put`` is atomic: a reader sees the whole object or none of it (filesystem: write to a temp
   file + fsync + rename; S3: a single PUT; memory: dict assignment), and durable when it
   returns; ``put_deferred`` is atomic and durable once ``make_durable`` returns.
2. ``get`` of a missing path raises ``SnapshotNotFoundError`` naming the path.
3. No secret (S3 keys) appears in ``repr``, logs or error messages.
4. Paths are relative, ``/``-separated, without ``.``/``..``/empty components. ``list(prefix)`` and
   ``delete_prefix(prefix)`` use *path-component* semantics: they cover the object named
   ``prefix`` and everything under ``prefix/``, so ``delete_prefix("chk-1")`` never touches
   ``chk-10``. A trailing ``/`` is allowed (``list("sink/")``); ``""`` means the whole root.
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from state_backends.exceptions import InvalidBackendOptionError, MissingChunkError

METADATA_FILE = "_metadata"
STATS_FILE = "_stats.json"
PENDING_PREFIX = "pending"
SAVEPOINT_PREFIX = "savepoints"


@dataclass(frozen=True)
class SnapshotHandle:
    """Where one key group's snapshot of one checkpoint lives. Picklable; travels in ack rows.

    ``inline`` carries the bytes themselves (memory backend: snapshots travel with the ack).
    ``chain``: an incremental snapshot's earlier parts, ``(path, size_bytes)`` oldest first (a
    full snapshot, then deltas); the snapshot is those parts followed by ``path``. Empty for a
    full snapshot. The parts may lie in older checkpoints' folders: retention keeps every part
    a retained checkpoint names (see ``CompletedCheckpointStore``). In JSON, parts at their
    checkpoint's own path are written as checkpoint id ranges without sizes (``size_bytes``
    None once parsed), so metadata stays small however long a chain grows; each delta blob
    names its predecessor's size itself.
    """

    checkpoint_id: int
    operator_id: str
    key_group: int
    path: Optional[str]
    size_bytes: int
    inline: Optional[bytes] = field(default=None, repr=False)
    chain: Tuple[Tuple[str, Optional[int]], ...] = ()

    @property
    def parts(self) -> Tuple[Tuple[str, Optional[int]], ...]:
        """Every blob of the snapshot, ``(path, size_bytes)`` in the order they are applied."""
        return self.chain + ((self.path, self.size_bytes),) if self.path else self.chain

    def to_json(self) -> dict:
        out = {"checkpoint_id": self.checkpoint_id, "operator_id": self.operator_id,
               "key_group": self.key_group, "path": self.path, "size_bytes": self.size_bytes}
        if self.inline is not None:
            out["inline"] = base64.b64encode(self.inline).decode("ascii")
        if self.chain:
            ids = [_checkpoint_of(path, self.operator_id, self.key_group)
                   for path, _ in self.chain]
            if None in ids:
                out["chain"] = [[path, size] for path, size in self.chain]
            else:
                out["chain_checkpoints"] = _ranges(ids)
        return out

    @classmethod
    def from_json(cls, d: dict) -> "SnapshotHandle":
        inline = base64.b64decode(d["inline"]) if d.get("inline") is not None else None
        chain = tuple((str(path), None if size is None else int(size))
                      for path, size in d.get("chain") or ())
        if d.get("chain_checkpoints"):
            chain = tuple((snapshot_path(n, d["operator_id"], int(d["key_group"])), None)
                          for n in _parse_ranges(d["chain_checkpoints"]))
        return cls(int(d["checkpoint_id"]), d["operator_id"], int(d["key_group"]), d.get("path"),
                   int(d["size_bytes"]), inline, chain)


def _checkpoint_of(path: str, operator_id: str, key_group: int) -> Optional[int]:
    """n if ``path`` is key group ``key_group``'s snapshot path in ``chk-<n>``, else None."""
    head, _, rest = path.partition("/")
    if head.startswith("chk-") and head[4:].isdigit() \
            and rest == operator_snapshot_name(operator_id, key_group):
        return int(head[4:])
    return None


def _ranges(ids: List[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3,5"`` (ids in order; a repeated or descending id starts a new
    range, so parsing gives the same list back)."""
    runs: List[List[int]] = []
    for n in ids:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _parse_ranges(text: str) -> List[int]:
    out: List[int] = []
    for run in str(text).split(","):
        first, _, last = run.partition("-")
        a, b = int(first), int(last or first)
        if b < a:
            raise ValueError(f"bad checkpoint range {run!r}")
        out.extend(range(a, b + 1))
    return out


def checkpoint_dir(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}"


def operator_snapshot_name(operator_id: str, key_group: int) -> str:
    """A key group's snapshot inside a checkpoint or savepoint folder: ``op-<id>/kg-<k>``."""
    return f"op-{operator_id}/kg-{key_group}"


def snapshot_path(checkpoint_id: int, operator_id: str, key_group: int) -> str:
    return f"{checkpoint_dir(checkpoint_id)}/{operator_snapshot_name(operator_id, key_group)}"


def metadata_path(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}/{METADATA_FILE}"


def stats_path(checkpoint_id: int) -> str:
    return f"chk-{checkpoint_id}/{STATS_FILE}"


def savepoint_dir(name: str) -> str:
    return f"{SAVEPOINT_PREFIX}/{name}"


def normalize_path(path: str, allow_root: bool = False) -> str:
    """Validate a relative object path; return it without leading/trailing ``/``.

    Raises ``InvalidBackendOptionError`` for absolute paths or ``.``/``..``/empty components.
    """
    stripped = path.strip("/") if allow_root else path.rstrip("/")
    if not stripped:
        if allow_root:
            return ""
        raise InvalidBackendOptionError(f"empty object path {path!r}")
    if path.startswith("/") and not allow_root:
        raise InvalidBackendOptionError(f"object path {path!r} must be relative to the root")
    parts = stripped.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidBackendOptionError(
            f"object path {path!r} has an empty, '.' or '..' component")
    return stripped


def under_prefix(path: str, prefix: str) -> bool:
    """Path-component prefix test: ``under_prefix("chk-10/x", "chk-1")`` is False."""
    return not prefix or path == prefix or path.startswith(prefix + "/")


class StateBackend(ABC):
    """Blob store plus the checkpoint layout on top of it.

    Subclasses implement the primitives (``put``, ``get``, ``exists``, ``list``,
    ``delete_prefix``, ``describe``); the checkpoint-level methods are built on them. Instances
    are picklable (driver -> executors); clients are opened lazily in each process.
    """

    #: True when snapshots are carried inline in handles (memory backend).
    inline_snapshots: bool = False
    #: True when the keyed operator's snapshot uploads should start as soon as each snapshot
    #: is taken, running while the call goes on (an object store: each PUT waits on the
    #: network); False when they should start once the call's key groups are done (a local
    #: disk: a write is short, and threads writing while the call runs slow it more than the
    #: overlap gains, as they contend with it for the interpreter lock).
    #: :mod:`barrier_ops.snapshot_uploads` reads it.
    overlap_uploads: bool = True

    # ------------------------------------------------------------------ primitives
    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Atomically store ``data`` at ``path`` (relative to the backend root)."""

    @abstractmethod
    def get(self, path: str) -> bytes:
        """Return the bytes at ``path``; raise ``SnapshotNotFoundError`` if absent."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """True if an object is stored at exactly ``path``."""

    @abstractmethod
    def list(self, prefix: str = "") -> List[str]:
        """Relative paths of every object at or under ``prefix`` (path components), sorted."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Delete the object ``prefix`` and every object under ``prefix/`` (idempotent)."""

    @abstractmethod
    def describe(self) -> str:
        """Human-readable location without secrets, e.g. ``s3://bucket/prefix``."""

    # ------------------------------------------------------------------ derived primitives
    def put_deferred(self, path: str, data: bytes) -> None:
        """:meth:`put`, except that the object may become durable only at the next
        :meth:`make_durable` naming ``path`` (still atomic: readers see all or nothing). Many
        puts then pay for one durability step: a local disk syncs each folder once, not once a
        file. Backends whose ``put`` has no such step (S3, memory) just ``put``."""
        self.put(path, data)

    def make_durable(self, paths: List[str]) -> None:
        """Make the objects ``paths``, stored by :meth:`put_deferred`, durable (a crash or
        power loss after this returns keeps them). Nothing to do where ``put`` is durable."""

    def get_if_exists(self, path: str) -> Optional[bytes]:
        """The bytes at ``path``, or None if nothing is stored there: one read, where
        ``exists`` then ``get`` costs two requests on an object store."""
        from state_backends.exceptions import SnapshotNotFoundError

        try:
            return self.get(path)
        except SnapshotNotFoundError:
            return None

    def delete(self, paths: List[str]) -> None:
        """Delete exactly the objects ``paths`` (as ``delete_prefix`` of each; idempotent).
        Object stores override it with one batched request per 1,000 paths, no listing."""
        for p in paths:
            self.delete_prefix(p)

    def location(self, path: str) -> str:
        """Full human-readable location of ``path`` (for error messages; no secrets)."""
        return f"{self.describe().rstrip('/')}/{path}"

    # ------------------------------------------------------------------ snapshots (executor)
    def write_snapshot(self, checkpoint_id: int, operator_id: str, key_group: int,
                       data: bytes,
                       chain: Tuple[Tuple[str, Optional[int]], ...] = ()) -> SnapshotHandle:
        """Store one key group's state for ``checkpoint_id``; runs on executors.

        ``chain``: the earlier parts ``data`` is a delta on (an incremental snapshot; see
        :attr:`SnapshotHandle.chain`); backends with inline snapshots take full ones only.
        Returns the handle to put in the acknowledgement. The blob is durable (atomic ``put``)
        when this returns; the checkpoint is not complete until the coordinator writes
        ``chk-<n>/_metadata``.
        """
        handle = self.snapshot_handle(checkpoint_id, operator_id, key_group, data, chain)
        if handle.path is not None:
            self.put(handle.path, data)
        return handle

    def snapshot_handle(self, checkpoint_id: int, operator_id: str, key_group: int,
                        data: bytes,
                        chain: Tuple[Tuple[str, Optional[int]], ...] = ()) -> SnapshotHandle:
        """The handle :meth:`write_snapshot` returns for these arguments, without writing:
        its ``path`` is where ``data`` goes (None when the backend keeps it inline). The
        operator stores the blob at that path itself, in the background
        (:mod:`barrier_ops.snapshot_uploads`)."""
        if self.inline_snapshots:
            if chain:
                raise InvalidBackendOptionError(
                    f"{self.describe()} keeps snapshots inline in the metadata and cannot chain "
                    "incremental snapshots; use a file:// or s3:// backend for them")
            return SnapshotHandle(checkpoint_id, operator_id, key_group, None, len(data),
                                  bytes(data))
        return SnapshotHandle(checkpoint_id, operator_id, key_group,
                              snapshot_path(checkpoint_id, operator_id, key_group), len(data),
                              chain=tuple(chain))

    def read_snapshot(self, handle: SnapshotHandle) -> bytes:
        """Bytes of a full snapshot (executor on restore, or driver). Verifies the size.

        Raises ``MissingChunkError`` naming checkpoint and location if the blob is absent or
        truncated; ``ValueError`` for an incremental handle (read those with
        :meth:`read_snapshot_parts`).
        """
        if handle.chain:
            raise ValueError(f"checkpoint {handle.checkpoint_id}: the snapshot of key group "
                             f"{handle.key_group} is incremental ({len(handle.parts)} parts); "
                             "read it with read_snapshot_parts")
        if handle.inline is not None:
            data = handle.inline
            if len(data) != handle.size_bytes:
                raise MissingChunkError(
                    f"checkpoint {handle.checkpoint_id}: snapshot at <inline> has {len(data)} "
                    f"bytes, metadata says {handle.size_bytes} (truncated or overwritten)",
                    handle.checkpoint_id, "<inline>")
            return data
        return self.read_part(handle, handle.path, handle.size_bytes)

    def read_snapshot_parts(self, handle: SnapshotHandle) -> List[bytes]:
        """Every part of a snapshot, oldest first (one for a full snapshot), sizes verified."""
        if handle.inline is not None:
            return [self.read_snapshot(handle)]
        return [self.read_part(handle, path, size) for path, size in handle.parts]

    def read_part(self, handle: SnapshotHandle, path: str,
                  size_bytes: Optional[int]) -> bytes:
        """One blob of ``handle``'s snapshot; ``MissingChunkError`` naming checkpoint and
        location if it is absent or has another size than ``size_bytes`` (when known)."""
        from state_backends.exceptions import SnapshotNotFoundError

        try:
            data = self.get(path)
        except SnapshotNotFoundError as exc:
            raise MissingChunkError(
                f"checkpoint {handle.checkpoint_id}: snapshot of operator "
                f"{handle.operator_id!r} key group {handle.key_group} is missing at "
                f"{self.location(path)}", handle.checkpoint_id, self.location(path)) from exc
        if size_bytes is not None and len(data) != size_bytes:
            raise MissingChunkError(
                f"checkpoint {handle.checkpoint_id}: snapshot at {self.location(path)} has "
                f"{len(data)} bytes, metadata says {size_bytes} (truncated or overwritten)",
                handle.checkpoint_id, self.location(path))
        return data

    def __eq__(self, other: object) -> bool:  # same class and same location
        return type(other) is type(self) and other.describe() == self.describe()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.describe()))

"""A key group's snapshot blobs: full snapshots, incremental deltas, and folding them back (runs
on executors when a key group checkpoints or restores; also on the driver in tools and tests).

A full snapshot (``version`` 1) holds the whole :class:`~barrier_ops.state.KeyedStateStore`. With
``incremental_checkpoints`` a key group writes a delta (``version`` 2) instead when it can: the
state of the keys it touched since its previous snapshot (a key with no state left is written
as deleted), the watermark, and ``parent``, the path and size of the part it applies on (its
previous snapshot's last). The whole chain (a full snapshot, then the deltas since, oldest
first) travels in the snapshot handle of the acknowledgement, so the checkpoint's metadata names
every part and retention keeps them. Like Flink's incremental RocksDB checkpoints, what one checkpoint writes is proportional to
the keys changed since the previous one; a full snapshot is written again when the deltas since
the last one add up to more than its size (so a restore reads at most twice the state) or after
:data:`MAX_DELTAS` of them.

Guarantee: folding the parts of checkpoint n gives exactly the state a full snapshot of
checkpoint n holds (same keys, values, timers and watermark).
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from barrier_ops.exceptions import RestoreError
from barrier_ops.state import KeyedStateStore
from state_backends.base import SnapshotHandle, operator_snapshot_name

FULL_VERSION = 1
DELTA_VERSION = 2
#: Deltas chained on one full snapshot at most; then the next snapshot is full again.
MAX_DELTAS = 100

Parts = Tuple[Tuple[str, int], ...]


def encode_full(header: Dict[str, Any], store: KeyedStateStore) -> bytes:
    """A full snapshot: ``header`` (operator_id, key_group, max_parallelism, checkpoint_id,
    output_seq) plus the whole store."""
    return pickle.dumps({"version": FULL_VERSION, **header, "state": store.to_snapshot()},
                        protocol=4)


def decode_full_state(blob: bytes) -> KeyedStateStore:
    """The store a full snapshot's bytes hold (the header is not checked: the runtime's own copy
    in ``GroupState``, :meth:`~barrier_ops.runtime.KeyGroupRuntime.__getstate__`)."""
    return KeyedStateStore.from_snapshot(pickle.loads(blob)["state"])


def encode_delta(header: Dict[str, Any], store: KeyedStateStore, changed: Iterable[Any],
                 parent: Tuple[str, int]) -> bytes:
    """A delta on the snapshot whose last part is ``parent`` (path, size): the current state
    of every key in ``changed``."""
    return pickle.dumps({"version": DELTA_VERSION, **header, "parent": list(parent),
                         "changes": store.changes(changed),
                         "watermark_ms": store.watermark_ms}, protocol=4)


class IncrementalSnapshots:
    """Which blobs a key group's next snapshot chains on (executor; pickled with the key group's
    runtime in ``GroupState``, so a retried task decides exactly as the first attempt did).

    ``changed`` holds the keys touched since the previous snapshot, in processing order;
    ``chain`` the parts of the previous snapshot (empty: the next one is full, e.g. after a
    restore: a restored query never chains on the blobs of the checkpoint or savepoint it
    started from, which their owner may delete).
    """

    def __init__(self) -> None:
        self.changed: Dict[Any, None] = {}
        self.chain: Parts = ()
        self.full_bytes = 0
        self.delta_bytes = 0

    def touch(self, key) -> None:
        self.changed[key] = None

    def encode(self, header: Dict[str, Any], store: KeyedStateStore) -> Tuple[bytes, Parts]:
        """The next snapshot's bytes and the parts it chains on (``()``: a full snapshot)."""
        if self.chain and len(self.chain) <= MAX_DELTAS:
            delta = encode_delta(header, store, self.changed, self.chain[-1])
            if self.delta_bytes + len(delta) <= self.full_bytes:
                return delta, self.chain
        return encode_full(header, store), ()

    def written(self, handle: SnapshotHandle) -> None:
        """Record the snapshot just written (its handle); the next one chains on it."""
        self.changed = {}
        part = ((handle.path, handle.size_bytes),)
        if handle.chain:
            self.chain = handle.chain + part
            self.delta_bytes += handle.size_bytes
        else:
            self.chain = part
            self.full_bytes, self.delta_bytes = handle.size_bytes, 0


def snapshot_parts(backend, prefix: str, operator_id: str, key_group: int,
                   require_complete: bool) -> Tuple[List[bytes], str]:
    """The blobs of key group ``key_group``'s snapshot in ``prefix`` (``chk-<n>`` or a savepoint
    folder), oldest first, and its path (for errors). The parts come from the folder's
    ``_metadata`` when it has one (a savepoint's own copies), else from each delta's link to
    its parent. Raises :class:`RestoreError` naming what is missing."""
    from state_backends.exceptions import StateBackendError
    from state_backends.metadata import CheckpointMetadata

    path = f"{prefix}/{operator_snapshot_name(operator_id, key_group)}"
    try:
        raw_meta = backend.get_if_exists(f"{prefix}/_metadata")
        if raw_meta is None and require_complete and prefix.startswith("chk-"):
            raise RestoreError(f"{backend.describe()}/{prefix} is not a completed checkpoint (no "
                               "_metadata); pass restore_requires_complete=False to restore "
                               "from it anyway")
        handle: Optional[SnapshotHandle] = None
        if raw_meta is not None:
            meta = CheckpointMetadata.from_bytes(raw_meta, location=f"{prefix}/_metadata")
            handle = meta.operator_handles().get(operator_id, {}).get(key_group)
        if handle is not None and handle.chain:
            return backend.read_snapshot_parts(handle), path
        blobs = [backend.get(path)]
        probe = SnapshotHandle(0, operator_id, key_group, path, len(blobs[0]))
        parent = _parent(blobs[0])
        while parent is not None:
            blobs.insert(0, backend.read_part(probe, *parent))
            parent = _parent(blobs[0])
        return blobs, path
    except RestoreError:
        raise
    except (StateBackendError, OSError) as exc:
        raise RestoreError(f"cannot read snapshot {path} from {backend.describe()}: "
                           f"{exc}") from exc


def _parent(blob: bytes) -> Optional[Tuple[str, int]]:
    """The (path, size) a delta blob applies on; None for a full snapshot (or an unreadable
    blob, which fold() reports with its path)."""
    try:
        snap = pickle.loads(blob)
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(snap, dict) or snap.get("version") != DELTA_VERSION:
        return None
    path, size = snap["parent"]
    return str(path), int(size)


def fold(blobs: Sequence[bytes], path: str, operator_id: str,
         max_parallelism: int) -> Tuple[Dict[str, Any], KeyedStateStore]:
    """Apply a full snapshot and the deltas after it; returns the newest part's header and the
    state. Raises :class:`RestoreError` for another operator's or layout's snapshot."""
    store: Optional[KeyedStateStore] = None
    snap: Dict[str, Any] = {}
    for i, blob in enumerate(blobs):
        try:
            snap = pickle.loads(blob)
        except Exception as exc:  # noqa: BLE001 - any unpickling error: cannot restore
            raise RestoreError(f"cannot read snapshot {path} (part {i + 1} of {len(blobs)}): "
                               f"{exc}") from exc
        version = snap.get("version") if isinstance(snap, dict) else None
        expected = FULL_VERSION if i == 0 else DELTA_VERSION
        if version != expected:
            raise RestoreError(f"snapshot {path}: part {i + 1} of {len(blobs)} has version "
                               f"{version!r}, expected {expected} (a full snapshot, then "
                               "deltas); it was written by another release or overwritten")
        if snap["operator_id"] != operator_id or snap["max_parallelism"] != max_parallelism:
            raise RestoreError(f"snapshot {path} was written by operator "
                               f"{snap.get('operator_id')!r} with max_parallelism "
                               f"{snap.get('max_parallelism')}; this is {operator_id!r} with "
                               f"{max_parallelism}")
        if store is None:
            store = KeyedStateStore.from_snapshot(snap["state"])
        elif int(snap["parent"][1]) != len(blobs[i - 1]):
            raise RestoreError(f"snapshot {path}: part {i} of {len(blobs)} ({snap['parent'][0]}) "
                               f"has {len(blobs[i - 1])} bytes, the delta after it was written "
                               f"on {snap['parent'][1]} (truncated or overwritten)")
        else:
            store.apply_changes(snap["changes"])
            store.watermark_ms = snap["watermark_ms"]
    if store is None:
        raise RestoreError(f"snapshot {path} has no parts")
    return snap, store

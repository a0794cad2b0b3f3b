"""``CompletedCheckpointStore``: list, load, retain and discard checkpoints (driver).

A checkpoint ``n`` is *complete* iff ``chk-<n>/_metadata`` exists; anything else under ``chk-<n>``
is debris of a failed or interrupted checkpoint and is never listed, loaded or restored.
Savepoints (``savepoints/<name>/``, or a ``chk-<n>`` whose metadata has ``is_savepoint``) are
never discarded by retention.

Restore never falls back silently: if the chosen checkpoint cannot be used it raises a
:class:`~state_backends.exceptions.CheckpointMetadataError` naming checkpoint and path, unless
the caller asked for ``fallback_to_previous=True`` (then every skipped checkpoint is logged at
WARNING and listed in :attr:`RestorePoint.skipped`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from state_backends.base import (METADATA_FILE, STATS_FILE, StateBackend,
                                 checkpoint_dir, metadata_path, normalize_path,
                                 operator_snapshot_name, savepoint_dir, under_prefix,
                                 SAVEPOINT_PREFIX)
from state_backends.exceptions import (CheckpointMetadataError, CheckpointNotFoundError,
                                       MissingChunkError, SnapshotNotFoundError)
from state_backends.metadata import CheckpointMetadata

logger = logging.getLogger(__name__)

_METADATA_RE = re.compile(r"^chk-(\d+)/_metadata$")


@dataclass(frozen=True)
class RestorePoint:
    """What a new query starts from: metadata plus where it was found."""

    metadata: CheckpointMetadata
    location: str
    skipped: Tuple[str, ...] = field(default=())

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    @property
    def source_offsets(self):
        return self.metadata.source_offsets


class CompletedCheckpointStore:
    """Completed checkpoints of one backend root (driver; stateless between calls).

    Parameters
    ----------
    backend : StateBackend
    num_retained : int
        How many of the newest completed (non-savepoint) checkpoints ``retain()`` keeps
        (Flink's ``state.checkpoints.num-retained``; default 1).
    """

    def __init__(self, backend: StateBackend, num_retained: int = 1,
                 cache_listing: bool = False) -> None:
        if num_retained < 1:
            from state_backends.exceptions import InvalidBackendOptionError

            raise InvalidBackendOptionError(
                f"state.checkpoints.num-retained must be >= 1, got {num_retained}")
        self.backend = backend
        self.num_retained = num_retained
        # (completed ids, every chk-<n> id) of one listing, kept while ``cache_listing``: for a
        # short-lived user such as one commit worker, who sees its own writes through _note.
        self._cache_listing = cache_listing
        #: Ids below this left the stats history: retention deletes their stats too.
        self.history_floor = 0
        self._listing: Optional[Tuple[List[int], List[int]]] = None
        self._metadata: Dict[int, CheckpointMetadata] = {}

    # ------------------------------------------------------------------ listing
    def _scan(self) -> Tuple[List[int], List[int]]:
        """One listing of the storage: ids with ``_metadata`` and ids of every ``chk-<n>``
        folder (kept for later calls when ``cache_listing``)."""
        if self._listing is None or not self._cache_listing:
            completed, every = set(), set()
            for p in self.backend.list(""):
                head = p.split("/", 1)[0]
                if head.startswith("chk-") and head[4:].isdigit():
                    every.add(int(head[4:]))
                    if _METADATA_RE.match(p):
                        completed.add(int(head[4:]))
            self._listing = (sorted(completed), sorted(every))
        return self._listing

    def _note(self, checkpoint_id: int, complete: bool) -> None:
        """Keep the cached listing true after this store's own write or delete."""
        if self._listing is None:
            return
        completed, every = (set(ids) for ids in self._listing)
        every.add(checkpoint_id)
        (completed.add if complete else completed.discard)(checkpoint_id)
        self._listing = (sorted(completed), sorted(every))

    def completed_ids(self) -> List[int]:
        """Ids of completed checkpoints (``_metadata`` present), ascending. No parsing."""
        return list(self._scan()[0])

    def latest_id(self) -> Optional[int]:
        ids = self.completed_ids()
        return ids[-1] if ids else None

    def incomplete_ids(self) -> List[int]:
        """Ids of ``chk-<n>`` folders without ``_metadata`` (debris or in progress)."""
        completed, every = self._scan()
        done = set(completed)
        return [n for n in every if n not in done]

    # ------------------------------------------------------------------ loading
    def _parse(self, path: str, checkpoint_id: Optional[int]) -> CheckpointMetadata:
        location = self.backend.location(path)
        try:
            data = self.backend.get(path)
        except SnapshotNotFoundError:
            raise CheckpointNotFoundError(
                f"checkpoint {checkpoint_id if checkpoint_id is not None else path}: no "
                f"metadata at {location} (never completed, or discarded)") from None
        return CheckpointMetadata.from_bytes(data, checkpoint_id, location)

    def verify(self, meta: CheckpointMetadata, base: str) -> None:
        """Raise ``MissingChunkError`` if a snapshot blob the metadata names is absent (every
        part of an incremental snapshot; those are checked against one listing)."""
        parts = [(h, path) for h in meta.operators if h.inline is None for path, _ in h.parts]
        if len(parts) > len(meta.operators):
            stored = set(self.backend.list(""))
            present = stored.__contains__
        else:
            present = self.backend.exists
        for h, path in parts:
            if not present(path):
                raise MissingChunkError(
                    f"checkpoint {meta.checkpoint_id}: snapshot of operator {h.operator_id!r} "
                    f"key group {h.key_group} is missing at {self.backend.location(path)} "
                    f"(metadata {self.backend.location(base + '/' + METADATA_FILE)})",
                    meta.checkpoint_id, self.backend.location(path))

    def load(self, checkpoint_id: int, verify: bool = True) -> CheckpointMetadata:
        """Metadata of completed checkpoint ``checkpoint_id`` (chunks checked if ``verify``)."""
        meta = self._parse(metadata_path(checkpoint_id), checkpoint_id)
        if verify:
            self.verify(meta, checkpoint_dir(checkpoint_id))
        return meta

    def latest(self, verify: bool = True) -> Optional[CheckpointMetadata]:
        n = self.latest_id()
        return None if n is None else self.load(n, verify)

    def load_state(self, meta: CheckpointMetadata) -> Dict[str, Dict[int, Any]]:
        """``{operator_id: {key_group: bytes}}`` of a loaded checkpoint (sizes verified); an
        incremental snapshot gives the tuple of its parts, oldest first."""
        out: Dict[str, Dict[int, Any]] = {}
        for h in meta.operators:
            out.setdefault(h.operator_id, {})[h.key_group] = (
                tuple(self.backend.read_snapshot_parts(h)) if h.chain
                else self.backend.read_snapshot(h))
        return out

    # ------------------------------------------------------------------ shared parts
    def _metadata_of(self, checkpoint_id: int) -> Optional[CheckpointMetadata]:
        """Parsed metadata of a completed checkpoint (kept: metadata never changes), None if
        unreadable."""
        meta = self._metadata.get(checkpoint_id)
        if meta is None:
            try:
                meta = self.load(checkpoint_id, verify=False)
            except (CheckpointMetadataError, CheckpointNotFoundError):
                return None
            self._metadata[checkpoint_id] = meta
        return meta

    def referenced_parts(self, excluding: Iterable[int] = ()) -> Set[str]:
        """Paths of every snapshot blob a completed checkpoint names (its own and the chains of
        its incremental snapshots), except checkpoints ``excluding``: what deleting must spare.

        Why this is enough: a key group's next snapshots chain only on its own later snapshots,
        so a snapshot still being written needs only parts the newest completed checkpoint
        names, or parts of checkpoints newer than it (which no cleanup touches)."""
        skip = set(excluding)
        completed = [n for n in self.completed_ids() if n not in skip]
        self._metadata = {n: m for n, m in self._metadata.items() if n in set(completed)}
        refs: Set[str] = set()
        for n in completed:
            meta = self._metadata_of(n)
            for h in meta.operators if meta is not None else ():
                refs.update(path for path, _ in h.parts)
        return refs

    def restore(self, checkpoint_id: Optional[int] = None, savepoint: Optional[str] = None,
                fallback_to_previous: bool = False) -> Optional[RestorePoint]:
        """Choose what a new query starts from.

        1. ``savepoint`` given: that savepoint (no fallback).
        2. ``checkpoint_id`` given: that checkpoint (no fallback).
        3. Otherwise the latest completed checkpoint; ``None`` if there is none. If it is
           corrupt, has a missing chunk or an incompatible layout, raise, unless
           ``fallback_to_previous`` is set: then try the next older one, logging each skip.
        """
        if savepoint is not None:
            return RestorePoint(self.load_savepoint(savepoint), savepoint_dir(savepoint))
        if checkpoint_id is not None:
            return RestorePoint(self.load(checkpoint_id), checkpoint_dir(checkpoint_id))
        skipped: List[str] = []
        for n in reversed(self.completed_ids()):
            try:
                meta = self.load(n)
            except CheckpointMetadataError as exc:
                if not fallback_to_previous:
                    raise type(exc)(
                        f"{exc} -- refusing to fall back silently; pass "
                        "fallback_to_previous=True to restore from the previous completed "
                        "checkpoint", exc.checkpoint_id, exc.path) from exc
                logger.warning("checkpoint %d: unusable (%s); falling back to the previous "
                               "completed checkpoint as requested", n, exc)
                skipped.append(str(exc))
                continue
            return RestorePoint(meta, checkpoint_dir(n), tuple(skipped))
        if skipped:
            raise CheckpointNotFoundError(
                f"no usable completed checkpoint in {self.backend.describe()}; skipped: "
                + "; ".join(skipped))
        return None

    # ------------------------------------------------------------------ writing
    def add(self, meta: CheckpointMetadata) -> None:
        """Make ``meta.checkpoint_id`` complete: one atomic put of ``_metadata`` (the last write
        of a checkpoint), then apply retention. Idempotent."""
        self.backend.put(metadata_path(meta.checkpoint_id), meta.to_bytes())
        self._note(meta.checkpoint_id, complete=True)
        self._metadata[meta.checkpoint_id] = meta
        logger.info("checkpoint %d: metadata written to %s", meta.checkpoint_id,
                    self.backend.location(metadata_path(meta.checkpoint_id)))
        self.retain()

    def retain(self) -> List[int]:
        """Discard completed checkpoints beyond the newest ``num_retained`` (savepoints are
        kept), with their stats when they already left the stats history (``history_floor``).
        Returns the discarded ids."""
        ids = self.completed_ids()
        discarded = []
        for n in ids[:-self.num_retained]:
            meta = self._metadata_of(n)   # None: unreadable and superseded, discard
            if meta is not None and meta.is_savepoint:
                continue
            self.discard(n, keep_stats=n >= self.history_floor)
            discarded.append(n)
        return discarded

    def discard(self, checkpoint_id: int, keep_stats: bool = True,
                keep_snapshots: bool = False) -> None:
        """Delete checkpoint ``checkpoint_id``: ``_metadata`` FIRST (so a crash mid-way never
        leaves a 'complete' checkpoint with missing chunks), then its blobs and the chain
        parts of its incremental snapshots, except what another completed checkpoint names.
        ``_stats.json`` is kept unless ``keep_stats`` is false; ``keep_snapshots`` deletes the
        metadata only (an aborted checkpoint: ``discard_debris`` takes its blobs later).
        Idempotent."""
        base = checkpoint_dir(checkpoint_id)
        meta = None if keep_snapshots else self._metadata_of(checkpoint_id)
        self.backend.delete([metadata_path(checkpoint_id)])
        self._note(checkpoint_id, complete=False)
        self._metadata.pop(checkpoint_id, None)
        if keep_snapshots:
            return
        keep = self.referenced_parts(excluding=[checkpoint_id])
        doomed = [p for p in self.backend.list(base)
                  if not (keep_stats and p == f"{base}/{STATS_FILE}") and p not in keep]
        for h in meta.operators if meta is not None else ():
            doomed.extend(path for path, _ in h.chain
                          if path not in keep and not under_prefix(path, base))
        self.backend.delete(doomed)
        logger.debug("checkpoint %d: discarded from %s", checkpoint_id, self.backend.describe())

    def discard_debris(self, in_progress: Iterable[int] = (), below: Optional[int] = None,
                       above: int = 0) -> List[int]:
        """Delete blobs of incomplete checkpoints (failed, aborted, crashed) except the ids in
        ``in_progress`` and the parts a completed checkpoint's incremental snapshots chain on.
        Only ids below ``below`` (default: the latest completed id) are touched, so snapshots
        still being written for a newer checkpoint, and snapshots they may chain on, survive,
        and above ``above`` (the previous pass cleaned those), so a pass costs one listing per
        id between two completions, not one per id in the history. Stats of failed
        checkpoints are kept. Returns the ids cleaned."""
        keep = set(in_progress)
        limit = self.latest_id() if below is None else below
        cleaned = []
        if limit is None:
            return cleaned
        spare = None
        for n in self.incomplete_ids():
            if n in keep or n >= limit or n <= above:
                continue
            if spare is None:
                spare = self.referenced_parts()
            paths = [p for p in self.backend.list(checkpoint_dir(n))
                     if not p.endswith("/" + STATS_FILE) and p not in spare]
            self.backend.delete(paths)
            if paths:
                cleaned.append(n)
                logger.warning("checkpoint %d: discarded debris of an incomplete checkpoint "
                               "(%d objects)", n, len(paths))
        return cleaned

    def prune_history(self, from_id: int, to_id: int) -> int:
        """Forget checkpoints ``from_id..to_id`` (inclusive) that are not complete: their
        ``chk-<n>`` folder (the stats of a failed or discarded checkpoint, any debris) is
        deleted, except blobs a completed checkpoint's incremental snapshots chain on, and
        except the snapshots of ids above the newest completed one (a snapshot in flight may
        chain on them; ``discard_debris`` removes them once a newer checkpoint completes).
        Completed ones (retained, or savepoints) are left alone. The caller passes the ids that
        left the stats history since its last call, so the cost per checkpoint stays constant
        however long the job runs. Returns how many folders were deleted."""
        completed = set(self._scan()[0])
        latest = max(completed, default=0)
        spare = self.referenced_parts() if completed else set()
        deleted = 0
        gone = set()
        for n in range(max(1, from_id), to_id + 1):
            if n in completed:
                continue
            base = checkpoint_dir(n)
            if n > latest:
                self.backend.delete([f"{base}/{STATS_FILE}"])
                continue
            if any(under_prefix(p, base) for p in spare):
                self.backend.delete([p for p in self.backend.list(base) if p not in spare])
            else:
                self.backend.delete_prefix(base)
                gone.add(n)
            deleted += 1
        if gone and self._listing is not None:
            self._listing = (self._listing[0], [n for n in self._listing[1] if n not in gone])
        return deleted

    # ------------------------------------------------------------------ savepoints
    def create_savepoint(self, name: str, checkpoint_id: Optional[int] = None,
                         target: Optional[StateBackend] = None) -> CheckpointMetadata:
        """Copy a completed checkpoint (default: latest) to ``savepoints/<name>/``; the copy
        is never discarded. Blobs first, ``_metadata`` last. ``target``: write the savepoint
        into another backend (the checkpoint storage of a new query that restores from it)."""
        name = normalize_path(name)
        if "/" in name:
            from state_backends.exceptions import InvalidBackendOptionError

            raise InvalidBackendOptionError(f"savepoint name {name!r} must not contain '/'")
        n = checkpoint_id if checkpoint_id is not None else self.latest_id()
        if n is None:
            raise CheckpointNotFoundError(
                f"no completed checkpoint in {self.backend.describe()} to make a savepoint of")
        return self._write_savepoint(self.load(n), name, checkpoint_dir(n),
                                     target or self.backend)

    def copy_savepoint(self, name: str, target: StateBackend) -> CheckpointMetadata:
        """Copy savepoint ``name`` into ``target`` (same name), e.g. into the checkpoint storage
        of a new query that restores from it. Blobs first, ``_metadata`` last."""
        name = normalize_path(name)
        meta = self.load_savepoint(name)
        return self._write_savepoint(meta, name, meta.properties.get("source_checkpoint", ""),
                                     target)

    def _write_savepoint(self, meta: CheckpointMetadata, name: str, source: str,
                         target: StateBackend) -> CheckpointMetadata:
        base = savepoint_dir(name)
        handles = []
        for h in meta.operators:
            if h.inline is not None:
                handles.append(h)
                continue
            path = f"{base}/{operator_snapshot_name(h.operator_id, h.key_group)}"
            *earlier, last = self.backend.read_snapshot_parts(h)
            chain = tuple((f"{path}.part-{i}", len(data)) for i, data in enumerate(earlier))
            for (part, _), data in zip(chain, earlier):
                target.put(part, data)
            target.put(path, last)
            handles.append(replace(h, path=path, chain=chain))
        sp = replace(meta, operators=tuple(handles), is_savepoint=True,
                     properties={**meta.properties, "savepoint_name": name,
                                 "source_checkpoint": source})
        target.put(f"{base}/{METADATA_FILE}", sp.to_bytes())
        logger.info("savepoint %s: written from %s at %s", name, source,
                    target.location(base))
        return sp

    def savepoints(self) -> List[str]:
        names = []
        for p in self.backend.list(SAVEPOINT_PREFIX):
            parts = p.split("/")
            if len(parts) == 3 and parts[2] == METADATA_FILE:
                names.append(parts[1])
        return sorted(names)

    def load_savepoint(self, name: str, verify: bool = True) -> CheckpointMetadata:
        base = savepoint_dir(normalize_path(name))
        meta = self._parse(f"{base}/{METADATA_FILE}", None)
        if verify:
            self.verify(meta, base)
        return meta

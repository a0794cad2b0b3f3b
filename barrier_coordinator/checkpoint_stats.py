"""The statistics record of one finished checkpoint (``chk-n/_stats.json``), built from its
pending checkpoint (driver commit worker)."""

from __future__ import annotations

from typing import Dict, Optional

from barrier_coordinator.completed import CompletedCheckpoint
from barrier_coordinator.pending import PendingCheckpoint
from state_backends.checkpoint_store import CompletedCheckpointStore
from state_backends.exceptions import CheckpointMetadataError
from state_backends.stats import COMPLETED, FAILED, CheckpointStats, read_stats, write_stats


def checkpoint_stats(pending: PendingCheckpoint, completed: Optional[CompletedCheckpoint],
                     now_ms: int) -> CheckpointStats:
    """Figures of ``pending``: completed as ``completed``, or failed when ``completed`` is None
    (then it ended at ``now_ms``)."""

    def peak(key: str) -> Optional[int]:
        values = [a.metrics[key] for a in pending.acks.values() if key in a.metrics]
        return int(max(values)) if values else None

    sizes: Dict[str, int] = {}
    for a in pending.acks.values():
        for h in a.snapshots:
            sizes[h.operator_id] = sizes.get(h.operator_id, 0) + h.size_bytes
    end = completed.completed_at_ms if completed else now_ms
    reason = None if completed else (
        f"{pending.failure_reason.name}: {pending.failure_reason.message} "
        f"{pending.failure_detail}".strip())
    return CheckpointStats(
        checkpoint_id=pending.checkpoint_id, status=COMPLETED if completed else FAILED,
        trigger_timestamp_ms=pending.timestamp_ms, end_timestamp_ms=end,
        end_to_end_duration_ms=end - pending.timestamp_ms,
        alignment_duration_ms=peak("alignment_ms"), sync_duration_ms=peak("sync_ms"),
        async_duration_ms=peak("async_ms"), state_size_bytes=sizes,
        committed_offsets=pending.source_offsets if completed else {},
        failure_reason=reason, num_acknowledged=len(pending.acks),
        num_expected=len(pending.expected), is_savepoint=pending.is_savepoint)


def ensure_completed_stats(backend, store: CompletedCheckpointStore, pending: PendingCheckpoint,
                           now_ms: int) -> None:
    """After a crash between ``_metadata`` and ``_stats.json``: write the stats of ``pending``
    as completed if its metadata exists and its stats do not say so yet (driver commit
    worker)."""
    stats = read_stats(backend, pending.checkpoint_id)
    if stats is not None and stats.status == COMPLETED:
        return
    try:
        meta = store.load(pending.checkpoint_id, verify=False)
    except CheckpointMetadataError:
        return
    write_stats(backend, checkpoint_stats(pending, CompletedCheckpoint.from_metadata(meta),
                                          now_ms))

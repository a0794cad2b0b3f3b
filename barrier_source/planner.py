"""Plan the next end offset from the previous one: admission control, carrying owed barriers,
and placing the barriers of a newly triggered checkpoint. Pure; runs on the driver inside
``latestOffset``. All Kafka look-ups are done by the caller and passed in.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Dict, List, Optional

from barrier_core.schema import split_channel
from barrier_source.offsets import (PartitionOffsets, PlannedBarrier, SealedCheckpoint,
                                    SourceOffset, offset_of, sorted_channels)
from barrier_source.options import PLACEMENT_END
from barrier_source.trigger import TriggerDecision

logger = logging.getLogger(__name__)


def rate_limit(starts: PartitionOffsets, latest: PartitionOffsets,
               max_rows: Optional[int],
               owed: Optional[Dict[str, int]] = None) -> PartitionOffsets:
    """End offsets reading at most ``max_rows`` records, split over partitions in proportion to
    their backlog (as Spark's Kafka source does, but never exceeding the limit).

    ``owed`` (``{channel: barrier position}``) are barriers of triggered checkpoints still owed:
    the records up to them are admitted first (shared in proportion to the distance to each
    barrier), the rest of the budget in proportion to the backlog. So a partition whose barrier
    is owed cannot be starved by a busier one (with backlog shares alone, a partition that keeps
    receiving records takes an ever larger share, the owing one crawls, and the checkpoint -
    and every aligner holding records for it - waits)."""
    backlog = {(t, p): max(0, latest[t][p] - starts[t][p]) for t in latest for p in latest[t]}
    total = sum(backlog.values())
    if max_rows is None or total <= max_rows:
        return {t: dict(parts) for t, parts in latest.items()}
    due = {t: {p: starts[t][p] for p in latest[t]} for t in latest}  # up to owed barriers
    for channel, position in (owed or {}).items():
        t, p = split_channel(channel)
        if (t, p) in backlog:
            due[t][p] = max(due[t][p], min(latest[t][p], position))
    if count_rows(starts, due):
        first = rate_limit(starts, due, max_rows)  # owed records first, shared by owed distance
        left = max_rows - count_rows(starts, first)
        return rate_limit(first, latest, left) if left > 0 else first
    share = {k: (v * max_rows) // total for k, v in backlog.items()}
    left = max_rows - sum(share.values())
    for k in sorted(backlog, key=lambda k: (-(backlog[k] * max_rows % total), k)):
        if left <= 0:
            break
        if share[k] < backlog[k]:
            share[k] += 1
            left -= 1
    return {t: {p: starts[t][p] + share[(t, p)] for p in latest[t]} for t in latest}


def count_rows(starts: PartitionOffsets, ends: PartitionOffsets) -> int:
    return sum(max(0, ends[t][p] - starts[t][p]) for t in ends for p in ends[t])


def plan_end_offset(prev: SourceOffset, starts: PartitionOffsets, ends: PartitionOffsets,
                    new_partitions: PartitionOffsets, decision: TriggerDecision, now_ms: int,
                    placement: str, cut_positions: Optional[Dict[str, int]] = None
                    ) -> SourceOffset:
    """The end offset of a batch reading ``[starts, ends)``.

    1. Barriers the previous offset still owed are emitted on every channel whose position
       ``<= ends``. A channel that disappeared (deleted topic, ``failOnDataLoss=false``) gets
       its barrier now, without records: Flink's EndOfPartitionEvent, so aligners that already
       hold the other channels' barriers complete instead of waiting for one that cannot come.
    2. On ``TRIGGER`` checkpoint ``prev.next_checkpoint_id`` is placed on every current channel:
       at ``ends`` (placement 'end') or at ``cut_positions`` (placement 'timestamp', computed by
       the caller), emitted now where ``<= ends`` and owed otherwise.
    3. ``sealed`` becomes the newest checkpoint whose barriers are now all emitted.
    """
    channels = sorted_channels(ends)
    live = set(channels)
    barriers: List[PlannedBarrier] = []
    sealed = prev.sealed
    for b in prev.barriers:
        if not b.owed:
            continue
        gone = tuple(c for c in b.owed if c not in live)
        if gone:
            logger.warning("checkpoint %d: channels %s disappeared before their barrier; "
                           "emitting it there now (end of partition)", b.checkpoint_id, gone)
        owed = [c for c in b.owed if c in live]
        emit = gone + tuple(c for c in owed if b.positions[c] <= offset_of(ends, c))
        still = tuple(c for c in owed if c not in emit)
        carried = replace(b, emit=emit, owed=still)
        barriers.append(carried)
        if not still:
            sealed = SealedCheckpoint(b.checkpoint_id, b.timestamp_ms, carried.sealed_offsets())
    next_id, last_ms, since = (prev.next_checkpoint_id, prev.last_trigger_ms,
                               prev.batches_since_trigger + 1)
    if decision is TriggerDecision.TRIGGER and channels:
        if placement == PLACEMENT_END:
            positions = {c: offset_of(ends, c) for c in channels}
        else:
            positions = {c: max(int(cut_positions[c]), offset_of(starts, c)) for c in channels}
        emit = tuple(c for c in channels if positions[c] <= offset_of(ends, c))
        owed = tuple(c for c in channels if c not in emit)
        planned = PlannedBarrier(next_id, now_ms, placement, tuple(channels), positions, emit,
                                 owed)
        barriers.append(planned)
        if not owed:
            sealed = SealedCheckpoint(next_id, now_ms, planned.sealed_offsets())
        logger.debug("checkpoint %d: triggered at %d (%s), %d channels, %d owed", next_id,
                     now_ms, placement, len(channels), len(owed))
        next_id, last_ms, since = next_id + 1, now_ms, 0
    return SourceOffset(offsets={t: dict(p) for t, p in ends.items()},
                        new_partitions={t: dict(p) for t, p in new_partitions.items()},
                        next_checkpoint_id=next_id, last_trigger_ms=last_ms,
                        batches_since_trigger=since, barriers=tuple(barriers), sealed=sealed,
                        restored_id=prev.restored_id)

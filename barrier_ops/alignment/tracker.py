"""``BarrierTracker``: at-least-once barrier tracking (Flink's CheckpointBarrierTracker).

Runs inside ``applyInPandasWithState`` on executors, one instance per key group. It never holds a
record back: it counts, per checkpoint, which channels delivered the barrier and triggers the
snapshot when the last live channel did. Records after barrier n on a fast channel are therefore
in snapshot n and replayed again after a restore from n (at-least-once).

Rules (Flink 1.11 ``CheckpointBarrierTracker``, with sets instead of counters):

1. A barrier of an unknown checkpoint newer than every pending one starts tracking it; an older
   unknown one is ``OBSOLETE``. At most :attr:`BarrierTracker.MAX_CHECKPOINTS_TO_TRACK` are
   tracked; the oldest is dropped (``TOO_MANY_PENDING``).
2. A second barrier from the same channel is a ``DUPLICATE`` and not counted.
3. When every expected channel delivered checkpoint n (or ended), n is triggered (unless it was
   cancelled), oldest first: a complete checkpoint waits behind an older incomplete one (with a
   changing channel set, a channel that left may still owe records of the older epoch). An older
   checkpoint that every channel owing it skipped (they delivered a newer barrier) is aborted as
   ``SUBSUMED``, as in Flink.
4. A cancellation marker for n marks n aborted (its later barriers are still counted so the entry
   can be removed) and aborts every older pending checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from barrier_ops.alignment.events import (AbortReason, Barrier, BarrierOutcome,
                                          CancellationBarrier, CheckpointAborted,
                                          CheckpointTriggered)
from barrier_ops.alignment.handler import BarrierHandler

logger = logging.getLogger(__name__)


@dataclass
class _BarrierCount:
    checkpoint_id: int
    timestamp_ms: Optional[int]
    expected: frozenset
    start_ms: float
    received: Dict[str, Optional[int]] = field(default_factory=dict)
    aborted: bool = False


class BarrierTracker(BarrierHandler):
    """Count barriers per checkpoint; trigger when all live channels delivered it (never blocks).

    Runs inside ``applyInPandasWithState`` on executors.

    Notes
    -----
    Must be picklable (``GroupState`` stores it). Assumes newer checkpoints have higher ids.
    """

    MAX_CHECKPOINTS_TO_TRACK = 50

    def __init__(self, name: str = "tracker", clock=None) -> None:
        super().__init__(name, clock)
        self._pending: List[_BarrierCount] = []
        self._latest_on_channel: Dict[str, int] = {}

    @property
    def pending_checkpoint_ids(self) -> List[int]:
        return [c.checkpoint_id for c in self._pending]

    # ------------------------------------------------------------------ hooks
    def _on_barrier(self, barrier: Barrier) -> None:
        outcome = self._count(barrier)
        logger.debug("%s: barrier %d from channel %s @ %s: %s", self.name,
                     barrier.checkpoint_id, barrier.channel, barrier.offset, outcome.name)

    def _count(self, barrier: Barrier) -> BarrierOutcome:
        cid = barrier.checkpoint_id
        ch = barrier.channel
        self._latest_on_channel[ch] = max(self._latest_on_channel.get(ch, cid), cid)
        entry = next((c for c in self._pending if c.checkpoint_id == cid), None)
        if entry is None:
            if cid <= self.current_checkpoint_id:
                return BarrierOutcome.OBSOLETE
            entry = _BarrierCount(cid, barrier.timestamp_ms, self._expected_channels(barrier),
                                  self._now_ms())
            # usually the newest; a channel that joined late can show a newer id first
            pos = sum(1 for c in self._pending if c.checkpoint_id < cid)
            self._pending.insert(pos, entry)
            if len(self._pending) > self.MAX_CHECKPOINTS_TO_TRACK:
                dropped = self._pending.pop(0)
                if not dropped.aborted:
                    self._abort(dropped, AbortReason.TOO_MANY_PENDING)
            outcome = BarrierOutcome.STARTED
        elif ch in entry.received:
            logger.warning("%s: ignored duplicate barrier %d from channel %s", self.name, cid, ch)
            return BarrierOutcome.DUPLICATE
        else:
            outcome = BarrierOutcome.RECEIVED
        entry.received[ch] = barrier.offset
        done = self._resolve()
        return BarrierOutcome.COMPLETED if cid in done else outcome

    def _is_complete(self, entry: _BarrierCount) -> bool:
        return entry.expected <= (set(entry.received) | self._closed)

    def _is_skipped(self, entry: _BarrierCount) -> bool:
        """Every channel still owing this barrier already delivered a newer one."""
        missing = entry.expected - set(entry.received) - self._closed
        return all(self._latest_on_channel.get(ch, -1) > entry.checkpoint_id for ch in missing)

    def _resolve(self) -> List[int]:
        """Trigger complete checkpoints oldest first; abort the skipped ones.

        A complete checkpoint waits behind an older incomplete one: a channel that left the
        channel set may still owe records of the older epoch, and the newer snapshot must
        contain them. Checkpoints skipped on every channel that owes them are subsumed (Flink).
        """
        done = []
        while self._pending:
            entry = self._pending[0]
            if self._is_complete(entry):
                self._pending.pop(0)
                done.append(entry.checkpoint_id)
                self.current_checkpoint_id = max(self.current_checkpoint_id, entry.checkpoint_id)
                if not entry.aborted:
                    self._out.append(CheckpointTriggered(
                        entry.checkpoint_id, entry.timestamp_ms,
                        dict(sorted(entry.received.items())),
                        tuple(sorted(entry.expected | set(entry.received))),
                        max(0.0, self._now_ms() - entry.start_ms), 0))
                    logger.debug("%s: all barriers of checkpoint %d received", self.name,
                                 entry.checkpoint_id)
            elif self._is_skipped(entry):
                self._pending.pop(0)
                if not entry.aborted:
                    self._abort(entry, AbortReason.SUBSUMED)
            else:
                break
        return done

    def _abort(self, entry: _BarrierCount, reason: AbortReason) -> None:
        entry.aborted = True
        self.current_checkpoint_id = max(self.current_checkpoint_id, entry.checkpoint_id)
        logger.warning("%s: aborting checkpoint %d: %s", self.name, entry.checkpoint_id,
                       reason.value)
        self._out.append(CheckpointAborted(entry.checkpoint_id, reason))

    def _on_cancellation(self, marker: CancellationBarrier) -> None:
        cid = marker.checkpoint_id
        while self._pending and self._pending[0].checkpoint_id < cid:
            older = self._pending.pop(0)
            if not older.aborted:
                self._abort(older, AbortReason.SUBSUMED)
        if self._pending and self._pending[0].checkpoint_id == cid:
            entry = self._pending[0]
            if not entry.aborted:
                self._abort(entry, AbortReason.CANCELLED)
            entry.received.setdefault(marker.channel, None)
            if entry.expected <= (set(entry.received) | self._closed):
                self._pending.pop(0)
                self.current_checkpoint_id = max(self.current_checkpoint_id, cid)
        elif cid > self.current_checkpoint_id:
            entry = _BarrierCount(cid, None, frozenset(self._known - self._closed),
                                  self._now_ms(), {marker.channel: None}, aborted=True)
            self._out.append(CheckpointAborted(cid, AbortReason.CANCELLED))
            logger.warning("%s: checkpoint %d cancelled", self.name, cid)
            if not entry.expected <= (set(entry.received) | self._closed):
                pos = sum(1 for c in self._pending if c.checkpoint_id < cid)
                self._pending.insert(pos, entry)
            else:
                self.current_checkpoint_id = cid
        # else: trailing cancellation of an already cancelled checkpoint
        self._resolve()

    def _on_end_of_partition(self, channel: str) -> None:
        self._resolve()

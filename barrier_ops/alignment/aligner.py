"""``BarrierAligner``: exactly-once barrier alignment (Flink's CheckpointBarrierAligner).

Runs inside ``applyInPandasWithState`` on executors, one instance per key group, pickled into
Spark's ``GroupState`` between micro-batches.

Protocol, per checkpoint n:

1. The first barrier n (newer than every checkpoint seen) starts an alignment; the expected
   channels are the barrier's ``channels`` (the live set of n). Its channel is blocked: its later
   events stay queued (held back), across micro-batches if needed.
2. Every further barrier n blocks its channel. A second barrier n on the same channel is a
   ``DUPLICATE`` and ignored; a barrier of an older checkpoint is ``OBSOLETE`` and ignored.
3. When every expected channel delivered n or ended, the aligner emits
   :class:`CheckpointTriggered` (snapshot now) and unblocks every channel.
4. A barrier m > n from a channel that was expected to deliver n subsumes n (Flink): n is aborted
   (:class:`CheckpointAborted`, ``SUBSUMED``), channels unblocked, alignment of m starts. A
   barrier m > n from a channel that is not part of n (it appeared later) is held until n is done.
5. A cancellation marker for n aborts n (``CANCELLED``); for m > n it aborts n (``SUBSUMED``)
   and m (``CANCELLED``); later barriers of a cancelled checkpoint are ``OBSOLETE``.
6. Records that carry an epoch (the ``checkpoint_id`` column) newer than the checkpoint being
   aligned are held even on channels without a barrier yet (a channel that appeared at a later
   checkpoint), so no snapshot ever contains a record from after its cut.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, Optional

from barrier_ops.alignment.events import (AbortReason, Barrier, BarrierOutcome,
                                          CancellationBarrier,
                                          CheckpointAborted, CheckpointTriggered, Records)
from barrier_ops.alignment.handler import BarrierHandler
from barrier_ops.alignment.states import BarrierHandlerState, WaitingForFirstBarrier

logger = logging.getLogger(__name__)


@dataclass
class _Alignment:
    """The checkpoint being aligned."""

    checkpoint_id: int
    timestamp_ms: Optional[int]
    expected: frozenset
    start_ms: float
    received: Dict[str, Optional[int]] = field(default_factory=dict)


class BarrierAligner(BarrierHandler):
    """Buffer the records of each channel after barrier n until every live channel delivered
    barrier n, then trigger the snapshot of n (exactly-once).

    Runs inside ``applyInPandasWithState`` on executors.

    Examples
    --------
    >>> a = BarrierAligner("op/kg-0")
    >>> out = a.process([Records("t:0", [1, 2], 1), Barrier(1, "t:0", 2, channels=("t:0", "t:1")),
    ...                  Records("t:0", [3], 2), Records("t:1", [7], 1)])
    >>> [type(o).__name__ for o in out]
    ['Released', 'Released']
    >>> a.held_back_records
    1

    Notes
    -----
    Must be picklable (``GroupState`` stores it, held-back records included).
    """

    def __init__(self, name: str = "aligner", clock=None) -> None:
        super().__init__(name, clock)
        self._state: BarrierHandlerState = WaitingForFirstBarrier()
        self._blocked: set = set()
        self._pending: Optional[_Alignment] = None
        self._last_barrier_channel: Optional[str] = None

    # ------------------------------------------------------------------ introspection
    @property
    def state(self) -> BarrierHandlerState:
        return self._state

    @property
    def blocked_channels(self) -> set:
        return set(self._blocked)

    @property
    def pending_checkpoint_id(self) -> Optional[int]:
        return self._pending.checkpoint_id if self._pending else None

    def is_aligning(self) -> bool:
        return self._pending is not None

    # ------------------------------------------------------------------ pump hooks
    def _is_held(self, channel: str, event) -> bool:
        if channel in self._blocked:
            return True
        if self.current_checkpoint_id is None:
            return False
        if isinstance(event, Records) and event.epoch is not None:
            limit = self.current_checkpoint_id + (0 if self._pending else 1)
            return event.epoch > limit
        if isinstance(event, Barrier):
            if self._pending is None:
                # ids are consecutive: a channel whose next barrier is newer than the next
                # checkpoint joined later; it waits until the older checkpoints are done
                return event.checkpoint_id > self.current_checkpoint_id + 1
            # a channel that is not part of the pending checkpoint waits for it
            return (event.checkpoint_id > self._pending.checkpoint_id
                    and channel not in self._pending.expected)
        return False

    def _on_barrier(self, barrier: Barrier) -> None:
        self._state, outcome = self._state.barrier_received(self, barrier)
        logger.debug("%s: barrier %d from channel %s @ %s: %s", self.name,
                     barrier.checkpoint_id, barrier.channel, barrier.offset, outcome.name)
        if outcome in (BarrierOutcome.DUPLICATE, BarrierOutcome.OBSOLETE):
            logger.warning("%s: ignored %s barrier %d from channel %s", self.name,
                           outcome.name.lower(), barrier.checkpoint_id, barrier.channel)

    def _on_cancellation(self, marker: CancellationBarrier) -> None:
        logger.debug("%s: cancellation of checkpoint %d from channel %s", self.name,
                     marker.checkpoint_id, marker.channel)
        self._state = self._state.cancellation_received(self, marker)

    def _on_end_of_partition(self, channel: str) -> None:
        logger.debug("%s: end of channel %s", self.name, channel)
        self._blocked.discard(channel)
        self._state = self._state.end_of_partition(self)

    # ------------------------------------------------------------------ Controller
    def begin_alignment(self, barrier: Barrier) -> None:
        self.current_checkpoint_id = barrier.checkpoint_id
        self._pending = _Alignment(barrier.checkpoint_id, barrier.timestamp_ms,
                                   self._expected_channels(barrier), self._now_ms())
        logger.debug("%s: starting alignment of checkpoint %d over %d channels", self.name,
                     barrier.checkpoint_id, len(self._pending.expected))
        self.receive_barrier(barrier)

    def receive_barrier(self, barrier: Barrier) -> bool:
        pending = self._pending
        if barrier.channel in pending.received:
            return False
        if barrier.channel not in pending.expected:
            logger.warning("%s: barrier %d from channel %s outside its channel set %s",
                           self.name, barrier.checkpoint_id, barrier.channel,
                           sorted(pending.expected))
        pending.received[barrier.channel] = barrier.offset
        self._blocked.add(barrier.channel)
        self._last_barrier_channel = barrier.channel
        return True

    def is_aligned(self) -> bool:
        pending = self._pending
        return pending is not None and pending.expected <= (set(pending.received) | self._closed)

    def trigger_checkpoint(self) -> None:
        pending = self._pending
        last = self._last_barrier_channel  # its later events were never held, just queued
        held = sum(e.count for ch, q in self._queues.items()
                   if q and ch != last and (ch in self._blocked or self._is_held(ch, q[0]))
                   for e in q if isinstance(e, Records))
        channels = tuple(sorted(pending.expected | set(pending.received)))
        self._out.append(CheckpointTriggered(
            pending.checkpoint_id, pending.timestamp_ms, dict(sorted(pending.received.items())),
            channels, max(0.0, self._now_ms() - pending.start_ms), held))
        logger.debug("%s: aligned checkpoint %d (%d records held back)", self.name,
                     pending.checkpoint_id, held)
        self._release()

    def abort_pending(self, reason: AbortReason) -> None:
        pending = self._pending
        logger.warning("%s: aborting checkpoint %d: %s", self.name, pending.checkpoint_id,
                       reason.value)
        self._out.append(CheckpointAborted(pending.checkpoint_id, reason))
        self._release()

    def cancel_unstarted(self, checkpoint_id: int) -> None:
        logger.warning("%s: checkpoint %d cancelled before its alignment started", self.name,
                       checkpoint_id)
        self.current_checkpoint_id = checkpoint_id
        self._out.append(CheckpointAborted(checkpoint_id, AbortReason.CANCELLED))

    def _release(self) -> None:
        self._blocked.clear()
        self._pending = None

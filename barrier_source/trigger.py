"""The checkpoint trigger decision (Flink's CheckpointRequestDecider, reduced to what a
micro-batch source needs). Pure: runs on the driver inside ``latestOffset``; time is passed in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import AbstractSet, Optional


class TriggerDecision(enum.Enum):
    """Outcome of :meth:`CheckpointTrigger.decide`; only ``TRIGGER`` starts a checkpoint."""

    TRIGGER = "trigger"
    DISABLED = "checkpoints disabled"
    NOT_DUE = "neither interval nor batch count reached"
    MIN_PAUSE = "min pause since the previous trigger not over"
    MAX_CONCURRENT = "max concurrent checkpoints pending"


@dataclass(frozen=True)
class TriggerState:
    """What the previous end offset recorded about triggers."""

    next_checkpoint_id: int = 1
    last_trigger_ms: Optional[int] = None
    batches_since_trigger: int = 0


@dataclass(frozen=True)
class CheckpointTrigger:
    """Decides, once per planned batch with new data, whether that batch triggers a checkpoint.

    Parameters
    ----------
    interval_ms : int
        Trigger when at least this long passed since the previous trigger (0 = not by time).
        The first batch with data triggers the first checkpoint.
    interval_batches : int
        Trigger on every N-th batch with data since the previous trigger (0 = not by count).
    min_pause_ms : int
        Minimum time between two triggers (Flink measures from the previous completion; the
        source cannot observe completion times durably, so it measures from the trigger).
    max_concurrent : int
        Triggered checkpoints not yet completed; at the limit a due trigger waits.
    """

    interval_ms: int = 0
    interval_batches: int = 1
    min_pause_ms: int = 0
    max_concurrent: int = 1

    @property
    def is_enabled(self) -> bool:
        return self.interval_ms > 0 or self.interval_batches > 0

    def decide(self, state: TriggerState, now_ms: int, completed_id: int,
               aborted: AbstractSet[int] = frozenset(), due: bool = False) -> TriggerDecision:
        """Decide for the batch being planned at ``now_ms``.

        ``completed_id`` is the newest completed checkpoint (0 if none) and ``aborted`` the
        ids after it that the coordinator aborted (expired, declined, cancelled); the other
        checkpoints ``completed_id + 1 .. next_checkpoint_id - 1`` are pending. As in Flink, a
        failed checkpoint frees its concurrency slot at once. ``due`` makes the checkpoint due
        whatever the interval says (an idle source sealing open transactions); min-pause and
        max-concurrent still apply.
        """
        if not self.is_enabled:
            return TriggerDecision.DISABLED
        last = state.last_trigger_ms
        due_by_time = self.interval_ms > 0 and (last is None or now_ms - last >= self.interval_ms)
        due_by_count = (self.interval_batches > 0
                        and (last is None
                             or state.batches_since_trigger + 1 >= self.interval_batches))
        if not (due or due_by_time or due_by_count):
            return TriggerDecision.NOT_DUE
        if last is not None and now_ms - last < self.min_pause_ms:
            return TriggerDecision.MIN_PAUSE
        pending = sum(1 for n in range(completed_id + 1, state.next_checkpoint_id)
                      if n not in aborted)
        if pending >= self.max_concurrent:
            return TriggerDecision.MAX_CONCURRENT
        return TriggerDecision.TRIGGER

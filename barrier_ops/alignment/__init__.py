"""Barrier alignment (exactly-once) and barrier tracking (at-least-once) for one operator input.

Pure Python, no Spark: the handlers run inside ``applyInPandasWithState`` on executors, one per
key group, and are pickled whole into Spark's ``GroupState`` between micro-batches (held-back
records included), so a crash loses nothing.

* :class:`~barrier_ops.alignment.aligner.BarrierAligner` - Flink's CheckpointBarrierAligner:
  blocks a channel after barrier n until barrier n arrived on every live channel.
* :class:`~barrier_ops.alignment.tracker.BarrierTracker` - Flink's CheckpointBarrierTracker:
  only counts barriers, never blocks.
"""

from barrier_ops.alignment.aligner import BarrierAligner
from barrier_ops.alignment.events import (AbortReason, Barrier, BarrierOutcome,
                                          CancellationBarrier, CheckpointAborted,
                                          CheckpointTriggered, EndOfPartition, Records,
                                          Released)
from barrier_ops.alignment.tracker import BarrierTracker

__all__ = ["BarrierAligner", "BarrierTracker", "Barrier", "CancellationBarrier", "EndOfPartition",
           "Records", "Released", "CheckpointTriggered", "CheckpointAborted", "AbortReason",
           "BarrierOutcome"]

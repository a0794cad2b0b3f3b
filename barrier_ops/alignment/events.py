"""Input events and output notifications of the barrier handlers (pure data, picklable).

Runs anywhere: built by the operator runtime on executors, and by unit tests.

Inputs, per channel (a Kafka ``topic:partition`` or an upstream operator's key group), in channel
order: :class:`Records` (an opaque chunk of records), :class:`Barrier`,
:class:`CancellationBarrier`, :class:`EndOfPartition`.

Outputs, in processing order: :class:`Released` (records the operator may process now),
:class:`CheckpointTriggered` (snapshot now: everything released before it is in checkpoint n,
nothing released after it is) and :class:`CheckpointAborted`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple


class BarrierOutcome(enum.Enum):
    """What a barrier did to the handler (expected outcomes, never exceptions)."""

    STARTED = "started"          #: first barrier of a new checkpoint
    RECEIVED = "received"        #: one more barrier of the pending checkpoint
    COMPLETED = "completed"      #: last barrier: checkpoint triggered
    DUPLICATE = "duplicate"      #: this channel already delivered this checkpoint's barrier
    OBSOLETE = "obsolete"        #: trailing barrier of an older, done or cancelled checkpoint


class AbortReason(enum.Enum):
    """Why a checkpoint was not snapshotted (Flink's CheckpointFailureReason subset)."""

    SUBSUMED = "a newer checkpoint's barrier arrived before this one aligned"
    CANCELLED = "a cancellation marker arrived for this checkpoint"
    #: (tracker) too many checkpoints in flight; the oldest was dropped
    TOO_MANY_PENDING = "too many checkpoints pending; the oldest was dropped"


@dataclass(frozen=True)
class Barrier:
    """CheckpointBarrier ``checkpoint_id`` on ``channel`` at ``offset``.

    ``channels`` is the live channel set of the checkpoint (the row's ``barrier_channels``):
    every channel that delivers this barrier. Empty means "every channel seen so far".
    """

    checkpoint_id: int
    channel: str
    offset: Optional[int] = None
    timestamp_ms: Optional[int] = None
    channels: Tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"CheckpointBarrier {self.checkpoint_id} @ {self.channel}:{self.offset}"


@dataclass(frozen=True)
class CancellationBarrier:
    """Flink's CancelCheckpointMarker for ``checkpoint_id`` on ``channel``."""

    checkpoint_id: int
    channel: str


@dataclass(frozen=True)
class EndOfPartition:
    """``channel`` delivers nothing more: it counts as aligned for every later checkpoint."""

    channel: str


@dataclass
class Records:
    """A chunk of consecutive records of one channel, opaque to the handlers.

    ``payload`` is anything picklable with ``len()`` (a pandas DataFrame in the operator, a list in
    tests). ``epoch`` is the records' ``checkpoint_id`` (the first checkpoint whose barrier follows
    them on their channel); when set, the aligner also holds back records of a channel that has
    not delivered a barrier yet but whose epoch is newer than the checkpoint being aligned (a
    channel that appeared at a later checkpoint). ``None``: barriers alone decide.
    """

    channel: str
    payload: Any
    epoch: Optional[int] = None

    @property
    def count(self) -> int:
        return len(self.payload)


@dataclass
class Released:
    """Records the operator may process now (in this order)."""

    channel: str
    payload: Any
    epoch: Optional[int] = None


@dataclass
class CheckpointTriggered:
    """Snapshot the operator state now for ``checkpoint_id``.

    ``offsets`` maps channel -> the barrier's offset on it (the cut), ``alignment_ms`` is the
    wall time from the first to the last barrier, ``held_back_records`` how many records were
    blocked when the alignment finished.
    """

    checkpoint_id: int
    timestamp_ms: Optional[int]
    offsets: Dict[str, Optional[int]] = field(default_factory=dict)
    channels: Tuple[str, ...] = ()
    alignment_ms: float = 0.0
    held_back_records: int = 0


@dataclass
class CheckpointAborted:
    """Checkpoint ``checkpoint_id`` will not be snapshotted by this handler."""

    checkpoint_id: int
    reason: AbortReason

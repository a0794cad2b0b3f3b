"""States of the aligned barrier handler, as in Flink's ``SingleCheckpointBarrierHandler``.

Runs inside ``applyInPandasWithState`` on executors. Each method returns the next state; the
states reach the :class:`~barrier_ops.alignment.aligner.BarrierAligner` only through the
narrow :class:`Controller` interface. States hold no data (the alignment lives in the
controller), so they pickle trivially.
"""

from __future__ import annotations

from typing import Protocol, Tuple

from barrier_ops.alignment.events import (AbortReason, Barrier, BarrierOutcome,
                                          CancellationBarrier)


class Controller(Protocol):
    """What a state may ask of the aligner."""

    current_checkpoint_id: int

    def begin_alignment(self, barrier: Barrier) -> None: ...

    def receive_barrier(self, barrier: Barrier) -> bool: ...

    def is_aligned(self) -> bool: ...

    def trigger_checkpoint(self) -> None: ...

    def abort_pending(self, reason: AbortReason) -> None: ...

    def cancel_unstarted(self, checkpoint_id: int) -> None: ...


class BarrierHandlerState:
    """One state of the aligner."""

    def barrier_received(self, ctl: Controller,
                         barrier: Barrier) -> Tuple["BarrierHandlerState", BarrierOutcome]:
        raise NotImplementedError

    def cancellation_received(self, ctl: Controller,
                              marker: CancellationBarrier) -> "BarrierHandlerState":
        raise NotImplementedError

    def end_of_partition(self, ctl: Controller) -> "BarrierHandlerState":
        return self

    def __repr__(self) -> str:
        return type(self).__name__

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self).__name__)


class WaitingForFirstBarrier(BarrierHandlerState):
    """No alignment in progress; the next newer barrier starts one."""

    def barrier_received(self, ctl, barrier):
        if barrier.checkpoint_id <= ctl.current_checkpoint_id:
            # trailing barrier of a done, aborted or cancelled checkpoint
            return self, BarrierOutcome.OBSOLETE
        ctl.begin_alignment(barrier)
        if ctl.is_aligned():
            ctl.trigger_checkpoint()
            return self, BarrierOutcome.COMPLETED
        return CollectingBarriers(), BarrierOutcome.STARTED

    def cancellation_received(self, ctl, marker):
        if marker.checkpoint_id > ctl.current_checkpoint_id:
            # the first "barrier" of this checkpoint is a cancellation: it can never start
            ctl.cancel_unstarted(marker.checkpoint_id)
        return self


class CollectingBarriers(BarrierHandlerState):
    """Alignment of ``ctl.current_checkpoint_id`` in progress; channels that delivered it are
    blocked."""

    def barrier_received(self, ctl, barrier):
        pending = ctl.current_checkpoint_id
        if barrier.checkpoint_id == pending:
            if not ctl.receive_barrier(barrier):
                return self, BarrierOutcome.DUPLICATE
            if ctl.is_aligned():
                ctl.trigger_checkpoint()
                return WaitingForFirstBarrier(), BarrierOutcome.COMPLETED
            return self, BarrierOutcome.RECEIVED
        if barrier.checkpoint_id > pending:
            # a channel skipped `pending`: the newer checkpoint subsumes it (Flink semantics)
            ctl.abort_pending(AbortReason.SUBSUMED)
            return WaitingForFirstBarrier().barrier_received(ctl, barrier)
        return self, BarrierOutcome.OBSOLETE

    def cancellation_received(self, ctl, marker):
        pending = ctl.current_checkpoint_id
        if marker.checkpoint_id == pending:
            ctl.abort_pending(AbortReason.CANCELLED)
            return WaitingForFirstBarrier()
        if marker.checkpoint_id > pending:
            ctl.abort_pending(AbortReason.SUBSUMED)
            ctl.cancel_unstarted(marker.checkpoint_id)
            return WaitingForFirstBarrier()
        return self

    def end_of_partition(self, ctl):
        if ctl.is_aligned():
            ctl.trigger_checkpoint()
            return WaitingForFirstBarrier()
        return self

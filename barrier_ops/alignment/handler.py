"""Common input side of the barrier handlers: per-channel FIFO queues and the pump.

Runs inside ``applyInPandasWithState`` on executors (and in unit tests).

The operator pushes the events of a micro-batch, each channel's events in channel order, then
calls :meth:`BarrierHandler.poll`. The pump visits channels in sorted order and consumes each
channel until it is empty or held (the aligner blocks channels; the tracker never does). Any
interleaving across channels is a valid arrival order; sorting makes it deterministic, so a
replayed batch yields the same releases and the same snapshots.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Callable, Deque, Dict, Iterable, List, Optional, Set

from barrier_ops.alignment.events import (Barrier, CancellationBarrier, EndOfPartition, Records,
                                          Released)

logger = logging.getLogger(__name__)


def wall_clock_ms() -> float:
    """Default clock of the handlers (module-level so handlers stay picklable)."""
    return time.time() * 1000.0


class BarrierHandler:
    """Base of :class:`BarrierAligner` and :class:`BarrierTracker`.

    Parameters
    ----------
    name : str
        Subject of log lines, e.g. ``"wordcount/kg-7"``.
    clock : callable, optional
        Returns wall time in ms; only alignment metrics use it. Must be picklable.

    Notes
    -----
    Must be picklable: the whole handler, queued (held-back) records included, is stored in
    Spark's ``GroupState`` after every micro-batch.
    """

    def __init__(self, name: str = "handler", clock: Optional[Callable[[], float]] = None) -> None:
        self.name = name
        self._clock = clock
        self._queues: Dict[str, Deque] = {}
        self._known: Set[str] = set()
        self._closed: Set[str] = set()
        #: id of the pending checkpoint, or of the last one triggered / aborted / cancelled
        self.current_checkpoint_id: Optional[int] = None
        self._out: List = []

    # ------------------------------------------------------------------ input
    def push(self, event) -> None:
        """Queue one event of its channel (after every earlier event of that channel)."""
        channel = event.channel
        self._known.add(channel)
        q = self._queues.get(channel)
        if q is None:
            q = self._queues[channel] = deque()
        q.append(event)

    def push_all(self, events: Iterable) -> None:
        for event in events:
            self.push(event)

    def start_after(self, checkpoint_id: int) -> None:
        """Declare every checkpoint up to ``checkpoint_id`` done (fresh or restored operator)."""
        if self.current_checkpoint_id is None:
            self.current_checkpoint_id = checkpoint_id

    def poll(self) -> List:
        """Consume every queued event that is not held; return the outputs in order.

        Outputs are :class:`Released`, :class:`CheckpointTriggered` and
        :class:`CheckpointAborted`; records released before a trigger belong to its snapshot.
        """
        out = self._out = []
        if self.current_checkpoint_id is None:
            self.adopt_first_checkpoint()
        progress = True
        while progress:
            progress = False
            for channel in sorted(self._queues):
                q = self._queues[channel]
                while q and not self._is_held(channel, q[0]):
                    event = q.popleft()
                    progress = True
                    self._dispatch(channel, event)
        for channel in [c for c, q in self._queues.items() if not q]:
            del self._queues[channel]
        self._out = []
        return out

    def adopt_first_checkpoint(self) -> None:
        """A fresh handler starts just before the oldest checkpoint or epoch queued (no-op once
        started); ``poll`` calls it."""
        if self.current_checkpoint_id is not None:
            return
        ids = [e.checkpoint_id for q in self._queues.values() for e in q
               if isinstance(e, (Barrier, CancellationBarrier))]
        ids += [e.epoch for q in self._queues.values() for e in q
                if isinstance(e, Records) and e.epoch is not None]
        if ids:
            self.current_checkpoint_id = min(ids) - 1

    def process(self, events: Iterable) -> List:
        """``push_all(events)`` then ``poll()``."""
        self.push_all(events)
        return self.poll()

    # ------------------------------------------------------------------ introspection
    @property
    def held_back_records(self) -> int:
        """Records queued but not released (after ``poll``: every queued record)."""
        return sum(e.count for q in self._queues.values() for e in q if isinstance(e, Records))

    @property
    def queued_events(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def closed_channels(self) -> Set[str]:
        return set(self._closed)

    # ------------------------------------------------------------------ subclass hooks
    def _is_held(self, channel: str, event) -> bool:
        return False

    def _dispatch(self, channel: str, event) -> None:
        if isinstance(event, Records):
            self._out.append(Released(channel, event.payload, event.epoch))
        elif isinstance(event, Barrier):
            if self.current_checkpoint_id is None:
                self.current_checkpoint_id = event.checkpoint_id - 1
            self._on_barrier(event)
        elif isinstance(event, CancellationBarrier):
            if self.current_checkpoint_id is None:
                self.current_checkpoint_id = event.checkpoint_id - 1
            self._on_cancellation(event)
        elif isinstance(event, EndOfPartition):
            self._closed.add(channel)
            self._on_end_of_partition(channel)
        else:
            raise TypeError(f"bug: unknown event {event!r}")

    def _on_barrier(self, barrier: Barrier) -> None:
        raise NotImplementedError

    def _on_cancellation(self, marker: CancellationBarrier) -> None:
        raise NotImplementedError

    def _on_end_of_partition(self, channel: str) -> None:
        raise NotImplementedError

    def _now_ms(self) -> float:
        return (self._clock or wall_clock_ms)()

    def _expected_channels(self, barrier: Barrier) -> frozenset:
        if barrier.channels:
            return frozenset(barrier.channels)
        return frozenset(self._known - self._closed)

"""Test doubles for the coordinator (as Flink's ``CheckpointSequenceValidator``)."""

from __future__ import annotations

import uuid
from typing import List, Tuple

from barrier_coordinator import (CheckpointCoordinator, CoordinatorConfig, ManualClock,
                                 TaskAcknowledgement)
from state_backends.memory import MemoryStateBackend


class CheckpointSequenceValidator:
    """Listener that expects outcomes in order: a positive id expects
    ``notify_checkpoint_complete(id)``, a negative id expects ``notify_checkpoint_aborted(-id)``."""

    def __init__(self, *checkpoint_ids: int) -> None:
        self.expected = list(checkpoint_ids)
        self.position = 0
        self.reasons = {}

    def _next(self, got: int) -> None:
        assert self.position < len(self.expected), \
            f"unexpected {'completion' if got > 0 else 'abort'} of checkpoint {abs(got)}; " \
            f"all of {self.expected} already seen"
        want = self.expected[self.position]
        assert got == want, (f"at position {self.position}: expected "
                             f"{'complete' if want > 0 else 'abort'} {abs(want)}, got "
                             f"{'complete' if got > 0 else 'abort'} {abs(got)}")
        self.position += 1

    def notify_checkpoint_complete(self, checkpoint_id, completed) -> None:
        assert completed.checkpoint_id == checkpoint_id
        self._next(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id, reason) -> None:
        self.reasons[checkpoint_id] = reason
        self._next(-checkpoint_id)

    def assert_all_seen(self) -> None:
        assert self.position == len(self.expected), \
            f"still expecting {self.expected[self.position:]}"


class RecordingListener:
    def __init__(self) -> None:
        self.events: List[Tuple[str, int]] = []

    def notify_checkpoint_complete(self, checkpoint_id, completed) -> None:
        self.events.append(("complete", checkpoint_id))

    def notify_checkpoint_aborted(self, checkpoint_id, reason) -> None:
        self.events.append(("abort", checkpoint_id))


def memory_backend(request) -> MemoryStateBackend:
    from state_backends.memory import clear_memory_backend

    name = "coord-" + uuid.uuid4().hex
    request.addfinalizer(lambda: clear_memory_backend(name))
    return MemoryStateBackend(name)


def ack_with_snapshot(backend, n: int, op: str, kg: int, data: bytes = b"state",
                      **metrics) -> TaskAcknowledgement:
    handle = backend.write_snapshot(n, op, kg, data)
    return TaskAcknowledgement((handle,), {"t": {str(kg): 100 * n + kg}}, metrics)


def new_coordinator(backend, clock: ManualClock, listeners=(), **config) -> CheckpointCoordinator:
    """A fresh coordinator loaded from ``backend``: what each short-lived commit worker builds."""
    return CheckpointCoordinator(backend, CoordinatorConfig(**config), clock, listeners)

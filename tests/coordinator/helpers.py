"""Test doubles for the coordinator (as Flink's ``CheckpointSequenceValidator``)."""

from __future__ import annotations

import uuid

from barrier_coordinator import (CheckpointCoordinator, CoordinatorConfig, ManualClock,
                                 TaskAcknowledgement)
from state_backends.memory import MemoryStateBackend


class CheckpointSequenceValidator:
    """Observer that expects outcomes in order: a positive id expects
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


def memory_backend(request) -> MemoryStateBackend:
    from state_backends.memory import clear_memory_backend

    name = "coord-" + uuid.uuid4().hex
    request.addfinalizer(lambda: clear_memory_backend(name))
    return MemoryStateBackend(name)


def ack_with_snapshot(backend, n: int, op: str, kg: int, data: bytes = b"state",
                      **metrics) -> TaskAcknowledgement:
    handle = backend.write_snapshot(n, op, kg, data)
    return TaskAcknowledgement((handle,), {"t": {str(kg): 100 * n + kg}}, metrics)


class Observed:
    """A coordinator whose :attr:`~CheckpointCoordinator.outcomes` are handed to ``observers``
    (``notify_checkpoint_complete`` / ``notify_checkpoint_aborted``, as Flink's listeners) right
    after each call that produced them, still inside that call from the test's view."""

    def __init__(self, coordinator: CheckpointCoordinator, observers) -> None:
        self._coordinator, self._observers, self._seen = coordinator, list(observers), 0

    def __getattr__(self, name):
        value = getattr(self._coordinator, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            try:
                return value(*args, **kwargs)
            finally:
                self._deliver()
        return call

    def _deliver(self) -> None:
        outcomes = self._coordinator.outcomes
        for outcome in outcomes[self._seen:]:
            for o in self._observers:
                if outcome.completed is not None:
                    o.notify_checkpoint_complete(outcome.checkpoint_id, outcome.completed)
                else:
                    o.notify_checkpoint_aborted(outcome.checkpoint_id, outcome.reason)
        self._seen = len(outcomes)


def new_coordinator(backend, clock: ManualClock, observers=(), **config):
    """A fresh coordinator loaded from ``backend``: what each short-lived commit worker builds
    (wrapped in :class:`Observed` when ``observers`` are given)."""
    coordinator = CheckpointCoordinator(backend, CoordinatorConfig(**config), clock)
    return Observed(coordinator, observers) if observers else coordinator

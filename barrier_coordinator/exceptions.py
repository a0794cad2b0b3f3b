"""Exceptions of the checkpoint coordinator (``barrier_coordinator``).

``CheckpointException`` (a failed checkpoint or too many of them) lives in
:mod:`barrier_coordinator.failure` beside ``CheckpointFailureReason``.
"""

from barrier_core.exceptions import BarrierKafkaError


class CoordinatorError(BarrierKafkaError):
    """Root of the coordinator's errors."""


class IllegalTransitionError(CoordinatorError):
    """Bug: a pending checkpoint was asked to move between states that do not connect."""


class CoordinatorStateError(CoordinatorError):
    """The coordinator's durable pending state (``pending/`` area) is unreadable."""

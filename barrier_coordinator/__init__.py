"""The driver-side checkpoint coordinator: pending and completed checkpoints, failure
handling, durable bookkeeping between PySpark's short-lived commit workers.

Typical use inside ``writer.commit(messages, batchId)``::

    coordinator = CheckpointCoordinator(backend, CoordinatorConfig(...))
    completed = coordinator.on_batch(batchId, barriers, acks, handles)
"""

from barrier_coordinator.clock import Clock, ManualClock, SystemClock
from barrier_coordinator.completed import CompletedCheckpoint
from barrier_coordinator.config import CheckpointOutcome, CoordinatorConfig
from barrier_coordinator.coordinator import CheckpointCoordinator
from barrier_coordinator.exceptions import (CoordinatorError, CoordinatorStateError,
                                            IllegalTransitionError)
from barrier_coordinator.failure import (CheckpointException, CheckpointFailureManager,
                                         CheckpointFailureReason)
from barrier_coordinator.pending import (AcknowledgeResult, PendingCheckpoint,
                                         PendingStatus, TaskAcknowledgement)

__all__ = [
    "Clock", "ManualClock", "SystemClock", "CompletedCheckpoint", "CheckpointCoordinator",
    "CheckpointOutcome", "CoordinatorConfig", "CoordinatorError", "CoordinatorStateError",
    "IllegalTransitionError", "CheckpointException", "CheckpointFailureManager",
    "CheckpointFailureReason", "AcknowledgeResult", "PendingCheckpoint", "PendingStatus",
    "TaskAcknowledgement",
]

"""``PendingCheckpoint``: a triggered checkpoint collecting acknowledgements (driver).

Mirrors Flink's ``PendingCheckpoint``: the set of expected task ids is fixed at trigger (it may
grow while nothing forces completion, see ``expect``); ``acknowledge`` returns an
:class:`AcknowledgeResult` instead of raising for duplicate, unknown or late acks; the abort
methods are named after their cause; ``finalize`` turns a fully acknowledged checkpoint into a
:class:`CompletedCheckpoint`. Every state change goes through ``_transition_to``.

Task ids are opaque strings; the plugin uses ``op:<operator_id>:kg:<k>`` for operator key
groups and ``sink`` / ``sink:<topic>:<partition>`` for sink tasks. The object is JSON
round-trippable so the coordinator can persist it between short-lived processes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from barrier_coordinator.completed import CompletedCheckpoint
from barrier_coordinator.exceptions import IllegalTransitionError
from barrier_coordinator.failure import CheckpointFailureReason
from state_backends.base import SnapshotHandle
from state_backends.metadata import Offsets, normalize_offsets

logger = logging.getLogger(__name__)


class AcknowledgeResult(Enum):
    """Outcome of one acknowledgement (Flink's ``TaskAcknowledgeResult``)."""

    SUCCESS = "SUCCESS"          #: first ack of an expected task
    DUPLICATE = "DUPLICATE"      #: the task already acknowledged (e.g. a replayed batch)
    UNKNOWN = "UNKNOWN"          #: the task (or checkpoint) is not expected
    DISCARDED = "DISCARDED"      #: the checkpoint was already aborted / completed


class PendingStatus(Enum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"


_TRANSITIONS = {
    PendingStatus.PENDING: {PendingStatus.COMPLETED, PendingStatus.ABORTED},
    PendingStatus.COMPLETED: set(),
    PendingStatus.ABORTED: set(),
}


@dataclass(frozen=True)
class TaskAcknowledgement:
    """What one task reports for one checkpoint: its snapshot handles, the source offsets it
    saw barrier n at, metrics (``alignment_ms``, ``sync_ms``, ``async_ms``, ``state_bytes``,
    ...) and, for sink tasks, pre-committed transaction handles (opaque JSON)."""

    snapshots: Tuple[SnapshotHandle, ...] = ()
    offsets: Offsets = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)
    sink_transactions: Tuple[Any, ...] = ()

    def to_json(self) -> dict:
        return {"snapshots": [h.to_json() for h in self.snapshots],
                "offsets": normalize_offsets(self.offsets), "metrics": dict(self.metrics),
                "sink_transactions": list(self.sink_transactions)}

    @classmethod
    def from_json(cls, d: dict) -> "TaskAcknowledgement":
        return cls(tuple(SnapshotHandle.from_json(h) for h in d.get("snapshots", [])),
                   normalize_offsets(d.get("offsets")), dict(d.get("metrics") or {}),
                   tuple(d.get("sink_transactions") or ()))


def _tx_key(tx: Any) -> str:
    return json.dumps(tx, sort_keys=True)


class PendingCheckpoint:
    """A checkpoint between trigger and completion/abort (driver).

    Parameters
    ----------
    checkpoint_id, timestamp_ms : int
        Id and trigger time (ms, as decided by the source; deterministic on replay).
    expected_tasks : iterable of str
        Every task that must acknowledge.
    source_offsets : dict, optional
        ``{topic: {partition: offset}}`` known at trigger; merged with the acks' offsets.
    """

    def __init__(self, checkpoint_id: int, timestamp_ms: int, expected_tasks: Iterable[str],
                 is_savepoint: bool = False, source_offsets: Optional[Offsets] = None) -> None:
        if checkpoint_id < 1:
            raise ValueError(f"checkpoint ids start at 1, got {checkpoint_id}")
        self.checkpoint_id = int(checkpoint_id)
        self.timestamp_ms = int(timestamp_ms)
        self.is_savepoint = bool(is_savepoint)
        self.expected: set = set(expected_tasks)
        if not self.expected:
            raise ValueError(f"checkpoint {checkpoint_id}: no expected tasks")
        self.acks: Dict[str, TaskAcknowledgement] = {}
        self.source_offsets: Offsets = normalize_offsets(source_offsets)
        self.sink_transactions: List[Any] = []
        self.status = PendingStatus.PENDING
        self.failure_reason: Optional[CheckpointFailureReason] = None
        self.failure_detail = ""

    # ------------------------------------------------------------------ questions
    @property
    def is_discarded(self) -> bool:
        return self.status is not PendingStatus.PENDING

    def is_fully_acknowledged(self) -> bool:
        return self.status is PendingStatus.PENDING and self.expected <= set(self.acks)

    def not_yet_acknowledged(self) -> List[str]:
        return sorted(self.expected - set(self.acks))

    def can_be_subsumed(self) -> bool:
        """Savepoints are never subsumed (Flink: ``canBeSubsumed``)."""
        return not self.is_savepoint

    def is_expired(self, now_ms: int, timeout_ms: int, run_started_ms: int = 0) -> bool:
        """Pending for ``timeout_ms`` since its trigger or since the current query run started
        (``run_started_ms``), whichever is later (:mod:`barrier_core.query_run`)."""
        return (self.status is PendingStatus.PENDING
                and now_ms >= max(self.timestamp_ms, run_started_ms) + timeout_ms)

    # ------------------------------------------------------------------ changes
    def _transition_to(self, target: PendingStatus) -> None:
        if target not in _TRANSITIONS[self.status]:
            raise IllegalTransitionError(
                f"bug: checkpoint {self.checkpoint_id} cannot go from {self.status.name} to "
                f"{target.name}")
        self.status = target

    def expect(self, tasks: Iterable[str]) -> None:
        """Add expected tasks (learned while the checkpoint is pending)."""
        if self.status is PendingStatus.PENDING:
            self.expected |= set(tasks)

    def add_sink_transactions(self, transactions: Iterable[Any]) -> int:
        """Record pre-committed sink handles of this checkpoint's epoch (deduplicated)."""
        seen = {_tx_key(t) for t in self.sink_transactions}
        added = 0
        for t in transactions:
            k = _tx_key(t)
            if k not in seen:
                seen.add(k)
                self.sink_transactions.append(t)
                added += 1
        return added

    def acknowledge(self, task_id: str, ack: Optional[TaskAcknowledgement] = None
                    ) -> AcknowledgeResult:
        """Record ``task_id``'s acknowledgement; never raises for expected protocol cases."""
        if self.status is not PendingStatus.PENDING:
            return AcknowledgeResult.DISCARDED
        if task_id in self.acks:
            return AcknowledgeResult.DUPLICATE
        if task_id not in self.expected:
            return AcknowledgeResult.UNKNOWN
        ack = ack or TaskAcknowledgement()
        for h in ack.snapshots:
            if h.checkpoint_id != self.checkpoint_id:
                raise ValueError(f"checkpoint {self.checkpoint_id}: task {task_id} acknowledged "
                                 f"with a snapshot of checkpoint {h.checkpoint_id}")
        self.acks[task_id] = ack
        for topic, parts in ack.offsets.items():
            self.source_offsets.setdefault(topic, {}).update(parts)
        self.add_sink_transactions(ack.sink_transactions)
        logger.debug("checkpoint %d: ack from %s (%d/%d)", self.checkpoint_id, task_id,
                     len(self.acks), len(self.expected))
        return AcknowledgeResult.SUCCESS

    def _abort(self, reason: CheckpointFailureReason, detail: str = "") -> None:
        self._transition_to(PendingStatus.ABORTED)
        self.failure_reason = reason
        self.failure_detail = detail

    def abort_expired(self) -> None:
        self._abort(CheckpointFailureReason.CHECKPOINT_EXPIRED,
                    f"Still waiting for: {', '.join(self.not_yet_acknowledged()[:10])}")

    def abort_subsumed(self, by_checkpoint_id: int) -> None:
        if not self.can_be_subsumed():
            raise IllegalTransitionError(f"bug: savepoint {self.checkpoint_id} cannot be subsumed")
        self._abort(CheckpointFailureReason.CHECKPOINT_SUBSUMED,
                    f"Checkpoint {by_checkpoint_id} completed first.")

    def abort_declined(self, task_id: str, detail: str = "") -> None:
        self._abort(CheckpointFailureReason.CHECKPOINT_DECLINED,
                    f"Declined by {task_id}" + (f": {detail}" if detail else "."))

    def abort(self, reason: CheckpointFailureReason, detail: str = "") -> None:
        """Abort for any other reason (finalize failure, I/O error, ...)."""
        self._abort(reason, detail)

    def cancel(self) -> None:
        self._abort(CheckpointFailureReason.CHECKPOINT_CANCELLED)

    def finalize(self, completed_at_ms: int, completion_batch: Optional[int] = None,
                 persist: Optional[Callable[[CompletedCheckpoint], None]] = None
                 ) -> CompletedCheckpoint:
        """Turn into a :class:`CompletedCheckpoint` (requires every ack).

        ``persist(completed)`` writes the metadata (Flink's ``finalizeCheckpoint`` writes it
        through the checkpoint storage); if it raises, this checkpoint stays PENDING so the
        caller can abort it with ``FINALIZE_CHECKPOINT_FAILURE``.
        """
        if not self.is_fully_acknowledged():
            raise IllegalTransitionError(
                f"bug: checkpoint {self.checkpoint_id} finalized while "
                f"{self.status.name} and missing acks from {self.not_yet_acknowledged()[:10]}")
        handles = sorted((h for a in self.acks.values() for h in a.snapshots),
                         key=lambda h: (h.operator_id, h.key_group))
        completed = CompletedCheckpoint(
            checkpoint_id=self.checkpoint_id, timestamp_ms=self.timestamp_ms,
            completed_at_ms=int(completed_at_ms),
            source_offsets=normalize_offsets(self.source_offsets), operators=tuple(handles),
            sink_transactions=tuple(self.sink_transactions), is_savepoint=self.is_savepoint,
            completion_batch=completion_batch)
        if persist is not None:
            persist(completed)
        self._transition_to(PendingStatus.COMPLETED)
        return completed

    # ------------------------------------------------------------------ persistence
    def to_json(self) -> dict:
        return {"checkpoint_id": self.checkpoint_id, "timestamp_ms": self.timestamp_ms,
                "is_savepoint": self.is_savepoint, "expected": sorted(self.expected),
                "acks": {t: a.to_json() for t, a in sorted(self.acks.items())},
                "source_offsets": normalize_offsets(self.source_offsets),
                "sink_transactions": list(self.sink_transactions),
                "status": self.status.value,
                "failure_reason": self.failure_reason.name if self.failure_reason else None,
                "failure_detail": self.failure_detail}

    @classmethod
    def from_json(cls, d: dict) -> "PendingCheckpoint":
        p = cls(int(d["checkpoint_id"]), int(d["timestamp_ms"]), d["expected"],
                bool(d.get("is_savepoint")), d.get("source_offsets"))
        p.acks = {t: TaskAcknowledgement.from_json(a) for t, a in d.get("acks", {}).items()}
        p.sink_transactions = list(d.get("sink_transactions") or [])
        p.status = PendingStatus(d.get("status", "PENDING"))
        if d.get("failure_reason"):
            p.failure_reason = CheckpointFailureReason[d["failure_reason"]]
        p.failure_detail = d.get("failure_detail", "")
        return p

    def __repr__(self) -> str:
        return (f"PendingCheckpoint({self.checkpoint_id}, {self.status.name}, "
                f"{len(self.acks)}/{len(self.expected)} acks)")

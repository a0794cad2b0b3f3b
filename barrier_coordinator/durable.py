"""Durable coordinator state in the state backend's ``pending/`` area (driver).

PySpark runs ``writer.commit`` in a short-lived Python worker, so the coordinator cannot keep
pending checkpoints in memory between batches. It keeps them here instead::

    pending/_coordinator.json   last completed / committed ids, aborted ids, failure counter,
                                learned operators, early sink transactions
    pending/chk-<n>.json        one PendingCheckpoint (expected tasks, acks, handles)

Each file is one atomic ``put``. Writes are ordered so that a crash at any point leaves a
state that the next load reconciles (see :meth:`CheckpointCoordinator._reconcile`): a pending
file whose ``chk-<n>/_metadata`` exists is a completed checkpoint whose bookkeeping was cut
short.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List

from barrier_coordinator.exceptions import CoordinatorStateError
from barrier_coordinator.pending import PendingCheckpoint
from state_backends.base import PENDING_PREFIX, StateBackend
from state_backends.exceptions import SnapshotNotFoundError

STATE_PATH = f"{PENDING_PREFIX}/_coordinator.json"
STATE_VERSION = 1
_PENDING_RE = re.compile(r"^" + PENDING_PREFIX + r"/chk-(\d+)\.json$")


def pending_path(checkpoint_id: int) -> str:
    return f"{PENDING_PREFIX}/chk-{checkpoint_id}.json"


@dataclass
class CoordinatorState:
    """Everything the coordinator remembers between processes, besides pending checkpoints."""

    last_completed_id: int = 0
    last_committed_id: int = 0
    max_triggered_id: int = 0
    aborted: Dict[int, str] = field(default_factory=dict)        # id -> reason name
    failures: Dict[str, Any] = field(default_factory=dict)       # CheckpointFailureManager
    known_operators: Dict[str, int] = field(default_factory=dict)  # op -> num key groups
    early_transactions: Dict[int, List[Any]] = field(default_factory=dict)  # epoch -> handles
    history_pruned_below: int = 1  # chk-<m> folders of incomplete ids below this are gone

    def to_json(self) -> dict:
        return {"version": STATE_VERSION, "last_completed_id": self.last_completed_id,
                "last_committed_id": self.last_committed_id,
                "max_triggered_id": self.max_triggered_id,
                "aborted": {str(k): v for k, v in sorted(self.aborted.items())},
                "failures": self.failures, "known_operators": dict(sorted(
                    self.known_operators.items())),
                "early_transactions": {str(k): v for k, v in
                                       sorted(self.early_transactions.items())},
                "history_pruned_below": self.history_pruned_below}

    @classmethod
    def from_json(cls, d: dict) -> "CoordinatorState":
        return cls(int(d.get("last_completed_id", 0)), int(d.get("last_committed_id", 0)),
                   int(d.get("max_triggered_id", 0)),
                   {int(k): v for k, v in (d.get("aborted") or {}).items()},
                   dict(d.get("failures") or {}),
                   {k: int(v) for k, v in (d.get("known_operators") or {}).items()},
                   {int(k): list(v) for k, v in (d.get("early_transactions") or {}).items()},
                   int(d.get("history_pruned_below", 1)))


class DurablePendingStore:
    """Reads and writes the ``pending/`` area of one backend."""

    def __init__(self, backend: StateBackend) -> None:
        self.backend = backend

    def _load_json(self, path: str):
        try:
            data = self.backend.get(path)
        except SnapshotNotFoundError:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise CoordinatorStateError(
                f"coordinator state at {self.backend.location(path)} is corrupt ({exc}); "
                "delete the pending/ folder to drop in-flight checkpoints (completed ones are "
                "not affected)") from None

    def load_state(self) -> CoordinatorState:
        doc = self._load_json(STATE_PATH)
        if doc is None:
            return CoordinatorState()
        if doc.get("version") != STATE_VERSION:
            raise CoordinatorStateError(
                f"coordinator state at {self.backend.location(STATE_PATH)} has version "
                f"{doc.get('version')!r}; this code reads {STATE_VERSION}")
        return CoordinatorState.from_json(doc)

    def save_state(self, state: CoordinatorState) -> None:
        self.backend.put(STATE_PATH, json.dumps(state.to_json(), sort_keys=True).encode())

    def load_pending(self) -> Dict[int, PendingCheckpoint]:
        out = {}
        for p in self.backend.list(PENDING_PREFIX):
            m = _PENDING_RE.match(p)
            if not m:
                continue
            doc = self._load_json(p)
            if doc is None:
                continue
            try:
                pending = PendingCheckpoint.from_json(doc)
            except (KeyError, ValueError, TypeError) as exc:
                raise CoordinatorStateError(
                    f"pending checkpoint {m.group(1)} at {self.backend.location(p)} is "
                    f"unreadable: {exc}") from None
            out[pending.checkpoint_id] = pending
        return out

    def save_pending(self, pending: PendingCheckpoint) -> None:
        self.backend.put(pending_path(pending.checkpoint_id),
                         json.dumps(pending.to_json(), sort_keys=True).encode())

    def delete_pending(self, checkpoint_id: int) -> None:
        self.backend.delete([pending_path(checkpoint_id)])


def checkpoint_progress(backend: StateBackend) -> "tuple[int, frozenset]":
    """``(newest completed id, aborted ids after it)`` as the coordinator recorded them: what
    the source's trigger needs to count pending checkpoints (driver planner worker). One small
    read; ``(0, {})`` before the first checkpoint."""
    state = DurablePendingStore(backend).load_state()
    done = state.last_completed_id
    return done, frozenset(n for n in state.aborted if n > done)

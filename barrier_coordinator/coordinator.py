"""``CheckpointCoordinator``: triggers, acknowledgements, completion, expiry, subsumption,
notification (driver).

Runs on the driver, in practice inside the two-phase-commit sink's ``writer.commit`` (a
short-lived PySpark worker). It therefore keeps nothing important in memory: a coordinator is
built from the state backend at every call (``CheckpointCoordinator(backend, config)`` loads the
``pending/`` area, see :mod:`barrier_coordinator.durable`) and writes back what changed
before returning. Every operation is idempotent, because Spark replays a batch (and calls
``commit`` again) after a crash.

Completion of checkpoint n (numbered as in ``_complete``):

1. ``PendingCheckpoint.finalize`` -> :class:`CompletedCheckpoint` (all acks in).
2. ``chk-<n>/_metadata`` is written: one atomic put, after every snapshot blob (the executors
   wrote those before acknowledging). From here on n is complete; retention runs.
3. ``chk-<n>/_stats.json`` is written.
4. Older pending checkpoints are subsumed (savepoints excepted); the failure count resets.
5. Bookkeeping is persisted (``pending/_coordinator.json``, pending files removed), debris of
   aborted checkpoints since the previous completion is discarded, and the folders of ids that
   left the stats history (``web.checkpoints.history``) are deleted.
6. The outcome is appended to :attr:`CheckpointCoordinator.outcomes` (completion of n, then
   the checkpoints it subsumed), a log for tests and metrics. There is one notification path,
   and it is not a callback: ``on_batch`` returns the checkpoint whose transactions the sink
   must commit (also one completed before a crash whose commit did not finish, which a
   completion callback could not say).

A crash between 2 and 5 is reconciled on the next load: the pending file of a checkpoint
whose metadata exists is dropped and the bookkeeping (steps 3-5) redone; the sink's commit is
idempotent since a replayed batch returns the same checkpoint again.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Dict, Iterable, List, Optional

from barrier_core.faults import FaultPoint, fault_point
from barrier_core.query_run import read_run_start
from barrier_coordinator.batch import fold_batch
from barrier_coordinator.checkpoint_stats import checkpoint_stats, ensure_completed_stats
from barrier_coordinator.clock import Clock, SystemClock
from barrier_coordinator.completed import CompletedCheckpoint
from barrier_coordinator.config import CheckpointOutcome, CoordinatorConfig
from barrier_coordinator.durable import CoordinatorState, DurablePendingStore
from barrier_coordinator.failure import (CheckpointException, CheckpointFailureManager,
                                         CheckpointFailureReason)
from barrier_coordinator.pending import (AcknowledgeResult, PendingCheckpoint,
                                         TaskAcknowledgement)
from state_backends.base import StateBackend, metadata_path
from state_backends.checkpoint_store import CompletedCheckpointStore
from state_backends.exceptions import StateBackendError
from state_backends.metadata import Offsets
from state_backends.stats import COMPLETED, read_stats, write_stats

logger = logging.getLogger(__name__)


class CheckpointCoordinator:
    """Driver-side checkpoint coordinator over one state backend.

    Parameters
    ----------
    backend : StateBackend
        Where snapshots, metadata, stats and the ``pending/`` area live.
    config : CoordinatorConfig, optional
    clock : Clock, optional
        ``now_ms()`` source; inject a :class:`ManualClock` in tests.
    """

    def __init__(self, backend: StateBackend, config: Optional[CoordinatorConfig] = None,
                 clock: Optional[Clock] = None) -> None:
        self.backend = backend
        self.config = config or CoordinatorConfig()
        self.clock = clock or SystemClock()
        #: What this instance decided, in order: a log to read (tests, metrics), not callbacks.
        self.outcomes: List[CheckpointOutcome] = []
        # One listing per commit worker: this coordinator lives for one writer.commit.
        self.store = CompletedCheckpointStore(backend, self.config.num_retained,
                                              cache_listing=True)
        self._durable = DurablePendingStore(backend)
        self.failure_manager = CheckpointFailureManager(self.config.tolerable_failed_checkpoints)
        self._dirty: set = set()
        self._deleted: set = set()
        self._state_dirty = False
        self._depth = 0
        self._current_batch: Optional[int] = None
        self.state: CoordinatorState = self._durable.load_state()
        self.store.history_floor = self.state.history_pruned_below
        self.failure_manager.load_json(self.state.failures)
        self._pending: Dict[int, PendingCheckpoint] = self._durable.load_pending()
        #: Start of the current query run: pending checkpoints' timeouts run from here at the
        #: earliest (time the query was down does not count; :mod:`barrier_core.query_run`).
        self.run_started_ms = read_run_start(backend)
        self._reconcile()

    # ------------------------------------------------------------------ persistence
    @contextlib.contextmanager
    def deferred(self):
        """Group several operations into one write-back (used by ``on_batch``).
        Runs in the driver commit worker."""
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            if self._depth == 0:
                self.flush()

    @contextlib.contextmanager
    def folding_batch(self, batch_id: int):
        """Operations of Spark batch ``batch_id``: completions record it as their completion
        batch; one write-back at the end (driver commit worker)."""
        self._current_batch = batch_id
        try:
            with self.deferred():
                yield self
        finally:
            self._current_batch = None

    def learn_operator(self, operator_id: str, num_key_groups: int) -> None:
        """Remember an operator seen in an ack: its key groups are expected from now on.
        Runs in the driver commit worker."""
        if num_key_groups and self.state.known_operators.get(operator_id) != num_key_groups:
            self.state.known_operators[operator_id] = num_key_groups
            self._state_dirty = True

    @property
    def expected_operators(self) -> Dict[str, int]:
        """Declared operators plus the ones learned from acks: ``{operator_id: key groups}``.
        Runs in the driver commit worker."""
        return {**self.config.operators, **self.state.known_operators}

    def flush(self) -> None:
        """Persist changed pending checkpoints and the coordinator state (driver commit worker)."""
        for n in sorted(self._dirty):
            p = self._pending.get(n)
            if p is not None:
                self._durable.save_pending(p)
        for n in sorted(self._deleted):
            self._durable.delete_pending(n)
        if self._state_dirty or self._dirty or self._deleted:
            self.state.failures = self.failure_manager.to_json()
            self._durable.save_state(self.state)
        self._dirty.clear()
        self._deleted.clear()
        self._state_dirty = False

    def _reconcile(self) -> None:
        """Finish bookkeeping a crash cut short (see module docstring)."""
        completed_ids = self.store.completed_ids()
        newest = completed_ids[-1] if completed_ids else 0
        with self.deferred():
            if newest > self.state.last_completed_id:
                self.state.last_completed_id = newest
                self.failure_manager.handle_checkpoint_success(newest)
                self._state_dirty = True
            done = set(completed_ids)
            for n in sorted(self._pending):
                if n in done:
                    logger.info("checkpoint %d: completed before a crash; finishing bookkeeping",
                                n)
                    ensure_completed_stats(self.backend, self.store, self._pending[n],
                                           self.clock.now_ms())
                    self._forget(n)
                elif self._pending[n].is_discarded:
                    self._forget(n)

    def _forget(self, checkpoint_id: int) -> None:
        self._pending.pop(checkpoint_id, None)
        self._dirty.discard(checkpoint_id)
        self._deleted.add(checkpoint_id)

    # ------------------------------------------------------------------ queries
    def pending_checkpoints(self) -> Dict[int, PendingCheckpoint]:
        """The pending checkpoints by id (driver commit worker)."""
        return dict(self._pending)

    def get_pending(self, checkpoint_id: int) -> Optional[PendingCheckpoint]:
        """Pending checkpoint ``checkpoint_id``, or None (driver commit worker)."""
        return self._pending.get(checkpoint_id)

    @property
    def last_completed_id(self) -> int:
        """Id of the newest completed checkpoint, 0 if none (driver commit worker)."""
        return self.state.last_completed_id

    @property
    def last_committed_id(self) -> int:
        """Id of the newest checkpoint whose output is committed (driver commit worker)."""
        return self.state.last_committed_id

    def latest_completed(self) -> Optional[CompletedCheckpoint]:
        """The newest completed checkpoint on storage (metadata parsed), or ``None``.
        Runs in the driver commit worker."""
        meta = self.store.latest(verify=False)
        return None if meta is None else CompletedCheckpoint.from_metadata(meta)

    def mark_committed(self, checkpoint_id: int) -> None:
        """Record that the sink finished committing ``checkpoint_id`` (idempotent).
        Runs in the driver commit worker."""
        if checkpoint_id > self.state.last_committed_id:
            self.state.last_committed_id = checkpoint_id
            self._state_dirty = True
            if self._depth == 0:
                self.flush()

    # ------------------------------------------------------------------ trigger
    def trigger(self, checkpoint_id: int, timestamp_ms: int, expected_tasks: Iterable[str],
                is_savepoint: bool = False, source_offsets: Optional[Offsets] = None
                ) -> Optional[PendingCheckpoint]:
        """Start tracking checkpoint ``checkpoint_id`` (the source decided it).

        Idempotent: triggering a pending id again adds any new expected tasks and returns the
        same pending checkpoint. Returns ``None`` (and logs) for ids that already completed,
        were aborted, or are not newer than the last completed checkpoint.
        Runs in the driver commit worker.
        """
        with self.deferred():
            self.abort_expired_checkpoints()
            existing = self._pending.get(checkpoint_id)
            if existing is not None:
                before = len(existing.expected)
                existing.expect(expected_tasks)
                if len(existing.expected) != before:
                    self._dirty.add(checkpoint_id)
                return existing
            if checkpoint_id <= self.state.last_completed_id or checkpoint_id in self.state.aborted:
                logger.debug("checkpoint %d: trigger ignored (already %s)", checkpoint_id,
                             "aborted" if checkpoint_id in self.state.aborted else "subsumed")
                return None
            pending = PendingCheckpoint(checkpoint_id, timestamp_ms, expected_tasks,
                                        is_savepoint, source_offsets)
            early = self.state.early_transactions.pop(checkpoint_id, None)
            if early:
                pending.add_sink_transactions(early)
            self._pending[checkpoint_id] = pending
            self._dirty.add(checkpoint_id)
            self.state.max_triggered_id = max(self.state.max_triggered_id, checkpoint_id)
            self._state_dirty = True
            logger.debug("checkpoint %d: triggered @ %d, expecting %d tasks", checkpoint_id,
                         timestamp_ms, len(pending.expected))
            if pending.is_expired(self.clock.now_ms(), self.config.checkpoint_timeout_ms,
                                  self.run_started_ms):
                self._abort(pending, CheckpointFailureReason.CHECKPOINT_EXPIRED,
                            "Triggered after its timeout had already passed.")
                pending = None
        self._check_failures()
        return pending

    def add_sink_transactions(self, checkpoint_id: int, transactions: Iterable) -> None:
        """Attach pre-committed sink handles of epoch ``checkpoint_id`` (stashed durably if the
        checkpoint is not triggered yet; dropped if it already ended).
        Runs in the driver commit worker."""
        transactions = list(transactions)
        if not transactions:
            return
        pending = self._pending.get(checkpoint_id)
        if pending is not None:
            if pending.add_sink_transactions(transactions):
                self._dirty.add(checkpoint_id)
        elif (checkpoint_id > self.state.last_completed_id
              and checkpoint_id not in self.state.aborted):
            stash = self.state.early_transactions.setdefault(checkpoint_id, [])
            probe = PendingCheckpoint(checkpoint_id, 0, ["_"])
            probe.sink_transactions = stash
            if probe.add_sink_transactions(transactions):
                self._state_dirty = True
        if self._depth == 0:
            self.flush()

    # ------------------------------------------------------------------ acknowledgements
    def receive_acknowledge(self, checkpoint_id: int, task_id: str,
                            ack: Optional[TaskAcknowledgement] = None) -> AcknowledgeResult:
        """Record one task's acknowledgement; completes the checkpoint when it was the last.

        Returns ``DISCARDED`` for a checkpoint that was aborted, ``DUPLICATE`` for a task
        that already acknowledged (also after completion: replay), ``UNKNOWN`` for a checkpoint
        never triggered or a task not expected.
        Runs in the driver commit worker.
        """
        with self.deferred():
            self.abort_expired_checkpoints()
            pending = self._pending.get(checkpoint_id)
            if pending is None:
                if checkpoint_id in self.state.aborted:
                    logger.debug("checkpoint %d: late ack from %s for an aborted checkpoint",
                                 checkpoint_id, task_id)
                    self._discard_late_state(checkpoint_id, ack)
                    return AcknowledgeResult.DISCARDED
                if checkpoint_id <= self.state.last_completed_id:
                    logger.debug("checkpoint %d: late ack from %s after completion/subsumption",
                                 checkpoint_id, task_id)
                    if self._was_completed(checkpoint_id):
                        return AcknowledgeResult.DUPLICATE  # replay: its state is in use
                    self._discard_late_state(checkpoint_id, ack)
                    return AcknowledgeResult.DISCARDED
                logger.warning("checkpoint %d: ack from %s for a checkpoint never triggered",
                               checkpoint_id, task_id)
                return AcknowledgeResult.UNKNOWN
            result = pending.acknowledge(task_id, ack)
            if result is AcknowledgeResult.SUCCESS:
                self._dirty.add(checkpoint_id)
                if pending.is_fully_acknowledged():
                    self._complete(pending)
            elif result is AcknowledgeResult.UNKNOWN:
                logger.warning("checkpoint %d: ack from unexpected task %s", checkpoint_id,
                               task_id)
                self._discard_late_state(checkpoint_id, ack)
            return result

    def _discard_late_state(self, checkpoint_id: int, ack: Optional[TaskAcknowledgement]) -> None:
        """Delete snapshot blobs nobody will reference (Flink: ``discardSubtaskState``)."""
        for h in (ack.snapshots if ack else ()):
            if h.path:
                try:
                    self.backend.delete_prefix(h.path)
                except StateBackendError as exc:
                    logger.warning("checkpoint %d: could not discard late state %s: %s",
                                   checkpoint_id, h.path, exc)

    def _was_completed(self, checkpoint_id: int) -> bool:
        if self.backend.exists(metadata_path(checkpoint_id)):
            return True
        stats = read_stats(self.backend, checkpoint_id)  # completed, then retained away
        return stats is not None and stats.status == COMPLETED

    def decline(self, checkpoint_id: int, task_id: str, detail: str = "") -> bool:
        """A task could not snapshot: abort the checkpoint (counted failure).
        Runs in the driver commit worker."""
        with self.deferred():
            pending = self._pending.get(checkpoint_id)
            if pending is None or pending.is_discarded:
                return False
            self._abort(pending, CheckpointFailureReason.CHECKPOINT_DECLINED,
                        f"Declined by {task_id}" + (f": {detail}" if detail else "."))
        self._check_failures()
        return True

    def cancel(self, checkpoint_id: int) -> bool:
        """Cancel a pending checkpoint (not counted as a failure) (driver commit worker)."""
        with self.deferred():
            pending = self._pending.get(checkpoint_id)
            if pending is None:
                return False
            self._abort(pending, CheckpointFailureReason.CHECKPOINT_CANCELLED, "")
        return True

    def abort_expired_checkpoints(self) -> List[int]:
        """Abort every pending checkpoint older than the checkpoint timeout (by the injected
        clock); raises ``CheckpointException`` afterwards if too many checkpoints failed.
        Runs in the driver commit worker."""
        now = self.clock.now_ms()
        expired = [p for _, p in sorted(self._pending.items())
                   if p.is_expired(now, self.config.checkpoint_timeout_ms, self.run_started_ms)]
        if not expired:
            return []
        with self.deferred():
            for p in expired:
                waited = now - max(p.timestamp_ms, self.run_started_ms)
                self._abort(p, CheckpointFailureReason.CHECKPOINT_EXPIRED,
                            f"Waited {waited} ms (timeout {self.config.checkpoint_timeout_ms} ms)"
                            f" for: {', '.join(p.not_yet_acknowledged()[:10])}")
        self._check_failures()
        return [p.checkpoint_id for p in expired]

    def _check_failures(self) -> None:
        """Raise ``CheckpointException(TOO_MANY_CHECKPOINT_FAILURES)`` past the threshold. The
        count is reset (durably) before raising, so a restarted query starts afresh; a replay
        does not re-count the same checkpoints (they are remembered as aborted)."""
        try:
            self.failure_manager.check()
        except CheckpointException:
            self.failure_manager.counted.clear()
            self._state_dirty = True
            self.flush()
            raise

    # ------------------------------------------------------------------ completion / abort
    def complete_fully_acknowledged(self) -> List[int]:
        """Complete every pending checkpoint that already has all its acks (driver commit
        worker). That happens only when an earlier completion attempt raised after the last
        ack was recorded (e.g. the ``_metadata`` put failed): replayed acks are duplicates and
        would never complete it, and it would hold the concurrency slot until it expired."""
        done = []
        with self.deferred():
            for n, pending in sorted(self._pending.items()):
                if not pending.is_discarded and pending.is_fully_acknowledged():
                    logger.info("checkpoint %d: all acks were in, completing it now", n)
                    self._complete(pending)
                    done.append(n)
        return done

    def _complete(self, pending: PendingCheckpoint) -> None:
        n = pending.checkpoint_id
        # Steps 1-2. finalize; the metadata is written last, then retention runs.
        try:
            completed = pending.finalize(self.clock.now_ms(), self._current_batch,
                                         persist=self._persist_metadata)
        except StateBackendError as exc:
            logger.error("checkpoint %d: could not write metadata: %s", n, exc)
            self._abort(pending, CheckpointFailureReason.FINALIZE_CHECKPOINT_FAILURE, str(exc))
            self.flush()
            self._check_failures()
            raise CheckpointException(CheckpointFailureReason.FINALIZE_CHECKPOINT_FAILURE,
                                      str(exc), n) from exc
        # Step 3. stats.
        self._write_stats(pending, completed)
        # Step 4. subsumption, failure count.
        previous = self.state.last_completed_id
        self.state.last_completed_id = max(self.state.last_completed_id, n)
        self.failure_manager.handle_checkpoint_success(n)
        self._forget(n)
        subsumed = []
        for m, older in sorted(self._pending.items()):
            if m < n and older.can_be_subsumed():
                self._abort(older, CheckpointFailureReason.CHECKPOINT_SUBSUMED,
                            f"Checkpoint {n} completed first.", notify=False)
                subsumed.append(m)
        self.state.aborted = {m: r for m, r in self.state.aborted.items() if m > n}
        self.state.early_transactions = {m: t for m, t in self.state.early_transactions.items()
                                         if m > n}
        self._state_dirty = True
        # Step 5. persist, discard debris between the previous completion and n, forget ids
        # that left the stats history.
        self.flush()
        try:
            self.store.discard_debris(in_progress=self._pending, below=n, above=previous)
            self._prune_history(n)
        except StateBackendError as exc:  # cleanup must not fail the checkpoint
            logger.warning("checkpoint %d: debris cleanup failed: %s", n, exc)
        logger.info("checkpoint %d: completed (%d bytes of state in %d ms)", n,
                    completed.state_size_bytes, completed.duration_ms)
        # Step 6. record the outcome: completion first, then the checkpoints it subsumed.
        self.outcomes.append(CheckpointOutcome(n, completed=completed))
        subsumed_reason = CheckpointFailureReason.CHECKPOINT_SUBSUMED
        self.outcomes.extend(CheckpointOutcome(m, reason=subsumed_reason) for m in subsumed)

    def _prune_history(self, newest: int) -> None:
        """Delete the folders of incomplete checkpoint ids that left the stats history
        (``web.checkpoints.history`` ids below ``newest``), each id once; in-flight ids stay."""
        upto = newest - self.config.stats_history
        start = self.state.history_pruned_below
        if upto < start:
            return
        stop = min([upto] + [m - 1 for m in self._pending if m <= upto])
        if stop < start:
            return
        deleted = self.store.prune_history(start, stop)
        if stop - start > 1:
            logger.info("checkpoints %d..%d left the stats history: %d folders deleted", start,
                        stop, deleted)
        self.state.history_pruned_below = stop + 1
        self.store.history_floor = stop + 1
        self._state_dirty = True
        if self._depth == 0:
            self.flush()

    def _persist_metadata(self, completed: CompletedCheckpoint) -> None:
        fault_point(FaultPoint.COMMIT_BEFORE_METADATA)  # crash-injection point of the exactly-once tests
        self.store.add(completed.to_metadata())

    def _abort(self, pending: PendingCheckpoint, reason: CheckpointFailureReason,
               detail: str, notify: bool = True) -> None:
        n = pending.checkpoint_id
        if not pending.is_discarded:
            pending.abort(reason, detail)
        self._forget(n)
        if reason is not CheckpointFailureReason.CHECKPOINT_SUBSUMED:
            self.state.aborted[n] = reason.name
        self.state.early_transactions.pop(n, None)
        self._state_dirty = True
        self.failure_manager.record_failure(n, reason)
        log = logger.info if reason is CheckpointFailureReason.CHECKPOINT_CANCELLED else \
            logger.warning
        log("checkpoint %d: aborted: %s %s", n, reason.message, detail)
        try:
            self._write_stats(pending, None)
            # Newer than the last completed checkpoint, its snapshots stay until the next
            # completion's debris pass: a key group's next incremental snapshot may chain on
            # the one it wrote for n.
            self.store.discard(n, keep_stats=True,
                               keep_snapshots=n > self.state.last_completed_id)
            self._prune_history(n)
        except StateBackendError as exc:
            logger.warning("checkpoint %d: could not discard its state: %s", n, exc)
        if notify:
            self.outcomes.append(CheckpointOutcome(n, reason=reason))

    # ------------------------------------------------------------------ stats
    def _write_stats(self, pending: PendingCheckpoint,
                     completed: Optional[CompletedCheckpoint]) -> None:
        write_stats(self.backend, checkpoint_stats(pending, completed, self.clock.now_ms()))

    # ------------------------------------------------------------------ Spark batches
    def on_batch(self, batch_id: int, barriers: Iterable[dict], acks: Iterable,
                 handles: Iterable[dict] = ()) -> Optional[CompletedCheckpoint]:
        """Fold one committed Spark batch into the checkpoints (see
        :func:`barrier_coordinator.batch.fold_batch`). Runs in the driver commit worker."""
        return fold_batch(self, batch_id, barriers, acks, handles)

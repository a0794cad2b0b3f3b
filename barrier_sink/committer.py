"""``SinkCommitter``: the driver half of a two-phase-commit sink.

Runs on the driver inside ``writer.commit``/``writer.abort``, which PySpark calls in a short-lived
Python worker: everything it knows comes from the commit messages and from durable storage (the
state backend), never from memory of earlier batches. Every step is idempotent, because Spark
calls ``commit(N)`` again when it replays batch N after a crash.

Durable layout (in the checkpoint storage)::

    sink/batch-<N>.json      the batch's pre-committed handles, barriers and acks, and which
                             handles are committed; written before any checkpoint uses it
    _completed_offsets.json  offsets of the newest committed checkpoint, for the source's
                             consumer-group commit

Protocol of ``on_batch_committed(N)`` (numbered as in the code):

1. Dedupe a replay: a handle is identified by its slot (batch, task, epoch), whatever its
   transactional.id or staged name (those also carry the task attempt and the prefix). A handle
   whose slot an earlier attempt of batch N already committed duplicates committed output:
   abort it. Uncommitted handles of the earlier attempt are aborted (they were fenced, or the
   replay made new ones for their slots).
2. Record batch N durably (one atomic put); then ``after_record`` (the Kafka sink seals the
   batch against its late attempts: :mod:`barrier_sink.attempt_claims`).
3. Feed barriers and acks to the checkpoint coordinator, which completes checkpoints (metadata
   written last) and returns the newest completed checkpoint.
4. notifyCheckpointComplete(n): commit every recorded, uncommitted handle of epoch <= n (handles
   without an epoch belong to the first checkpoint completed at or after their batch), marking
   each batch record as it goes; then publish n's offsets for the consumer-group commit.
5. Sweep: abort open output of this sink that no batch record names (losing speculative
   attempts, attempts of a crashed run; ``abort_unrecorded``).

``on_batch_aborted(N)`` (Spark gave up on batch N, also after ``commit(N)`` raised): handles of a
checkpoint that completed (its ``_metadata`` is written) are never aborted; they are committed
forward now, or by ``recover`` at the next start. Every other handle of N is aborted and dropped
from N's record, so no later notification tries to commit it. Then step 5's sweep runs: the
tasks that failed or were killed returned no handle, and their open output would otherwise
wait for the next start (or the transaction timeout). When a task returned nothing, the sweep
repeats for ``cancelled_task_grace_s``: a task that Spark is still cancelling can open output
after the first sweep.

Scenarios after a crash (as in Flink's notifyCheckpointComplete comment):
(1) crash before 2: Spark replays N; the replay's tasks fence the attempt's transactions (same
    transactional.ids) and step 1 aborts leftovers.  (2) crash between 3 and 4: the checkpoint is
    complete but its transactions are open; the replayed commit(N) or the recovery at the next
    query start commits them (idempotent).  (3) crash after 4 but before Spark wrote commits/N:
    the replay's output duplicates committed output; step 1 aborts it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from abc import ABC, abstractmethod
from typing import Dict, Iterable, List, Optional, Tuple

from barrier_sink.messages import SinkCommitMessage, slowest_task
from barrier_core.faults import FaultPoint, fault_point
from barrier_core.completed_offsets import CompletedOffsets, write_completed_offsets
from barrier_core.query_run import read_run_start

logger = logging.getLogger(__name__)

BATCH_PREFIX = "sink/batch-"

#: Batch records seen with every handle committed, other than the newest recorded batch (per
#: process): storage location -> (start of the query run they were seen in, {batch id: the
#: newest checkpoint that committed any of their handles, 0 for none}). Such a record never
#: changes again in that run (Spark re-records only the newest batch), so it is not read again
#: until a commit of that checkpoint; pruning forgets it. A new run (a restart, or a query on a
#: wiped storage whose batch ids start again at 0) starts from nothing.
_SETTLED: Dict[str, Tuple[int, Dict[int, int]]] = {}


def batch_path(batch_id: int) -> str:
    return f"{BATCH_PREFIX}{batch_id:012d}.json"


class SinkCommitter(ABC):
    """Driver-side commit logic shared by the Kafka and file sinks."""

    #: Transactions of one checkpoint committed at once (one EndTxn / publish each).
    COMMIT_PARALLELISM = 8

    def __init__(self, backend, coordinator_factory) -> None:
        self.backend = backend
        self._coordinator_factory = coordinator_factory

    # ------------------------------------------------------------------ subclass hooks
    @abstractmethod
    def transaction_name(self, handle: dict) -> str:
        """The handle's own transaction (transactional.id / staged path), for logs and to tell
        two attempts of one slot apart. Runs in the driver commit worker."""

    #: After aborting a batch one of whose tasks sent no message, keep sweeping this long
    #: (seconds) for output that a task being cancelled opens late; 0: sweep once.
    cancelled_task_grace_s = 0.0
    SWEEP_INTERVAL_S = 0.25

    def abort_unrecorded(self, batch_id: Optional[int]) -> int:
        """Abort open output of this sink that belongs to batches <= ``batch_id`` (None: any)
        and that no batch record names as uncommitted (losing speculative attempts, attempts
        of a crashed run); returns how many it aborted. Default: nothing to abort (0). Runs in
        the driver commit worker."""
        return 0

    def _pending_names(self, batch_id: int, cache: dict) -> set:
        """Transaction names of batch ``batch_id``'s recorded, uncommitted handles."""
        if batch_id not in cache:
            cache[batch_id] = self._open_names(self.load_batch(batch_id) or {})
        return cache[batch_id]

    def _open_names(self, record: dict) -> set:
        done = record.get("committed", {})
        return {self.transaction_name(h) for h in record.get("handles", [])
                if self.handle_id(h) not in done}

    def _settled(self, run_started_ms: Optional[int] = None) -> Dict[int, int]:
        """This process's settled records of this storage in the current query run (the run
        start is read when the caller has no coordinator that read it)."""
        if run_started_ms is None:
            run_started_ms = read_run_start(self.backend)
        where = self.backend.location(BATCH_PREFIX)
        run, settled = _SETTLED.get(where, (None, {}))
        if run != run_started_ms:
            settled = {}
            _SETTLED[where] = (run_started_ms, settled)
        return settled

    def _settle(self, record: dict, newest_batch: int, settled: Dict[int, int]) -> None:
        """Remember ``record`` as settled if every handle is committed and it is not the newest
        recorded batch (the only one a replay can record again)."""
        if record["batch_id"] == newest_batch or self._open_names(record):
            return
        committed = [n for n in record.get("committed", {}).values() if isinstance(n, int)]
        settled[record["batch_id"]] = max(committed, default=0)

    def recorded_open_names(self, batches: Optional[List[int]] = None) -> set:
        """Transaction names of every recorded handle not yet committed or aborted, in all
        recorded batches (driver: before a batch's tasks, and in the commit worker).

        Only the newest recorded batch can be recorded again (Spark replays the last batch
        only), so an older record whose handles are all committed never changes: such records
        are remembered per process and not read again (one listing and a read of the few
        unfinished records per call, instead of every kept record). ``batches``: the listing,
        when the caller already has it."""
        out: set = set()
        settled = self._settled()
        batches = self.recorded_batches() if batches is None else batches
        for b in batches:
            if b in settled:
                continue
            record = self.load_batch(b)
            if record is not None:
                out |= self._open_names(record)
                self._settle(record, batches[-1], settled)
        return out

    @staticmethod
    def handle_id(handle: dict) -> str:
        """Identity of a handle's slot, the same in every attempt and replay of its batch:
        ``b<batch>-p<task>-e<epoch>``. Runs in the driver commit worker."""
        epoch = handle.get("checkpoint_id")
        return f"b{handle['batch_id']}-p{handle['partition_id']}-e{'n' if epoch is None else epoch}"

    @abstractmethod
    def commit_handle(self, handle: dict) -> None:
        """Make the handle's output visible; idempotent (driver commit worker)."""

    @abstractmethod
    def abort_handle(self, handle: dict) -> None:
        """Discard the handle's output; idempotent, also for already-fenced handles.
        Runs in the driver commit worker."""

    # ------------------------------------------------------------------ durable records
    def load_batch(self, batch_id: int) -> Optional[dict]:
        """Batch N's durable record, or None (driver commit worker)."""
        data = self.backend.get_if_exists(batch_path(batch_id))
        return None if data is None else json.loads(data)

    def _store_batch(self, record: dict) -> None:
        self.backend.put(batch_path(record["batch_id"]),
                         json.dumps(record, sort_keys=True).encode())

    def recorded_batches(self) -> List[int]:
        """Ids of the batches with a durable record, ascending (driver commit worker)."""
        out = []
        for p in self.backend.list("sink/"):
            name = p.rsplit("/", 1)[-1]
            if name.startswith("batch-") and name.endswith(".json"):
                out.append(int(name[6:-5]))
        return sorted(out)

    # ------------------------------------------------------------------ protocol
    def on_batch_committed(self, batch_id: int, messages: Iterable[SinkCommitMessage]) -> None:
        """Spark committed batch N (``writer.commit``): the protocol in the module docstring
        (driver commit worker)."""
        messages = list(messages)
        self._batch_started = time.perf_counter()
        fault_point(FaultPoint.COMMIT_BEFORE_RECORD)
        handles = [h for m in messages for h in m.handles]
        previous = self.load_batch(batch_id)
        # Step 1. Dedupe a replay of batch N.
        if previous is not None:
            done = dict(previous.get("committed", {}))
            fresh = []
            for h in handles:
                if self.handle_id(h) in done:
                    logger.info("batch %d: %s already committed by an earlier attempt; "
                                "aborting the replay's duplicate %s", batch_id,
                                self.handle_id(h), self.transaction_name(h))
                    self.abort_handle(h)
                else:
                    fresh.append(h)
            new_names = {self.transaction_name(h) for h in handles}
            for h in previous["handles"]:
                if self.handle_id(h) not in done and self.transaction_name(h) not in new_names:
                    self.abort_handle(h)
            handles = fresh + [h for h in previous["handles"] if self.handle_id(h) in done]
        # Step 2. Record batch N durably.
        record = {"batch_id": batch_id, "handles": handles,
                  "barriers": [b for m in messages for b in m.barriers],
                  "acks": [a for m in messages for a in m.acks],
                  "committed": dict((previous or {}).get("committed", {})),
                  "records": sum(m.records for m in messages),
                  "timings": slowest_task(messages)}
        self._store_batch(record)
        self.after_record(batch_id, messages)
        # Step 3. Let the coordinator complete checkpoints.
        coordinator = self._coordinator_factory()
        completed = coordinator.on_batch(batch_id, record["barriers"], record["acks"],
                                         record["handles"])
        # Step 4. notifyCheckpointComplete.
        if completed is not None:
            self.notify_checkpoint_complete(completed, batch_id, coordinator)
        # Step 5. Sweep losers.
        self.abort_unrecorded(batch_id)

    @staticmethod
    def _belongs(handle: dict, batch_id: int, completed) -> bool:
        """Does ``handle`` (of batch ``batch_id``) hold output of checkpoint ``completed`` or an
        earlier one? Handles without an epoch belong to the first checkpoint completed at or
        after their batch."""
        epoch = handle.get("checkpoint_id")
        if epoch is not None:
            return epoch <= completed.checkpoint_id
        return batch_id <= completed.completion_batch

    def on_batch_aborted(self, batch_id: int, messages: Iterable[SinkCommitMessage],
                         all_tasks_returned: bool = True) -> None:
        """Spark aborted batch N (a task failed or was cancelled, or ``commit(N)`` raised): see
        the module docstring. Output of a completed checkpoint is committed forward, never
        aborted. ``all_tasks_returned`` is False when a task sent no message (it failed, or
        it is being cancelled and may still write). Runs in the driver commit worker."""
        record = self.load_batch(batch_id)
        coordinator = self._coordinator_factory()
        completed = coordinator.latest_completed()
        recorded = {self.handle_id(h): h for h in (record or {}).get("handles", [])}
        keep, aborted = [], set()
        for m in messages:
            for h in m.handles:
                hid = self.handle_id(h)
                if (completed is not None and hid in recorded
                        and self.transaction_name(recorded[hid]) == self.transaction_name(h)
                        and self._belongs(h, batch_id, completed)):
                    keep.append(hid)
                    continue
                self.abort_handle(h)
                aborted.add(hid)
        if record is not None:
            left = [h for h in record["handles"]
                    if self.handle_id(h) not in aborted or self.handle_id(h) in record.get(
                        "committed", {})]
            if len(left) != len(record["handles"]):
                record["handles"] = left
                self._store_batch(record)
        logger.warning("batch %d aborted by Spark: %d transactions aborted, %d of completed "
                       "checkpoint %s kept for commit", batch_id, len(aborted), len(keep),
                       completed.checkpoint_id if completed is not None else "-")
        if keep:
            try:
                self.notify_checkpoint_complete(completed, batch_id, coordinator)
            except Exception as exc:  # noqa: BLE001 - recover() finishes it at the next start
                logger.warning("batch %d: committing completed checkpoint %d forward failed "
                               "(%s); the next start commits it", batch_id,
                               completed.checkpoint_id, exc)
        # A task that failed or was killed returned no message, so its open output is in no
        # record: sweep it now, not at the query's next start, so that it does not pin the
        # output's read_committed readers while the query is down.
        self._sweep_aborted_batch(batch_id, all_tasks_returned)

    def _sweep_aborted_batch(self, batch_id: int, all_tasks_returned: bool) -> None:
        """Sweep after an abort (driver commit worker). When a task did not return, sweep
        again every :attr:`SWEEP_INTERVAL_S` for :attr:`cancelled_task_grace_s`: Spark fails the
        job, and aborts, as soon as it *asks* the other tasks to stop, and a task being
        cancelled can run on in its Python worker for a moment and open (and pre-commit) a
        transaction after the first sweep (seen when a query is stopped in the middle of a
        batch). A sweep failure is only logged: the next start sweeps again."""
        started = time.monotonic()
        deadline = started + (0.0 if all_tasks_returned else self.cancelled_task_grace_s)
        first = True
        while True:
            try:
                aborted = self.abort_unrecorded(batch_id)
            except Exception as exc:  # noqa: BLE001 - the next start sweeps again
                logger.warning("batch %d: sweeping the aborted batch's unrecorded output "
                               "failed (%s); the next start sweeps it", batch_id, exc)
                return
            if aborted and not first:
                logger.warning("batch %d: %d output(s) of tasks being cancelled appeared after "
                               "the abort's first sweep; aborted %.1f s after it", batch_id,
                               aborted, time.monotonic() - started)
            first = False
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(self.SWEEP_INTERVAL_S, left))

    def notify_checkpoint_complete(self, completed, batch_id: int, coordinator=None) -> None:
        """Commit every uncommitted handle belonging to checkpoints <= ``completed.checkpoint_id``.

        ``completed`` has ``checkpoint_id``, ``completion_batch`` (the batch whose commit
        completed it) and ``offsets``. Commits continue past a failing handle; the first error
        is raised after the loop (as Flink does), so one bad transaction does not block others.
        Runs in the driver commit worker.
        """
        n = completed.checkpoint_id
        started = time.perf_counter()
        fault_point(FaultPoint.COMMIT_AFTER_METADATA)
        committed_by_n: List[dict] = []
        records, work = [], []
        settled = self._settled(getattr(coordinator, "run_started_ms", None))
        batches = self.recorded_batches()
        for b in batches:
            if b > batch_id:
                break
            if settled.get(b, n) < n:
                continue  # all committed, none by n: nothing to commit or report
            record = self.load_batch(b)
            if record is None:
                continue
            done = record.setdefault("committed", {})
            committed_by_n += [h for h in record["handles"] if done.get(self.handle_id(h)) == n]
            records.append(record)
            work += [(record, h) for h in record["handles"]
                     if self.handle_id(h) not in done and self._belongs(h, b, completed)]
        errors = self._commit_handles([h for _, h in work], bool(committed_by_n))
        first_error, changed = None, set()
        for (record, h), exc in zip(work, errors):
            if exc is None:
                record["committed"][self.handle_id(h)] = n
                committed_by_n.append(h)
                changed.add(id(record))
            else:
                logger.error("checkpoint %d: commit of %s (%s) failed: %s", n,
                             self.handle_id(h), self.transaction_name(h), exc)
                first_error = first_error or exc
        for record in records:
            if id(record) in changed:
                if record["batch_id"] == batch_id:  # stored anyway: no extra write for this
                    record["commit_transactions_ms"] = round(
                        (time.perf_counter() - started) * 1000, 1)
                    batch_started = getattr(self, "_batch_started", None)
                    if batch_started is not None:  # recording and checkpoint completion
                        record["driver_before_commit_ms"] = round(
                            (started - batch_started) * 1000, 1)
                self._store_batch(record)
        for record in records:
            self._settle(record, batches[-1], settled)
        if first_error is not None:
            raise first_error
        fault_point(FaultPoint.AFTER_TRANSACTIONS)
        self.after_commit(n, committed_by_n)
        # The source commits these offsets to its consumer group on its next trigger.
        write_completed_offsets(self.backend, CompletedOffsets.of(
            n, completed.timestamp_ms, completed.offsets))
        if coordinator is not None:
            coordinator.mark_committed(n)
        self.prune(batch_id, batches, settled)
        logger.info("checkpoint %d committed (batch %d)", n, batch_id)

    def _commit_handles(self, handles: List[dict], some_committed: bool) -> List:
        """Commit ``handles``; per handle None or the exception its commit raised (driver
        commit worker). The first is committed alone, the rest concurrently, at most
        ``COMMIT_PARALLELISM`` at a time (one EndTxn each): a checkpoint's commit time does not
        grow with its number of transactions. Fault points still raise out."""
        if not handles:
            return []
        lock, state = threading.Lock(), {"some": some_committed}

        def commit(h: dict):
            with lock:
                mid = state["some"]
            if mid:
                fault_point(FaultPoint.COMMIT_MID_TRANSACTIONS)
            try:
                self.commit_handle(h)
            except Exception as exc:  # noqa: BLE001 - reported per handle, first re-raised
                return exc
            with lock:
                state["some"] = True
            return None

        first = [commit(handles[0])]
        rest = handles[1:]
        if len(rest) <= 1 or self.COMMIT_PARALLELISM <= 1:
            return first + [commit(h) for h in rest]
        with ThreadPoolExecutor(max_workers=min(self.COMMIT_PARALLELISM, len(rest)),
                                thread_name_prefix="barrier-commit") as pool:
            return first + list(pool.map(commit, rest))

    def after_record(self, batch_id: int, messages: List[SinkCommitMessage]) -> None:
        """Hook: batch ``batch_id``'s record is durable, no checkpoint completed with it yet.
        Default: nothing. Runs in the driver commit worker."""

    def after_commit(self, checkpoint_id: int, handles: List[dict]) -> None:
        """Hook: every handle checkpoint ``checkpoint_id`` committed (also ones an interrupted
        earlier notification already committed). Default: nothing.
        Runs in the driver commit worker."""

    def prune(self, upto_batch: int, recorded: Optional[List[int]] = None,
              settled: Optional[Dict[int, int]] = None, keep: int = 20) -> None:
        """Delete records of fully committed batches, keeping the newest ``keep``.
        ``recorded`` / ``settled``: the listing and the run's settled records, when the caller
        has them. Runs in the driver commit worker."""
        settled = self._settled() if settled is None else settled
        batches = [b for b in (self.recorded_batches() if recorded is None else recorded)
                   if b <= upto_batch]
        for b in batches[:-keep]:
            if b not in settled:
                record = self.load_batch(b)
                if record is None or self._open_names(record):
                    continue
            self.backend.delete([batch_path(b)])
            settled.pop(b, None)

    def recover(self) -> None:
        """At query start: finish what a crash interrupted (driver, before the first task).

        1. Checkpoints the coordinator completed whose handles are not all committed: commit.
        2. Open output of older batches that no record names: abort (``abort_unrecorded``).
        3. Everything else is left to the replay of the interrupted batch (step 1 of
           ``on_batch_committed``) and to ``abort_lingering`` for ids no replay reuses.
        """
        coordinator = self._coordinator_factory()
        completed = coordinator.latest_completed()
        if completed is not None:
            self.notify_checkpoint_complete(completed, completed.completion_batch, coordinator)
        # Spark also creates the writer (and so runs this) in the commit worker of batch N,
        # after N's tasks pre-committed and before N is recorded: sweep only batches before
        # the newest recorded one (the running batch is never older); the commit of the
        # running batch sweeps the rest (step 5).
        recorded = self.recorded_batches()
        if recorded and recorded[-1] > 0:
            self.abort_unrecorded(recorded[-1] - 1)

"""``TwoPhaseCommitWriter``: the template every barrier-kafka sink builds on, after Flink's
TwoPhaseCommitSinkFunction.

Where code runs
---------------
* ``write`` runs per task on executors: rows of each epoch (``checkpoint_id`` column) go into their
  own transaction (``begin_transaction``/``invoke``); at the end of the task every transaction is
  pre-committed (``pre_commit``) and its handle, plus the barrier and ack rows the task saw,
  returned in a :class:`~barrier_sink.messages.SinkCommitMessage`. Barrier and ack rows are never
  written as output.
* ``commit(messages, batchId)`` runs on the driver in a short-lived Python worker. It hands the
  messages to :class:`~barrier_sink.committer.SinkCommitter`, which records them durably, lets the
  checkpoint coordinator complete checkpoints, and on notifyCheckpointComplete(n) commits every
  pre-committed transaction of epochs <= n (``commit_handle``).
* ``abort(messages, batchId)`` (Spark gave up on the batch) aborts the batch's transactions.

Subclasses implement ``begin_transaction``, ``invoke``, ``pre_commit``, ``commit_handle``,
``abort_handle`` and ``recover`` (abort debris of crashed attempts).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

try:  # PySpark >= 4.1: tasks get Arrow record batches, no Row per record
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # PySpark 4.0
    from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter

    class _StreamWriterBase(DataSourceStreamWriter, DataSourceArrowWriter):  # type: ignore
        """A stream writer that PySpark 4.0 hands Arrow record batches: its write worker
        (``pyspark.sql.worker.write_into_data_source``) checks for ``DataSourceArrowWriter``
        whether the write is streaming or not, and converts every other writer's batches into
        one ``Row`` per record first. 4.0 has no ``DataSourceStreamArrowWriter``."""

from barrier_core.barrier_message import SinkBarrier
from barrier_core.schema import KIND_ACK, KIND_BARRIER, KIND_RECORD, channel_name
from barrier_sink.attempt_claims import current_attempt
from barrier_sink.messages import SinkCommitMessage
from barrier_sink.shared_storage import require_shared_storage
from barrier_core.faults import FaultPoint, fault_point
from barrier_core.jar_archives import keep_jar_directories

logger = logging.getLogger(__name__)

_recovered: set = set()  # storage URIs recovered by this Python process (an optimisation only)


def current_task() -> tuple:
    """``(micro-batch id, task partition id, attempt number)`` of the running sink task
    (executor). The attempt number tells a retried or speculative attempt from the first."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    if batch is None:
        raise RuntimeError("bug: streaming.sql.batchId is not set in a sink task")
    return int(batch), ctx.partitionId(), ctx.attemptNumber()


def barrier_of(row) -> dict:
    """The commit-message entry of a barrier row (executor)."""
    return SinkBarrier(int(row["checkpoint_id"]), channel_name(row["topic"], row["partition"]),
                       int(row["offset"]) if row["offset"] is not None else None,
                       tuple(row["barrier_channels"] or ()),
                       row["checkpoint_timestamp"]).to_json()


class _Stopwatch:
    """Wall time of a sink task by phase, in ms (:data:`~barrier_sink.messages.TASK_TIMINGS`);
    opening a transaction happens inside writing and is counted once, as opening (executor)."""

    def __init__(self) -> None:
        self._ms: Dict[str, float] = {}
        self._inner = 0.0  # time of nested phases inside the one being measured

    @contextmanager
    def measure(self, phase: str):
        outer, self._inner = self._inner, 0.0
        t0 = time.perf_counter()
        try:
            yield
        finally:
            spent = (time.perf_counter() - t0) * 1000
            self._ms[phase] = self._ms.get(phase, 0.0) + spent - self._inner
            self._inner = outer + spent

    def timed_iter(self, iterator: Iterator, phase: str) -> Iterator:
        it = iter(iterator)
        while True:
            with self.measure(phase):
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item

    def result(self, task_ms: float) -> Dict[str, float]:
        return {"task_ms": round(task_ms, 1),
                **{k: round(v, 1) for k, v in self._ms.items()}}


class TwoPhaseCommitWriter(_StreamWriterBase, ABC):
    """Template 2PC stream writer; see the module docstring for the protocol."""

    def __init__(self, options) -> None:
        self.options = options

    # ------------------------------------------------------------------ subclass hooks
    @abstractmethod
    def begin_transaction(self, batch_id: int, partition_id: int, attempt: int,
                          checkpoint_id: Optional[int]) -> Any:
        """Open a transaction for one epoch of one task attempt (executor). Attempts of the
        same task (retries, speculative copies) must get distinct transactions: one attempt
        must never fence or overwrite another's pre-committed output."""

    @abstractmethod
    def invoke(self, txn: Any, row) -> None:
        """Write one record row into ``txn`` (executor)."""

    def invoke_batch(self, txn: Any, batch) -> None:
        """Write every row of ``batch`` (a ``pyarrow.RecordBatch`` of record rows of one epoch,
        in order) into ``txn`` (executor). Default: one :meth:`invoke` per row as a dict;
        sinks override it to skip the per-row objects."""
        for row in batch.to_pylist():
            self.invoke(txn, row)

    def task_counters(self) -> Dict[str, int]:
        """Process-wide counters whose growth during a task its timings report (executor)."""
        return {}

    @abstractmethod
    def pre_commit(self, txn: Any) -> Optional[dict]:
        """Make ``txn`` durable but invisible; return its JSON handle (None: nothing written).
        Runs on the executor."""

    @abstractmethod
    def abort_open(self, txn: Any) -> None:
        """Abort a transaction that failed before pre-commit (executor)."""

    @abstractmethod
    def committer(self):
        """The driver-side :class:`~barrier_sink.committer.SinkCommitter` of this sink."""

    # ------------------------------------------------------------------ executor
    def write(self, iterator: Iterator) -> SinkCommitMessage:
        """Write one task's rows: one transaction per epoch, pre-committed at the end; returns
        the handles, barriers and acks for the driver (executor). ``iterator`` yields Arrow
        record batches; Rows are accepted too (a PySpark build that converts them first)."""
        started = time.perf_counter()
        keep_jar_directories()
        batch_id, partition_id, attempt = current_task()
        txns: Dict[Optional[int], Any] = {}
        run, task_attempt = current_attempt()
        message = SinkCommitMessage(batch_id, partition_id, run=run, task_attempt=task_attempt)
        clock = _Stopwatch()
        counted = self.task_counters()

        def txn_of(epoch):
            txn = txns.get(epoch)
            if txn is None:
                fault_point(FaultPoint.TASK_OPEN)
                with clock.measure("open_ms"):
                    txn = txns[epoch] = self.begin_transaction(batch_id, partition_id, attempt,
                                                               epoch)
            return txn

        try:
            for item in clock.timed_iter(iterator, "input_wait_ms"):
                with clock.measure("write_ms"):
                    if isinstance(item, tuple):   # a Row; ``hasattr`` on a Row raises and
                        self._write_row(item, txn_of, message)   # formats an error
                    else:
                        self._write_arrow(item, txn_of, message)
            if txns:
                fault_point(FaultPoint.TASK_WRITE)
            for epoch in sorted(txns, key=lambda e: (e is None, e or 0)):
                with clock.measure("pre_commit_ms"):
                    handle = self.pre_commit(txns.pop(epoch))
                if handle is not None:
                    message.handles.append(handle)
            if message.handles:
                fault_point(FaultPoint.AFTER_PRECOMMIT)
        except BaseException:
            for txn in txns.values():
                try:
                    self.abort_open(txn)
                except Exception:  # noqa: BLE001 - keep the original failure
                    logger.warning("abort of an open transaction failed", exc_info=True)
            raise
        message.timings = clock.result((time.perf_counter() - started) * 1000)
        message.timings.update({k: v - counted[k] for k, v in self.task_counters().items()})
        logger.debug("batch %d task %d: %d records, %d transactions, %d barriers, %d acks",
                     batch_id, partition_id, message.records, len(message.handles),
                     len(message.barriers), len(message.acks))
        return message

    def _write_row(self, row, txn_of, message: SinkCommitMessage) -> None:
        kind = row["kind"]
        if kind == KIND_RECORD:
            self.invoke(txn_of(row["checkpoint_id"]), row)
            message.records += 1
        else:
            self._protocol_row(kind, row, message)

    def _write_arrow(self, batch, txn_of, message: SinkCommitMessage) -> None:
        """Records of one Arrow batch go to their epochs' transactions, each epoch's records in
        one call and in batch order; the barrier and ack rows become dicts in one conversion
        (executor). An operator with many key groups interleaves a few records of each key
        group with its ack and barrier rows: a call and a conversion per run and row cost more
        than the records' own sending."""
        import numpy as np
        import pyarrow as pa

        from barrier_sink.record_batches import BinaryColumn

        n = batch.num_rows
        if not n:
            return
        is_record = BinaryColumn.from_arrow(batch.column("kind")).equals(KIND_RECORD.encode())
        control = np.flatnonzero(~is_record)
        if len(control):
            for row in batch.take(pa.array(control)).to_pylist():
                self._protocol_row(row["kind"], row, message)
        records = np.flatnonzero(is_record)
        if not len(records):
            return
        epochs = batch.column("checkpoint_id").to_numpy(zero_copy_only=False)[records]
        no_epoch = (np.isnan(epochs) if epochs.dtype.kind == "f"
                    else np.zeros(len(records), dtype=bool))
        epoch = np.where(no_epoch, -1, epochs).astype(np.int64)  # ids are >= 1
        firsts = np.unique(epoch, return_index=True)[1]
        for first in sorted(firsts.tolist()):
            run_epoch = None if no_epoch[first] else int(epoch[first])
            rows = records if len(firsts) == 1 else records[epoch == epoch[first]]
            if len(rows) == n:
                part = batch
            elif rows[-1] - rows[0] + 1 == len(rows):  # contiguous: a view, not a copy
                part = batch.slice(int(rows[0]), len(rows))
            else:
                part = batch.take(pa.array(rows))
            self.invoke_batch(txn_of(run_epoch), part)
            message.records += len(rows)

    @staticmethod
    def _protocol_row(kind, row, message: SinkCommitMessage) -> None:
        if kind == KIND_BARRIER:
            message.barriers.append(barrier_of(row))
        elif kind == KIND_ACK:
            message.acks.append(row["ack"])
        else:
            raise ValueError(f"row kind {kind!r} is not one of record, barrier, ack")

    # ------------------------------------------------------------------ driver
    def commit(self, messages: List[SinkCommitMessage], batchId: int) -> None:
        """Spark committed batch ``batchId``: check the shared checkpoint storage, then hand the
        messages to the committer (driver commit worker)."""
        messages = [m for m in messages if m is not None]
        committer = self.committer()
        require_shared_storage(committer.backend, self.storage_uri(), messages)
        committer.on_batch_committed(batchId, messages)

    def abort(self, messages: List[SinkCommitMessage], batchId: int) -> None:
        """Spark gave up on batch ``batchId``: abort its transactions, except those of a
        completed checkpoint (driver commit worker)."""
        returned = [m for m in messages if m is not None]
        self.committer().on_batch_aborted(batchId, returned,
                                          all_tasks_returned=len(returned) == len(messages))

    def recover_once(self) -> None:
        """Driver, when Spark creates the writer (before each batch's tasks and in the commit
        worker): finish the commits of completed checkpoints that a crash interrupted. Runs once
        per Python process and storage location; idempotent if it runs again."""
        from barrier_sink.ownership import claim_storage

        key = (self.storage_uri(), self.checkpoint_location())  # workers serve many queries
        if key in _recovered:
            return
        self.preflight()
        committer = self.committer()
        claim_storage(committer.backend, self.checkpoint_location())
        committer.recover()
        _recovered.add(key)

    def preflight(self) -> None:
        """Checks against the outside world at query start (driver, once per process)."""

    @abstractmethod
    def storage_uri(self) -> str:
        """The checkpoint storage this sink records its protocol state in (driver)."""

    @abstractmethod
    def checkpoint_location(self) -> str:
        """The query's Spark ``checkpointLocation`` (owner of the checkpoint storage) (driver)."""

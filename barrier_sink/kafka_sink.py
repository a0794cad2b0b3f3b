"""The exactly-once Kafka sink: ``df.writeStream.format("barrier-kafka")``.

Input columns (as Spark's Kafka sink): ``value`` (string or binary, required), optional ``key``,
``topic`` (unless the ``topic`` option is set), ``partition``, ``headers``; plus the barrier-kafka
columns ``kind`` and ``checkpoint_id`` (and ``ack`` after a keyed operator, ``barrier_channels``
and ``checkpoint_timestamp`` from the source). Executors write each task's rows of one epoch in
one Kafka transaction. Its transactional.id comes from the task attempt's pool
(``<prefix>-r<run>-p<task>-a<attempt>-s<slot>``, reused only after the transaction last
recorded under it ended: :mod:`barrier_sink.id_pool`; an attempt claims it before initialising
it and stops if its batch is already committed: :mod:`barrier_sink.attempt_claims`), or with
``transaction.naming.strategy`` INCREMENTING is ``<prefix>-b<batch>-p<task>-a<attempt>-e<epoch>``.
Every attempt of a task (retry, speculative copy) has its own ids, so no attempt fences
another's pre-committed transaction. Spark hands the driver the winning attempt's handles; the
driver commits them when the epoch's checkpoint completes and aborts every other open
transaction of an attempt it recorded no handle for (losers, crashed attempts:
:mod:`barrier_sink.lingering`).
"""

from __future__ import annotations

import logging
from typing import Dict, Optional

from barrier_core.packed_source import refuse_packed
from barrier_core.worker_heap import in_python_worker
from barrier_sink.attempt_claims import (LateAttemptError, claim, claimant, current_attempt,
                                         quarantined, refuse_if_sealed, run_tag,
                                         seal_and_collect)
from barrier_sink.committer import SinkCommitter
from barrier_sink.exceptions import InvalidOptionError
from barrier_sink.lingering import list_lingering
from barrier_sink.id_pool import TransactionalIdPool
from barrier_sink.options import (KafkaSinkOptions, is_pooled_transactional_id,
                                  transactional_id_batch)
from barrier_sink.transaction import (EndResult, TransactionalWriter, TransactionHandle,
                                      abort_handle, commit_handle, fence_and_abort)
from barrier_sink.two_phase_commit import TwoPhaseCommitWriter
from barrier_sink.exceptions import TransactionCommitError

logger = logging.getLogger(__name__)

def _bytes(value) -> Optional[bytes]:
    if value is None or isinstance(value, (bytes, bytearray)):
        return value
    return str(value).encode("utf-8")


def _headers(headers) -> Optional[list]:
    """A row's ``headers`` (key/value structs) as kafka-python's ``[(key, bytes)]``, or None."""
    return [(h["key"], _bytes(h["value"])) for h in headers] if headers else None


def _binary_array(column):
    """An Arrow string or binary column as ``binary`` / ``large_binary`` (UTF-8 for strings, as
    ``_bytes``), or None for other types."""
    import pyarrow as pa

    if pa.types.is_string(column.type):
        return column.cast(pa.binary())
    if pa.types.is_large_string(column.type):
        return column.cast(pa.large_binary())
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column
    return None


def _binary_list(column) -> list:
    """An Arrow string or binary column as a list of bytes / None (UTF-8, as ``_bytes``)."""
    binary = _binary_array(column)
    if binary is None:
        return [_bytes(v) for v in column.to_pylist()]
    return binary.to_pylist()


def validate_schema(schema, opts: KafkaSinkOptions) -> None:
    refuse_packed(schema, "The barrier-kafka sink")
    names = set(schema.fieldNames())
    missing = [c for c in ("kind", "checkpoint_id", "value") if c not in names]
    if missing:
        raise InvalidOptionError(
            f"The barrier-kafka sink needs columns {missing}: write the barrier-kafka source's "
            "rows or a barrier_ops operator's output (barrier and ack rows carry the checkpoint "
            "protocol), with a 'value' column.")
    if opts.topic is None and "topic" not in names:
        raise InvalidOptionError("The barrier-kafka sink needs option 'topic' or a 'topic' "
                                 "column.")


class KafkaSinkCommitter(SinkCommitter):
    """Driver side: commits/aborts Kafka transactions from their handles."""

    #: A cancelled task's transaction holds every ``read_committed`` reader of its partitions
    #: until the next start or ``kafka.transaction.timeout.ms``: worth a few seconds of the
    #: abort. Measured: cancelled tasks opened theirs up to about 2 s after the abort
    #: (integration_tests/test_exactly_once_raise.py, a query stopped mid-batch).
    cancelled_task_grace_s = 5.0

    def __init__(self, backend, coordinator_factory, opts: KafkaSinkOptions) -> None:
        super().__init__(backend, coordinator_factory)
        self.opts = opts

    def transaction_name(self, handle: dict) -> str:
        """The handle's ``transactional.id`` (driver commit worker)."""
        return handle["transactional_id"]

    def abort_unrecorded(self, batch_id: Optional[int]) -> int:
        """Fence and abort open transactions of this prefix that no batch record names: the
        losing attempt of a speculative task, a retried task's first attempt, debris of a
        crashed run. They would otherwise pin the last stable offset of their partitions for
        every ``read_committed`` reader until ``transaction.timeout.ms``; returns how many it
        aborted (driver)."""
        prefix = self.opts.transactional_id_prefix
        cache: dict = {}
        aborted = 0
        open_names, batches = None, None
        # the driver commit worker (a PySpark worker living as long as the query) keeps its
        # admin client from one batch's sweep to the next; elsewhere (tests, tools) none is kept
        for txn in list_lingering(self.opts.kafka, prefix, reuse_client=in_python_worker()):
            if is_pooled_transactional_id(prefix, txn.transactional_id):
                # A pooled id names no batch: sweep only when every batch up to the running one
                # is recorded (the commit of the newest batch), never at a start that may run
                # before the running batch's handles are recorded.
                if batches is None:
                    batches = self.recorded_batches()
                if batch_id is None or batch_id < max(batches, default=-1):
                    continue
                if open_names is None:
                    open_names = self.recorded_open_names(batches)
                if txn.transactional_id in open_names:
                    continue
            else:
                b = transactional_id_batch(prefix, txn.transactional_id)
                if b is None or (batch_id is not None and b > batch_id):
                    continue
                if txn.transactional_id in self._pending_names(b, cache):
                    continue
            logger.warning("%s: open transaction of an attempt no batch record names (a "
                           "losing speculative or retried attempt, a task that failed or was "
                           "killed, or a crashed run): aborting it", txn.transactional_id)
            fence_and_abort(self.opts.kafka, txn.transactional_id,
                            self.opts.transaction_timeout_ms)
            aborted += 1
        return aborted

    def after_record(self, batch_id: int, messages) -> None:
        """Seal the batch against its late task attempts and keep the pooled ids its losing
        attempts claimed out of the next batches (driver commit worker;
        :mod:`barrier_sink.attempt_claims`)."""
        if not self.opts.pooled:
            return  # incrementing ids name their batch: no later batch reuses a loser's
        runs = {m.run for m in messages if m.run is not None}
        losers = seal_and_collect(self.backend, batch_id,
                                  runs.pop() if len(runs) == 1 else None,
                                  {claimant(m.task_attempt) for m in messages})
        for tid in losers:  # a loser's producer, up or not yet: it can leave nothing open
            fence_and_abort(self.opts.kafka, tid, self.opts.transaction_timeout_ms)

    def commit_handle(self, handle: dict) -> None:
        """Commit the pre-committed transaction through a producer resumed on its id and epoch;
        idempotent (driver commit worker)."""
        h = TransactionHandle.from_json(handle)
        from kafka import errors as Errors

        try:
            result = commit_handle(self.opts.kafka, h, self.opts.transaction_timeout_ms)
        except Errors.InvalidTxnStateError as exc:
            raise TransactionCommitError(
                f"{h.transactional_id}: pre-committed transaction (producer {h.producer_id} "
                f"epoch {h.producer_epoch}, {h.records} records) can no longer be committed: "
                "the broker already ended it, most likely by aborting it after "
                f"kafka.transaction.timeout.ms ({self.opts.transaction_timeout_ms} ms) passed "
                "before its checkpoint completed. Its records are not in the output. Raise "
                "kafka.transaction.timeout.ms (up to the brokers' transaction.max.timeout.ms) "
                f"or checkpoint more often. ({exc})") from exc
        if result is EndResult.FENCED:
            raise TransactionCommitError(
                f"{h.transactional_id}: pre-committed transaction (producer {h.producer_id} "
                f"epoch {h.producer_epoch}, {h.records} records) was fenced before its "
                "checkpoint committed it: a newer producer initialised the same "
                "transactional.id. Each task attempt has its own ids, reuses one only after "
                "the transaction recorded under it ended, and an attempt that outlives its "
                "batch stops before initialising one, so the likely cause is "
                f"another query or job using transactionalIdPrefix "
                f"'{self.opts.transactional_id_prefix}' (give each query its own prefix), or "
                "a manual abort of this prefix's transactions.")

    def abort_handle(self, handle: dict) -> None:
        """Abort the transaction (fencing it if still open); idempotent (driver commit worker)."""
        abort_handle(self.opts.kafka, TransactionHandle.from_json(handle),
                     self.opts.transaction_timeout_ms)


class KafkaTwoPhaseCommitWriter(TwoPhaseCommitWriter):
    """Stream writer of the exactly-once Kafka sink (created on the driver, pickled to tasks)."""

    def __init__(self, options: Dict[str, str], schema) -> None:
        super().__init__(dict(options))
        self.opts = KafkaSinkOptions.from_options(options)
        validate_schema(schema, self.opts)
        names = set(schema.fieldNames())
        self._has = {c: c in names for c in ("key", "topic", "partition", "headers")}
        self._in_use = None  # pooled ids still in use, read when pickled for the tasks
        self._pool = None  # executor: this batch's TransactionalIdPool
        self._claims = None  # executor: (checkpoint storage, run, task attempt id)

    def __getstate__(self):
        """Spark pickles the writer on the driver before each batch's tasks (after the previous
        batch's commit returned): snapshot the pooled ids still in use for them (driver)."""
        state = dict(self.__dict__)
        if self.opts.pooled and self._in_use is None:
            committer = self.committer()
            self._in_use = frozenset(committer.recorded_open_names()
                                     | quarantined(committer.backend))
        state["_in_use"], state["_pool"], state["_claims"] = self._in_use, None, None
        return state

    # executor -------------------------------------------------------------
    def begin_transaction(self, batch_id, partition_id, attempt, checkpoint_id):
        """Open a transactional producer for one epoch of one task attempt (executor)."""
        tid = self.next_transactional_id(batch_id, partition_id, attempt, checkpoint_id)
        txn = TransactionalWriter(self.opts.kafka, tid, self.opts.transaction_timeout_ms,
                                  batch_id, partition_id, checkpoint_id,
                                  two_phase=self.opts.two_phase_commit).open()
        if self.opts.pooled:  # sealed while the producer initialised: lost, write nothing
            backend, run, _ = self._claims
            try:
                refuse_if_sealed(backend, batch_id, tid, run)
            except LateAttemptError:
                txn.abort()
                raise
        return txn

    def task_counters(self) -> Dict[str, int]:
        """Producers this worker created / reused (executor): reported per task."""
        from barrier_sink import producer_reuse

        return {f"{k}_producers": v for k, v in producer_reuse.counts().items()}

    def next_transactional_id(self, batch_id: int, partition_id: int, attempt: int,
                              checkpoint_id: Optional[int]) -> str:
        """The transactional.id of the task attempt's next transaction in this batch: the
        lowest free slot of its pool, or the incrementing name (executor)."""
        if self.opts.pooled:
            if self._pool is None:
                if self._in_use is None:
                    raise RuntimeError("bug: the sink writer reached a task without the set of "
                                       "transactional ids in use (it was not pickled by Spark)")
                run, task_attempt = current_attempt()
                tag = run_tag(run)
                self._pool = TransactionalIdPool(
                    lambda p, a, s: self.opts.pooled_transactional_id(p, a, s, tag), self._in_use)
                self._claims = (self.opts.checkpoint.open_backend(), run, task_attempt)
            backend, run, task_attempt = self._claims
            while True:  # another attempt of the batch claimed the id: the next slot
                tid = self._pool.acquire(batch_id, partition_id, attempt)
                if claim(backend, batch_id, tid, run, task_attempt):
                    return tid
        return self.opts.transactional_id(batch_id, partition_id, checkpoint_id, attempt)

    def invoke(self, txn: TransactionalWriter, row) -> None:
        """Send one record row (executor)."""
        topic = self.opts.topic or row["topic"]
        if topic is None:
            raise ValueError("record row without a topic and no 'topic' option")
        headers = _headers(row["headers"]) if self._has["headers"] else None
        txn.send(topic, value=_bytes(row["value"]),
                 key=_bytes(row["key"]) if self._has["key"] else None, headers=headers,
                 partition=(row["partition"] if self._has["partition"] and not self.opts.topic
                            else None))

    def invoke_batch(self, txn: TransactionalWriter, batch) -> None:
        """Send every record row of an Arrow batch (one epoch): columns are converted once per
        batch (strings encoded to UTF-8 by Arrow), not once per row (executor)."""
        if self._send_columns(txn, batch):
            return
        n = batch.num_rows
        values = _binary_list(batch.column("value"))
        keys = _binary_list(batch.column("key")) if self._has["key"] else None
        if self.opts.topic:
            topics = None
        else:
            topics = batch.column("topic").to_pylist()
            if None in topics:
                raise ValueError("record row without a topic and no 'topic' option")
        partitions = (batch.column("partition").to_pylist()
                      if self._has["partition"] and not self.opts.topic else None)
        headers = batch.column("headers").to_pylist() if self._has["headers"] else None
        topic, send = self.opts.topic, txn.send
        for i in range(n):
            send(topic or topics[i], value=values[i], key=keys[i] if keys is not None else None,
                 headers=_headers(headers[i]) if headers is not None else None,
                 partition=partitions[i] if partitions is not None else None)

    def _send_columns(self, txn: TransactionalWriter, batch) -> bool:
        """Send the batch in whole record batches where it qualifies: binary or string key and
        value, one topic, no headers (executor)."""
        if self._has["headers"] and batch.column("headers").null_count < batch.num_rows:
            return False
        topic = self.opts.topic
        if topic is None:
            topics = batch.column("topic")
            if topics.null_count or len(topics.unique()) != 1:
                return False
            topic = topics[0].as_py()
        keys = _binary_array(batch.column("key")) if self._has["key"] else None
        values = _binary_array(batch.column("value"))
        if values is None or (self._has["key"] and keys is None):
            return False
        if keys is None:
            import pyarrow as pa

            keys = pa.nulls(batch.num_rows, pa.binary())
        partitions = (batch.column("partition")
                      if self._has["partition"] and not self.opts.topic else None)
        return txn.send_columns(topic, keys, values, partitions)

    def pre_commit(self, txn: TransactionalWriter):
        """Flush and keep the transaction open; return its handle (executor)."""
        handle = txn.pre_commit()
        txn.close_without_finishing()
        return handle.to_json()

    def abort_open(self, txn: TransactionalWriter) -> None:
        """Abort a transaction that failed before pre-commit (executor)."""
        txn.abort()

    # driver ---------------------------------------------------------------
    def committer(self) -> KafkaSinkCommitter:
        """The driver half: a :class:`KafkaSinkCommitter` on the sink's checkpoint storage
        (driver commit worker)."""
        from barrier_sink.checkpointing import coordinator_factory

        backend = self.opts.checkpoint.open_backend()
        return KafkaSinkCommitter(backend, coordinator_factory(backend, self.opts.checkpoint),
                                  self.opts)

    def preflight(self) -> None:
        """At start (driver, once): read the source's checkpoint settings from
        checkpoint.storage and size the transaction-timeout guard by them; refuse a
        ``kafka.transaction.timeout.ms`` above the brokers' maximum, and KIP-939 transactions
        the brokers do not allow."""
        from barrier_sink.transaction import (broker_max_transaction_timeout_ms,
                                              check_two_phase_commit)
        from barrier_core.checkpoint_settings import read_settings

        settings = read_settings(self.opts.checkpoint.open_backend())
        bound = None
        if settings is None:
            logger.warning(
                "barrier-kafka sink: no barrier-kafka source records its checkpoint settings in "
                "%s; the first batch carrying barriers will fail until the source is given "
                "this 'checkpoint.storage' (barrier_sink.shared_storage).",
                self.opts.checkpoint.storage_uri)
        else:
            bound = self.opts.check_against_source(settings)
        self.opts.check_transaction_timeout(broker_max_transaction_timeout_ms(self.opts.kafka),
                                            seal_bound_ms=bound)
        if self.opts.two_phase_commit:
            check_two_phase_commit(self.opts.kafka, self.opts.two_phase_check_id,
                                   self.opts.transaction_timeout_ms)

    def storage_uri(self) -> str:
        """The sink's ``checkpoint.storage`` (driver)."""
        return self.opts.checkpoint.storage_uri

    def checkpoint_location(self) -> str:
        """The query's Spark ``checkpointLocation`` (driver)."""
        return self.opts.checkpoint.checkpoint_location

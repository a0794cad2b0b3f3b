"""The exactly-once Kafka sink: ``df.writeStream.format("barrier-kafka")``.

Input columns (as Spark's Kafka sink): ``value`` (string or binary, required), optional ``key``,
``topic`` (unless the ``topic`` option is set), ``partition``, ``headers``; plus the barrier-kafka
columns ``kind`` and ``checkpoint_id`` (and ``ack`` after a keyed operator, ``barrier_channels``
and ``checkpoint_timestamp`` from the source). Executors write each task's rows of one epoch in
one Kafka transaction with transactional.id ``<prefix>-b<batch>-p<task>-e<epoch>``, so a retried
task or a replayed batch fences its earlier attempt. The driver commits the transactions when the
epoch's checkpoint completes.
"""

from __future__ import annotations

import logging
from typing import Dict, Optional

from barrier_sink.committer import SinkCommitter
from barrier_sink.exceptions import InvalidOptionError
from barrier_sink.options import KafkaSinkOptions
from barrier_sink.transaction import (EndResult, TransactionalWriter, TransactionHandle,
                                      abort_handle, commit_handle)
from barrier_sink.two_phase_commit import TwoPhaseCommitWriter
from barrier_sink.exceptions import TransactionCommitError

logger = logging.getLogger(__name__)

def _bytes(value) -> Optional[bytes]:
    if value is None or isinstance(value, (bytes, bytearray)):
        return value
    return str(value).encode("utf-8")


def validate_schema(schema, opts: KafkaSinkOptions) -> None:
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

    def __init__(self, backend, coordinator_factory, opts: KafkaSinkOptions) -> None:
        super().__init__(backend, coordinator_factory)
        self.opts = opts

    def handle_id(self, handle: dict) -> str:
        return handle["transactional_id"]

    def commit_handle(self, handle: dict) -> None:
        h = TransactionHandle.from_json(handle)
        result = commit_handle(self.opts.kafka, h, self.opts.transaction_timeout_ms)
        if result is EndResult.FENCED:
            raise TransactionCommitError(
                f"{h.transactional_id}: pre-committed transaction (producer {h.producer_id} "
                f"epoch {h.producer_epoch}) was fenced before its checkpoint committed it; its "
                f"{h.records} records are lost. Another query may share transactionalIdPrefix "
                f"'{self.opts.transactional_id_prefix}'.")

    def abort_handle(self, handle: dict) -> None:
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

    # executor -------------------------------------------------------------
    def begin_transaction(self, batch_id, partition_id, checkpoint_id):
        tid = self.opts.transactional_id(batch_id, partition_id, checkpoint_id)
        return TransactionalWriter(self.opts.kafka, tid, self.opts.transaction_timeout_ms,
                                   batch_id, partition_id, checkpoint_id).open()

    def invoke(self, txn: TransactionalWriter, row) -> None:
        topic = self.opts.topic or row["topic"]
        if topic is None:
            raise ValueError("record row without a topic and no 'topic' option")
        headers = None
        if self._has["headers"] and row["headers"]:
            headers = [(h["key"], _bytes(h["value"])) for h in row["headers"]]
        txn.send(topic, value=_bytes(row["value"]),
                 key=_bytes(row["key"]) if self._has["key"] else None, headers=headers,
                 partition=(row["partition"] if self._has["partition"] and not self.opts.topic
                            else None))

    def pre_commit(self, txn: TransactionalWriter):
        handle = txn.pre_commit()
        txn.close_without_finishing()
        return handle.to_json()

    def abort_open(self, txn: TransactionalWriter) -> None:
        txn.abort()

    # driver ---------------------------------------------------------------
    def committer(self) -> KafkaSinkCommitter:
        from barrier_sink.checkpointing import coordinator_factory

        backend = self.opts.checkpoint.open_backend()
        return KafkaSinkCommitter(backend, coordinator_factory(backend, self.opts.checkpoint),
                                  self.opts)

    def preflight(self) -> None:
        """Refuse a ``kafka.transaction.timeout.ms`` above the brokers' maximum (driver, once)."""
        from barrier_sink.transaction import broker_max_transaction_timeout_ms

        self.opts.check_transaction_timeout(broker_max_transaction_timeout_ms(self.opts.kafka))

    def storage_uri(self) -> str:
        return self.opts.checkpoint.storage_uri

    def checkpoint_location(self) -> str:
        return self.opts.checkpoint.checkpoint_location

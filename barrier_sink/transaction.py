"""Kafka transactions that are begun on an executor and finished on the driver.

Executors (``TransactionalWriter``) write an epoch's rows into a Kafka transaction and flush it:
that is the pre-commit. The transaction's identity (``TransactionHandle``: transactional.id,
producer id, producer epoch) travels to the driver in the task's commit message. The driver
finishes it later (``commit_handle`` / ``abort_handle``) by resuming the transaction from its
handle, as Flink's KafkaSink does: the transaction coordinator only checks transactional.id,
producer id and epoch, not which process sends EndTxn.

Guarantees
----------
1. Committing a handle whose transaction is already committed succeeds (the broker answers a
   retried EndTxn of the same producer epoch with success), so driver commits are idempotent.
2. A handle fenced by a newer producer with the same transactional.id (a task retry or a replayed
   batch) can no longer commit: ``commit_handle`` reports ``FENCED``, never writes twice.
3. ``fence_and_abort`` aborts whatever transaction a transactional.id has open, whoever opened it.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional

from barrier_core.exceptions import BrokerUnreachableError
from barrier_core.kafka_clients import kafka_client
from barrier_sink import kip939, producer_reuse
from barrier_sink.committer import SinkCommitter
from barrier_sink.exceptions import RecordsNotWrittenError
from barrier_sink.producer_flush import flush_through_splits
from barrier_sink.producer_reuse import discard as _close_quietly

if TYPE_CHECKING:  # imported where a writer opens: numpy is for the executors only
    from barrier_sink.record_appender import RecordAppender

logger = logging.getLogger(__name__)


class EndResult(enum.Enum):
    """Outcome of finishing a resumed transaction (expected outcomes are values, not errors)."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    FENCED = "fenced"  # a newer producer epoch owns the transactional.id now


@dataclass(frozen=True)
class TransactionHandle:
    """Identity of one pre-committed Kafka transaction. Picklable, JSON-able.

    ``checkpoint_id`` is the epoch of the rows it holds (None when the rows carried no epoch: it
    then belongs to the first checkpoint completing at or after ``batch_id``).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    batch_id: int
    partition_id: int
    checkpoint_id: Optional[int]
    records: int
    partitions: List[List] = field(default_factory=list)  # [[topic, partition], ...]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "TransactionHandle":
        return cls(**d)


#: Default ``retry_backoff_ms`` of the sink's transactional producers (see ``producer_config``).
SINK_RETRY_BACKOFF_MS = 10


def producer_config(kafka_config: Dict[str, object], transactional_id: str,
                    transaction_timeout_ms: int) -> Dict[str, object]:
    from barrier_core.kafka_config import client_config

    conf = client_config(kafka_config, "producer")
    # kafka-python waits a full retry backoff around its first coordinator lookup: with the
    # 100 ms default every init_transactions and every driver-side commit took ~210 ms; with
    # 10 ms they take ~25 ms (benchmarks/bench_commit.py). kafka.retry.backoff.ms overrides it.
    conf.setdefault("retry_backoff_ms", SINK_RETRY_BACKOFF_MS)
    conf.update(transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms,
                enable_idempotence=True, acks="all")
    return conf


def broker_max_transaction_timeout_ms(kafka_config: Dict[str, object]) -> Optional[int]:
    """The smallest ``transaction.max.timeout.ms`` of the cluster's brokers (driver), or None
    if the brokers do not say (e.g. no DescribeConfigs permission): the check is then skipped
    with a warning, and the broker refuses a too-long timeout when the first task starts."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from barrier_core.kafka_config import client_config

    admin = None
    try:
        admin = kafka_client(KafkaAdminClient, client_config(kafka_config, "admin"), "sink")
        brokers = [str(b["broker_id"]) for b in admin.describe_cluster()["brokers"]]
        found = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, b, configs=["transaction.max.timeout.ms"])
             for b in brokers], config_filter="all")
        values = [int(entry["transaction.max.timeout.ms"]["value"])
                  for entry in found.get("broker", {}).values()
                  if "transaction.max.timeout.ms" in entry]
        return min(values) if values else None
    except BrokerUnreachableError:
        raise
    except Exception as exc:  # noqa: BLE001 - a missing permission must not stop the query
        logger.warning("could not read the brokers' transaction.max.timeout.ms (%s); the "
                       "transaction timeout is checked by the broker when tasks start",
                       type(exc).__name__)
        return None
    finally:
        if admin is not None:
            admin.close()


def check_two_phase_commit(kafka_config: Dict[str, object], transactional_id: str,
                           timeout_ms: int) -> None:
    """Refuse to start when the brokers do not allow KIP-939 transactions (driver planner
    worker, once at start): initialises ``transactional_id``, an id of its own that never
    holds a transaction, the way every sink task will. Raises
    ``TwoPhaseCommitUnavailableError`` naming the missing broker setting."""
    from kafka import KafkaProducer

    producer = kafka_client(KafkaProducer,
                            producer_config(kafka_config, transactional_id, timeout_ms), "sink")
    try:
        kip939.init_transactions(producer, two_phase=True)
    finally:
        _close_quietly(producer)


class TransactionalWriter:
    """Writes one epoch's rows of one task into one Kafka transaction (runs on an executor).

    1. ``open()``: ``init_transactions`` (fences any earlier producer with the same id, i.e. a
       failed attempt of this task, and aborts its open transaction), then ``begin_transaction``.
       With ``two_phase`` the id is initialised for KIP-939 transactions, which the broker never
       aborts on a timeout (:mod:`barrier_sink.kip939`).
    2. ``send()`` rows (:class:`~barrier_sink.record_appender.RecordAppender`).
    3. ``pre_commit()``: flush and return the handle; the transaction stays open, uncommitted.
    4. ``close_without_finishing()``: park the producer for the worker's next transaction.
    """

    def __init__(self, kafka_config: Dict[str, object], transactional_id: str,
                 transaction_timeout_ms: int, batch_id: int, partition_id: int,
                 checkpoint_id: Optional[int], two_phase: bool = False) -> None:
        self._conf = producer_config(kafka_config, transactional_id, transaction_timeout_ms)
        self._two_phase = two_phase
        self.transactional_id = transactional_id
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.checkpoint_id = checkpoint_id
        self._producer = None
        self._records = 0
        self._failures: List[BaseException] = []  # appended by the producer's I/O thread
        self._appender: Optional["RecordAppender"] = None

    def open(self) -> "TransactionalWriter":
        self._producer = producer_reuse.acquire(self._conf)
        try:
            kip939.init_transactions(self._producer, self._two_phase)
        except Exception:
            _close_quietly(self._producer)
            self._producer = None
            raise
        self._producer.begin_transaction()
        # Here, not at module level: the driver's sink workers load this module to recover and
        # commit, and the appender's numpy costs each of them about 55 ms to import.
        from barrier_sink.record_appender import RecordAppender

        self._appender = RecordAppender(self._producer, self._failures.append)
        return self

    def send(self, topic: str, value, key=None, headers=None, partition=None) -> None:
        try:
            self._appender.append(topic, value, key, headers, partition)
        except Exception as exc:  # kafka-python refuses sends after a refused batch
            self._raise_if_refused(exc)
            raise
        self._records += 1

    def send_columns(self, topic: str, keys, values, partitions=None) -> bool:
        """Send a run of records given as Arrow binary arrays in whole record batches; False
        (nothing sent) where the run needs ``send()`` row by row
        (:meth:`~barrier_sink.record_appender.RecordAppender.append_columns`)."""
        try:
            sent = self._appender.append_columns(topic, keys, values, partitions)
        except Exception as exc:
            self._raise_if_refused(exc)
            raise
        if sent:
            self._records += len(values)
        return sent

    def _raise_if_refused(self, cause: Optional[BaseException] = None) -> None:
        """Raise ``RecordsNotWrittenError`` if Kafka refused a record of this transaction."""
        tm = self._producer._transaction_manager
        failure = self._failures[0] if self._failures else (
            tm.last_error if tm.has_error() else None)
        if failure is not None:
            raise RecordsNotWrittenError(refused_records_message(
                self.transactional_id, len(self._failures), self._records, failure)) from cause

    def pre_commit(self) -> TransactionHandle:
        """Flush every record; the transaction stays open. Returns its handle.

        Raises ``RecordsNotWrittenError`` (after aborting the transaction) unless Kafka
        acknowledged every record sent: a transaction with a refused record must never reach
        the driver's commit, which would make the other records visible and lose that one."""
        try:
            self._flush()
            self._raise_if_refused()
        except BaseException:
            try:
                self.abort()
            except Exception:  # noqa: BLE001 - the refusal is the error to report
                logger.warning("%s: abort after a failed pre-commit failed",
                               self.transactional_id, exc_info=True)
            raise
        tm = self._producer._transaction_manager
        pid_epoch = tm.producer_id_and_epoch
        parts = sorted([tp.topic, tp.partition] for tp in tm._partitions_in_transaction)
        handle = TransactionHandle(self.transactional_id, pid_epoch.producer_id,
                                   pid_epoch.epoch, self.batch_id, self.partition_id,
                                   self.checkpoint_id, self._records, parts)
        logger.debug("%s: pre-committed %d records (producer %d epoch %d)",
                     self.transactional_id, self._records, pid_epoch.producer_id,
                     pid_epoch.epoch)
        return handle

    def _flush(self) -> None:
        """Every record acknowledged or failed, batches the broker split included."""
        flush_through_splits(self._producer, self.transactional_id)

    def close_without_finishing(self) -> None:
        """Leaves the flushed transaction open for the driver to finish; the producer is parked
        for this worker's next transaction (:mod:`barrier_sink.producer_reuse`)."""
        if self._producer is not None:
            producer_reuse.release(self._producer, self._conf)
            self._producer = None

    def abort(self) -> None:
        if self._producer is not None:
            try:
                self._producer.abort_transaction()
            finally:
                _close_quietly(self._producer)
                self._producer = None


#: What to do about records Kafka refused, by the kafka-python error's class name.
_REFUSAL_FIXES = {
    "MessageSizeTooLargeError": "a record is larger than the topic's max.message.bytes (or "
                                "the brokers' message.max.bytes): raise that limit for the "
                                "topic or write smaller records",
    "RecordTooLargeError": "a record is larger than the topic's max.message.bytes: raise it "
                           "for the topic or write smaller records",
    "TopicAuthorizationFailedError": "the sink's principal may not write to the topic: grant "
                                     "it WRITE on the topic (kafka-acls --add --operation "
                                     "Write --topic <topic>)",
    "KafkaTimeoutError": "the brokers did not acknowledge the records within "
                        "kafka.delivery.timeout.ms: check that the partitions' leaders are "
                        "up, or raise kafka.delivery.timeout.ms",
}


def refused_records_message(transactional_id: str, refused: int, sent: int,
                            failure: BaseException) -> str:
    """The error for a transaction some of whose records Kafka refused (executor)."""
    name = type(failure).__name__
    fix = _REFUSAL_FIXES.get(name, "see the Kafka error; fix its cause")
    detail = str(failure) if name in str(failure) else f"{name}: {failure}"
    return (f"Kafka refused {refused or 'some'} of the {sent} records of transaction "
            f"{transactional_id} ({detail}). The transaction was aborted and the task "
            f"fails, so none of its records is committed and none is lost: {fix}, then restart "
            f"the query (it resumes from its last checkpoint).")


#: Resumed producers the driver keeps parked per client configuration: one per concurrent
#: commit.
DRIVER_PARKED = SinkCommitter.COMMIT_PARALLELISM


def _resume(conf: Dict[str, object], handle: TransactionHandle):
    """A producer that continues ``handle``'s transaction (Flink's resumeTransaction): a parked
    one of this process retargeted to the id, else a new one (:mod:`producer_reuse`)."""
    from kafka.producer.transaction_manager import ProducerIdAndEpoch, TransactionState

    producer = producer_reuse.acquire(conf, "sink (driver)")
    tm = producer._transaction_manager
    with tm._lock:
        tm.set_producer_id_and_epoch(ProducerIdAndEpoch(handle.producer_id, handle.producer_epoch))
        tm._current_state = TransactionState.IN_TRANSACTION
        tm._transaction_started = True
    return producer


def _end(kafka_config: Dict[str, object], handle: TransactionHandle, commit: bool,
         timeout_ms: int) -> EndResult:
    from kafka import errors as Errors

    conf = producer_config(kafka_config, handle.transactional_id, timeout_ms)
    producer = _resume(conf, handle)
    finished = False
    try:
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
        finished = True
    except (Errors.ProducerFencedError, Errors.InvalidProducerEpochError) as exc:
        logger.warning("%s: producer %d epoch %d fenced (%s); nothing to %s",
                       handle.transactional_id, handle.producer_id, handle.producer_epoch,
                       exc.__class__.__name__, "commit" if commit else "abort")
        return EndResult.FENCED
    except Errors.InvalidTxnStateError:
        # The transaction ended the other way (e.g. aborted by its timeout) or a newer one
        # started; an abort of a finished transaction is a no-op, a commit is a failure.
        if not commit:
            return EndResult.ABORTED
        raise
    finally:
        if finished:  # its EndTxn answered: nothing in flight, nothing carried over
            producer_reuse.release(producer, conf, DRIVER_PARKED, "sink (driver)")
        else:
            _close_quietly(producer)
    return EndResult.COMMITTED if commit else EndResult.ABORTED


def commit_handle(kafka_config: Dict[str, object], handle: TransactionHandle,
                  timeout_ms: int = 60000) -> EndResult:
    """Commit a pre-committed transaction from the driver. Idempotent (guarantee 1)."""
    result = _end(kafka_config, handle, True, timeout_ms)
    logger.debug("%s: commit -> %s", handle.transactional_id, result.value)
    return result


def abort_handle(kafka_config: Dict[str, object], handle: TransactionHandle,
                 timeout_ms: int = 60000) -> EndResult:
    """Abort a pre-committed transaction from the driver. Idempotent."""
    return _end(kafka_config, handle, False, timeout_ms)


def fence_and_abort(kafka_config: Dict[str, object], transactional_id: str,
                    timeout_ms: int = 60000) -> None:
    """Abort whatever transaction ``transactional_id`` has open by initialising a new producer
    epoch for it (the coordinator aborts the old epoch's transaction)."""
    from kafka import KafkaProducer

    producer = kafka_client(KafkaProducer,
                            producer_config(kafka_config, transactional_id, timeout_ms), "sink")
    try:
        producer.init_transactions()
    finally:
        _close_quietly(producer)


def handles_by_transactional_id(handles: Iterable[TransactionHandle]) -> Dict[str, TransactionHandle]:
    return {h.transactional_id: h for h in handles}

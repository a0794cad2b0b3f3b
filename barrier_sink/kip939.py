"""KIP-939 transactions: Kafka transactions the broker never aborts on a timeout.

With the sink option ``kafka.transaction.two.phase.commit.enable`` (the Java client's setting of
that name, ``true``), every transactional producer of the Kafka sink initialises its
transactional.id with ``InitProducerId`` version 6 and ``Enable2Pc``. The transaction
coordinator then gives the id's transactions no timeout: a pre-committed transaction stays open
until the driver commits or aborts it, however long the query is down. Without it Kafka aborts a
pre-committed transaction once ``transaction.timeout.ms`` passes, and a query that stays down
longer loses that checkpoint's output.

Nothing else changes: the driver still finishes a handle by resuming its producer id and epoch
(``EndTxn``), and a plain ``InitProducerId`` (``fence_and_abort``) still aborts a leftover.

Broker side (checked once at start by :func:`barrier_sink.transaction.check_two_phase_commit`):

* ``InitProducerId`` v6, which Kafka 4.1 to 4.4 brokers mark unstable: they offer it only with
  ``unstable.api.versions.enable=true``;
* ``transaction.two.phase.commit.enable=true`` on every broker (else the broker answers
  ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``);
* with an authorizer, the ``TWO_PHASE_COMMIT`` operation on the sink's transactional ids.

Runs on the executors (``TransactionalWriter.open``) and on the driver planner worker (the start
check). Relies on kafka-python's transaction manager internals, as ``_resume`` does.
"""

from __future__ import annotations

import logging

from barrier_sink.exceptions import TwoPhaseCommitUnavailableError

logger = logging.getLogger(__name__)

#: The sink option (the Java producer's setting, with Spark's ``kafka.`` prefix).
OPTION = "kafka.transaction.two.phase.commit.enable"

#: ``InitProducerId`` version that carries ``Enable2Pc`` (KIP-939).
TWO_PHASE_INIT_VERSION = 6


def _no_v6_message(transactional_id: str) -> str:
    return (f"Option '{OPTION}' is true, but the brokers do not offer InitProducerId version "
            f"{TWO_PHASE_INIT_VERSION} (KIP-939), so '{transactional_id}' cannot start a "
            "transaction that never times out. Kafka 4.1 to 4.4 brokers offer it only with "
            "unstable.api.versions.enable=true (and transaction.two.phase.commit.enable=true); "
            "older brokers not at all. Enable both on every broker, or set the option to false "
            "and size kafka.transaction.timeout.ms for the longest outage.")


def _refused_message(transactional_id: str) -> str:
    return (f"Option '{OPTION}' is true, but the brokers refused a two-phase-commit transaction "
            f"for '{transactional_id}' (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): set "
            "transaction.two.phase.commit.enable=true on every broker and, with an authorizer, "
            "grant the TWO_PHASE_COMMIT operation on the sink's transactional ids "
            "(transactionalIdPrefix). Or set the option to false and size "
            "kafka.transaction.timeout.ms for the longest outage.")


def _handler_class():
    """A kafka-python ``InitProducerIdHandler`` whose request is version 6 with ``Enable2Pc``
    (built lazily: kafka-python is imported only where a producer is made)."""
    from kafka.producer.transaction_manager import InitProducerIdHandler
    from kafka.protocol.producer.transaction import InitProducerIdRequest

    class TwoPhaseInitHandler(InitProducerIdHandler):
        def __init__(self, transaction_manager, transaction_timeout_ms):
            super().__init__(transaction_manager, transaction_timeout_ms)
            self.request = InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                producer_id=-1, producer_epoch=-1,
                enable2_pc=True, keep_prepared_txn=False,
                min_version=TWO_PHASE_INIT_VERSION, max_version=TWO_PHASE_INIT_VERSION)

    return TwoPhaseInitHandler


def init_transactions(producer, two_phase: bool) -> None:
    """``producer.init_transactions()``; with ``two_phase`` through ``InitProducerId`` v6 with
    ``Enable2Pc`` (aborting, like the plain call, whatever the id had open). Raises
    :class:`TwoPhaseCommitUnavailableError` when the brokers refuse it."""
    if not two_phase:
        producer.init_transactions()
        return
    from kafka import errors as Errors
    from kafka.producer.transaction_manager import ProducerIdAndEpoch, TransactionState

    tm = producer._transaction_manager
    with tm._lock:
        tm._ensure_transactional()
        tm._transition_to(TransactionState.INITIALIZING)
        tm.set_producer_id_and_epoch(ProducerIdAndEpoch(-1, -1))
        tm._sequence_numbers.clear()
        handler = _handler_class()(tm, tm.transaction_timeout_ms)
        tm._enqueue_request(handler)
    producer._init_transactions_result = handler.result
    producer._sender.wakeup()
    try:
        producer.init_transactions()  # waits for the enqueued v6 request
    except Errors.IncompatibleBrokerVersion as exc:
        raise TwoPhaseCommitUnavailableError(_no_v6_message(tm.transactional_id)) from exc
    except Errors.TransactionalIdAuthorizationFailedError as exc:
        raise TwoPhaseCommitUnavailableError(_refused_message(tm.transactional_id)) from exc
    logger.debug("%s: initialised for two-phase commit (KIP-939), producer %s",
                 tm.transactional_id, tm.producer_id_and_epoch)

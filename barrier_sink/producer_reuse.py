"""Transactional producers kept by an executor's Python worker across batches (issue 13).

Runs on the executors. A Spark Python worker runs one task at a time and outlives it
(``spark.python.worker.reuse``, on by default), so the sink's producers need not be rebuilt for
every transaction: a producer whose transaction is pre-committed is parked here, and the next
transaction of the worker, whatever its transactional.id, takes it over. Reuse keeps only the
connections, the cluster metadata and the I/O thread. The producer gets a new transaction
manager for the new id, so it initialises its id (``InitProducerId``: fencing older producers
and aborting what the id had open) exactly as a new producer would, and no transactional state
of the previous transaction carries over.

Guarantees
----------
* A parked producer has nothing in flight: it is parked only after its records were flushed.
* A producer that failed, aborted or was closed is never parked (``discard``).
* At most :data:`MAX_IDLE` producers per distinct client configuration stay parked; the others are
  closed, so a worker holds a bounded number of connections however many ids it sees.

Relies on kafka-python's producer internals (its transaction manager is shared by the producer,
its record accumulator and its sender thread), as :func:`barrier_sink.transaction._resume` does.
"""

from __future__ import annotations

import logging
import threading
from typing import Dict, List, Mapping, Optional, Tuple

from barrier_core.kafka_clients import kafka_client

logger = logging.getLogger(__name__)

#: Producers parked per client configuration (one task runs at a time in a Python worker).
MAX_IDLE = 2

_PER_TRANSACTION = ("transactional_id", "transaction_timeout_ms")
_lock = threading.Lock()
_idle: Dict[Tuple, List[object]] = {}
_counts = {"created": 0, "reused": 0}


def _key(conf: Mapping[str, object], role: str) -> Tuple:
    """The pool of ``role``'s producers with the client configuration without the
    per-transaction settings (kept in memory only: it may hold credentials). Executor writers
    and driver commits keep separate pools even when they share a Python worker."""
    return (role,) + tuple(sorted((k, repr(v)) for k, v in conf.items()
                                  if k not in _PER_TRANSACTION))


def _usable(producer) -> bool:
    return not getattr(producer, "_closed", True) and producer._sender.is_alive()


def _retarget(producer, conf: Mapping[str, object]) -> None:
    """Give ``producer`` a fresh transaction manager for ``conf``'s transactional.id."""
    from kafka.producer.transaction_manager import TransactionManager

    previous = producer._transaction_manager
    tm = TransactionManager(transactional_id=conf["transactional_id"],
                            transaction_timeout_ms=conf["transaction_timeout_ms"],
                            retry_backoff_ms=producer.config["retry_backoff_ms"],
                            api_version=producer.config["api_version"],
                            metadata=producer._metadata)
    tm._transaction_coordinator = _coordinator_guess(producer, previous)
    for holder in (producer, producer._accumulator, producer._sender):
        holder._transaction_manager = tm
    for config in (producer.config, producer._accumulator.config, producer._sender.config):
        config["transaction_manager"] = tm
        config["transactional_id"] = conf["transactional_id"]
        config["transaction_timeout_ms"] = conf["transaction_timeout_ms"]
    producer._init_transactions_result = None


def _coordinator_guess(producer, previous):
    """The previous id's transaction coordinator as the new id's first guess, if that broker is
    in the cluster and connected (on small clusters one broker coordinates most ids): the
    ``InitProducerId`` goes straight to it instead of after a ``FindCoordinator`` and a retry
    backoff (25 -> 4 ms per transaction, ``benchmarks/bench_producer_reuse.py``). A wrong guess
    is answered NOT_COORDINATOR, and the manager looks the coordinator up as it does without
    one. A broker that left, or whose connection dropped, is never guessed: the sender would
    wait for it."""
    node = getattr(previous, "_transaction_coordinator", None)
    if node is None or producer._metadata.broker_metadata(node) is None:
        return None
    return node if producer._sender._client.is_ready(node) else None


def acquire(conf: Mapping[str, object], role: str = "sink (executor)"):
    """A transactional producer for ``conf`` (kafka-python settings with ``transactional_id``),
    not yet initialised: a parked one retargeted to the id, else a new one."""
    from kafka import KafkaProducer

    key = _key(conf, role)
    while True:
        with _lock:
            parked = _idle.get(key)
            producer = parked.pop() if parked else None
        if producer is None:
            created = kafka_client(KafkaProducer, dict(conf), role)
            _counts["created"] += 1
            return created
        if _usable(producer):
            _retarget(producer, conf)
            _counts["reused"] += 1
            logger.debug("reusing a parked producer for %s", conf["transactional_id"])
            return producer
        discard(producer)


def release(producer, conf: Mapping[str, object], max_idle: Optional[int] = None,
            role: str = "sink (executor)") -> None:
    """Park ``producer`` (its records flushed, its transaction pre-committed, or its EndTxn
    answered) for the process's next transaction, or close it when ``max_idle`` (default
    :data:`MAX_IDLE`) are parked for its configuration."""
    if not _usable(producer):
        return
    with _lock:
        parked = _idle.setdefault(_key(conf, role), [])
        if len(parked) < (MAX_IDLE if max_idle is None else max_idle):
            parked.append(producer)
            return
    discard(producer)


def discard(producer) -> None:
    """Close ``producer`` for good (never masks the caller's own outcome)."""
    try:
        producer.close(timeout=5)
    except Exception:  # noqa: BLE001 - closing must never mask the real outcome
        logger.debug("producer close failed", exc_info=True)


def counts() -> Dict[str, int]:
    """Producers this process created and reused so far (the sink's task timings report the
    difference per task)."""
    return dict(_counts)


def parked_count() -> int:
    """Producers parked in this process (tests, diagnostics)."""
    with _lock:
        return sum(len(v) for v in _idle.values())

"""Find and abort lingering transactions: ``Ongoing`` transactions whose transactional.id a sink
with a given ``transactionalIdPrefix`` made (``<prefix>-r<run>-p<task>-a<attempt>-s<slot>``, or
``<prefix>-b<batch>-p<task>-a<attempt>-e<epoch>``; another query's longer prefix such as
``<prefix>-eu`` is never matched). A lingering transaction pins the last stable offset, so
``read_committed`` consumers of its partitions stop advancing until it ends (Flink's most
reported pain).

Runs on the driver or from the command line::

    python -m barrier_sink lingering --bootstrap host:9092 --prefix my-sink [--abort]
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from barrier_sink.options import is_sink_transactional_id
from barrier_sink.transaction import fence_and_abort
from barrier_core.kafka_clients import kafka_client

logger = logging.getLogger(__name__)

#: The one state of a transaction that waits for a client to end it. A transaction whose EndTxn
#: returned is decided and listed as ``PrepareCommit`` / ``PrepareAbort`` (``PrepareEpochFence``:
#: a fence on its way to an abort) until the coordinator has written its markers, then as
#: ``Complete*``: it ends on its own, and fencing it only waits for that end. Counting those as
#: lingering made the driver's sweep, which runs right after a checkpoint's commits, fence the
#: transactions it had just committed.
_UNDECIDED = "Ongoing"


@dataclass(frozen=True)
class LingeringTransaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    age_ms: Optional[int]
    partitions: List[str]


def _admin(kafka_config: Dict[str, object]):
    from kafka.admin import KafkaAdminClient

    from barrier_core.kafka_config import client_config

    return kafka_client(KafkaAdminClient, client_config(kafka_config, "admin"), "sink")


#: The admin client kept for this process's next sweep, by its configuration (one at most).
_kept: Dict[Tuple, Any] = {}
_kept_lock = threading.Lock()


def _config_key(kafka_config: Dict[str, object]) -> Tuple:
    """A key for clients of the same configuration (held in memory only, never logged: it holds
    the configuration's secrets)."""
    return tuple(sorted((str(k), repr(v)) for k, v in kafka_config.items()))


def list_lingering(kafka_config: Dict[str, object], prefix: str,
                   reuse_client: bool = False) -> List[LingeringTransaction]:
    """Open transactions of the sink whose transactional-id prefix is ``prefix`` (sorted by id):
    ``Ongoing`` ones, which wait for a client. A transaction whose commit or abort returned is
    not listed, though brokers show it as ``PrepareCommit`` / ``PrepareAbort`` until its markers
    are written: it ends on its own.

    ``reuse_client``: keep the admin client for this process's next call with the same
    configuration, and use the one kept by the previous call. The driver commit worker sweeps
    after every batch, and a new client costs a bootstrap connection and a metadata round trip
    (about 4 ms a batch on a local broker). A kept client that fails is closed and the listing
    tried once more with a new one, so a broker restart costs one retry, not a failed commit."""
    if not reuse_client:
        admin = _admin(kafka_config)
        try:
            return _list(admin, prefix)
        finally:
            admin.close()
    key = _config_key(kafka_config)
    with _kept_lock:
        admin = _kept.pop(key, None)
    kept = admin is not None
    if not kept:
        admin = _admin(kafka_config)
    try:
        found = _list(admin, prefix)
    except Exception as exc:  # noqa: BLE001 - any failure of a kept client: start afresh
        _close_quietly(admin)
        if not kept:
            raise
        logger.info("sweep of %s: the kept admin client failed (%s); retrying with a new one",
                    prefix, type(exc).__name__)
        return list_lingering(kafka_config, prefix, reuse_client=True)
    # one kept client a process (its sink's): a client of a broker gone for good would go on
    # retrying in the background
    with _kept_lock:
        others = list(_kept.values())
        _kept.clear()
        _kept[key] = admin
    for other in others:
        _close_quietly(other)
    return found


def _close_quietly(admin) -> None:
    try:
        admin.close()
    except Exception:  # noqa: BLE001 - closing a broken client
        pass


def _list(admin, prefix: str) -> List[LingeringTransaction]:
    # the brokers filter by state: the other rows are every transactional.id their
    # coordinators still keep, of every producer of the cluster, for days
    listing = admin.list_transactions(state_filters=[_UNDECIDED])
    ids = sorted({t.transactional_id for rows in listing.values() for t in rows
                  if is_sink_transactional_id(prefix, t.transactional_id)
                  and str(getattr(t.state, "value", t.state)) == _UNDECIDED})
    if not ids:
        return []
    now_ms = int(time.time() * 1000)
    out = []
    for tid, desc in _describe(admin, ids).items():
        state = str(getattr(desc.state, "value", desc.state))
        if state != _UNDECIDED:  # decided between the listing and the description
            continue
        start = getattr(desc, "transaction_start_time_ms", -1)
        parts = [f"{tp.topic}-{tp.partition}" if hasattr(tp, "topic") else str(tp)
                 for tp in (getattr(desc, "topic_partitions", None) or [])]
        out.append(LingeringTransaction(tid, desc.producer_id, desc.producer_epoch, state,
                                        now_ms - start if start and start > 0 else None,
                                        sorted(parts)))
    return sorted(out, key=lambda t: t.transactional_id)


def _describe(admin, ids: List[str]) -> Dict[str, object]:
    result = admin.describe_transactions(ids)
    if isinstance(result, dict):
        return result
    return {d.transactional_id: d for d in result}


def abort_lingering(kafka_config: Dict[str, object], prefix: str,
                    keep: Optional[set] = None) -> List[str]:
    """Abort every open transaction with ``prefix`` except ids in ``keep``; returns aborted ids.

    Aborting fences the transactional.id (a new producer epoch), so a zombie task still holding
    it can no longer write.
    """
    keep = keep or set()
    aborted = []
    for txn in list_lingering(kafka_config, prefix):
        if txn.transactional_id in keep:
            continue
        logger.warning("%s: aborting lingering transaction (producer %d epoch %d, %s)",
                       txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.state)
        fence_and_abort(kafka_config, txn.transactional_id)
        aborted.append(txn.transactional_id)
    return aborted

"""Find and abort lingering transactions: open transactions whose transactional.id a sink with a
given ``transactionalIdPrefix`` made (``<prefix>-b<batch>-p<partition>-e<epoch>``; another
query's longer prefix such as ``<prefix>-eu`` is never matched). A lingering transaction pins the last stable offset, so ``read_committed``
consumers of its partitions stop advancing until it ends (Flink's most reported pain).

Runs on the driver or from the command line::

    python -m barrier_sink lingering --bootstrap host:9092 --prefix my-sink [--abort]
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

from barrier_sink.options import is_sink_transactional_id
from barrier_sink.transaction import fence_and_abort
from barrier_core.kafka_clients import kafka_client

logger = logging.getLogger(__name__)

_OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


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


def list_lingering(kafka_config: Dict[str, object], prefix: str) -> List[LingeringTransaction]:
    """Open transactions of the sink whose transactional-id prefix is ``prefix`` (sorted by id)."""
    admin = _admin(kafka_config)
    try:
        listing = admin.list_transactions()
        ids = sorted({t.transactional_id for rows in listing.values() for t in rows
                      if is_sink_transactional_id(prefix, t.transactional_id)
                      and str(getattr(t.state, "value", t.state)) in _OPEN_STATES})
        if not ids:
            return []
        now_ms = int(time.time() * 1000)
        out = []
        for tid, desc in _describe(admin, ids).items():
            state = str(getattr(desc.state, "value", desc.state))
            if state not in _OPEN_STATES:
                continue
            start = getattr(desc, "transaction_start_time_ms", -1)
            parts = [f"{tp.topic}-{tp.partition}" if hasattr(tp, "topic") else str(tp)
                     for tp in (getattr(desc, "topic_partitions", None) or [])]
            out.append(LingeringTransaction(tid, desc.producer_id, desc.producer_epoch, state,
                                            now_ms - start if start and start > 0 else None,
                                            sorted(parts)))
        return sorted(out, key=lambda t: t.transactional_id)
    finally:
        admin.close()


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

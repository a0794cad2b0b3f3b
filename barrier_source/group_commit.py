"""Commit a completed checkpoint's offsets to a Kafka consumer group (notifyCheckpointComplete).

Runs on the driver: in the source's ``commit``/``latestOffset`` (source-only pipelines) and in the
2PC sink's coordinator. Every commit is tagged with its checkpoint id in the offset metadata
(``{"barrier-kafka": 1, "checkpoint_id": n}``), which makes it

1. idempotent: committing checkpoint n twice (batch replay) changes nothing;
2. monotonic: a partition already carrying checkpoint m >= n is left alone, so a late or
   replayed commit never moves the group backwards.

The offsets come from the coordinator's hand-off file (:mod:`barrier_core.completed_offsets`)
or, in source-only pipelines, from the sealed checkpoint in Spark's offset log.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Dict, Mapping, Optional

from barrier_core.exceptions import BarrierKafkaError

logger = logging.getLogger(__name__)

_METADATA_TAG = "barrier-kafka"
_RETRIABLE = ("CoordinatorNotAvailable", "NotCoordinator", "CoordinatorLoadInProgress",
              "RequestTimedOut", "KafkaConnectionError", "NodeNotReady")


def _kafka_python_config(kafka_options: Mapping[str, Any]) -> Dict[str, Any]:
    """Accept Spark-style ``kafka.*`` options or kafka-python keyword arguments."""
    from barrier_core.kafka_config import client_config, translate_kafka_options

    if any(str(k).lower().startswith("kafka.") for k in kafka_options):
        kafka_options = translate_kafka_options(kafka_options)
    return client_config(kafka_options, "admin")


def _tag_of_metadata(metadata: Optional[str]) -> Optional[dict]:
    if not metadata:
        return None
    try:
        parsed = json.loads(metadata)
    except ValueError:
        return None
    if isinstance(parsed, dict) and parsed.get(_METADATA_TAG) == 1:
        return parsed
    return None


def checkpoint_of_metadata(metadata: Optional[str]) -> Optional[int]:
    """The checkpoint id barrier-kafka stored in a committed offset's metadata, if any."""
    tag = _tag_of_metadata(metadata)
    return None if tag is None else int(tag.get("checkpoint_id", 0))


def restored_from_of_metadata(metadata: Optional[str]) -> int:
    """The checkpoint the committing query was restored from (0: not restored)."""
    tag = _tag_of_metadata(metadata)
    return 0 if tag is None else int(tag.get("restored_from", 0))


def _retry(call, what: str, attempts: int = 20, backoff_s: float = 0.5):
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - kafka-python raises many error types
            if attempt + 1 == attempts or not any(r in type(exc).__name__ for r in _RETRIABLE):
                raise BarrierKafkaError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            time.sleep(backoff_s)
    raise AssertionError("unreachable")


def commit_group_offsets(kafka_options: Mapping[str, Any], group_id: str,
                         offsets: Mapping[str, Mapping[Any, int]],
                         checkpoint_id: Optional[int] = None, admin=None,
                         restored_from: int = 0) -> bool:
    """Commit ``offsets`` (``{"topic": {partition: next offset to read}}``) to ``group_id``.

    Parameters
    ----------
    kafka_options : mapping
        Spark-style options (``kafka.bootstrap.servers``, ``kafka.security.protocol`` ...) or
        kafka-python keyword arguments (``bootstrap_servers`` ...).
    group_id : str
        The consumer group; it must have no active members (barrier-kafka never joins it).
    offsets : mapping
        Offsets of the completed checkpoint: the barrier positions, i.e. the next record to read.
    checkpoint_id : int, optional
        Tags the commit; partitions already committed at this or a newer checkpoint are skipped.
    admin : KafkaAdminClient, optional
        Reuse a client (the caller owns it); otherwise one is created and closed here.
    restored_from : int
        The checkpoint or savepoint the query was restored from (0: none). Monotonicity holds
        within one restore lineage: a query restored from an older savepoint moves the group
        back to its own checkpoints instead of being held at the old query's newer ones.

    Returns
    -------
    bool
        True if anything was written, False if every partition was already at this checkpoint
        or newer.

    Raises
    ------
    BarrierKafkaError
        The broker rejected the commit (e.g. the group has active members).
    """
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    from barrier_core.faults import FaultPoint, fault_point

    fault_point(FaultPoint.BEFORE_OFFSET_COMMIT)
    wanted = {TopicPartition(t, int(p)): int(o) for t, parts in offsets.items()
              for p, o in parts.items()}
    if not wanted:
        return False
    own = admin is None
    if own:
        from kafka.admin import KafkaAdminClient
        from barrier_core.kafka_clients import kafka_client

        admin = kafka_client(KafkaAdminClient, _kafka_python_config(kafka_options),
                             "consumer-group commit")
    try:
        current = _retry(lambda: admin.list_group_offsets({group_id: list(wanted)}),
                         f"Reading offsets of consumer group '{group_id}'").get(group_id, {})
        tag = {_METADATA_TAG: 1, "checkpoint_id": checkpoint_id}
        if restored_from:
            tag["restored_from"] = int(restored_from)
        meta = json.dumps(tag)
        to_write = {}
        for tp, off in wanted.items():
            existing = current.get(tp)
            if checkpoint_id is not None and existing is not None:
                done = checkpoint_of_metadata(existing.metadata)
                same_lineage = restored_from_of_metadata(existing.metadata) == restored_from
                if done is not None and done >= checkpoint_id and same_lineage:
                    continue
            if existing is not None and existing.offset == off and checkpoint_id is None:
                continue
            to_write[tp] = OffsetAndMetadata(off, meta, -1)
        if not to_write:
            return False
        result = _retry(lambda: admin.alter_group_offsets(group_id, to_write),
                        f"Committing checkpoint {checkpoint_id} to consumer group '{group_id}'")
        failed = {f"{tp.topic}:{tp.partition}": err.__name__ for tp, err in result.items()
                  if err.__name__ != "NoError"}
        if failed:
            raise BarrierKafkaError(f"Committing checkpoint {checkpoint_id} to consumer group "
                                    f"'{group_id}' failed for {failed} (does the group have "
                                    "active members? barrier-kafka needs it to itself).")
        logger.info("group %s: committed checkpoint %s offsets for %d partitions", group_id,
                    checkpoint_id, len(to_write))
        return True
    finally:
        if own:
            admin.close()

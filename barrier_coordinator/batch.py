"""Folding one committed Spark batch into the coordinator (driver, inside ``writer.commit``).

The sink's commit messages carry three things (``docs/internals/protocol.md``):

* **barriers** that reached the sink: ``{"checkpoint_id", "channel": "topic:partition",
  "offset", "channels": [...], "timestamp"}``; behind an operator the channels are
  ``op:<id>:<k>`` and their offsets are operator sequences, not Kafka offsets;
* **acks** of operator key groups: JSON (string or dict) ``{"operator_id", "key_group",
  "num_key_groups", "checkpoint_id", "snapshot", "offsets", "metrics"}``;
* **handles**: the sink's pre-committed transactions, each with its epoch ``checkpoint_id``.

Source offsets of checkpoint n (metadata, consumer-group commit) = the Kafka offsets of the
acks' ``offsets`` and of barriers on Kafka channels; ``op:*`` topics are dropped.

Task ids: ``op:<operator_id>:kg:<k>`` for each key group and ``sink:<channel>`` for each
channel of the barrier (the sink acknowledges checkpoint n on a channel when barrier n of that
channel reached it), plus ``sink:barrier``, acknowledged with the first barrier of n at the sink,
so that a checkpoint whose sink barriers come in a later batch than its operator acks never
completes early. Expected tasks of checkpoint n = every key group of every operator in
``CoordinatorConfig.operators`` or seen acknowledging any checkpoint (remembered durably), plus
``sink:<c>`` for every channel ``c`` in barrier n's ``channels``.

``fold_batch`` steps (each idempotent, so a replayed batch changes nothing twice):

1. Parse; learn operators from acks.
2. Trigger (or re-trigger) every checkpoint the batch mentions, ascending.
3. Attach the batch's sink handles to their epochs.
4. Acknowledge: operator acks, then sink channels (a checkpoint completes on its last ack).
5. Return the checkpoint the caller must notify: the newest completed checkpoint that this
   batch completed, or that a previous attempt of this batch completed, or that is not yet
   marked committed; ``None`` if nothing is to be committed.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Set, Tuple

from barrier_core.ack import Acknowledgement
from barrier_core.barrier_message import SinkBarrier
from barrier_core.schema import split_channel
from barrier_coordinator.completed import CompletedCheckpoint
from barrier_coordinator.pending import TaskAcknowledgement
from state_backends.base import SnapshotHandle

logger = logging.getLogger(__name__)


#: Acknowledged when the first barrier of a checkpoint reaches the sink (its channel set is then
#: known): a checkpoint never completes on operator acks alone.
SINK_BARRIER_TASK = "sink:barrier"


def operator_task_id(operator_id: str, key_group: int) -> str:
    return f"op:{operator_id}:kg:{key_group}"


def sink_task_id(channel: str) -> str:
    return f"sink:{channel}"


def is_kafka_topic(topic: str) -> bool:
    """Operator output channels are ``op:<id>:<k>`` (``:`` is illegal in Kafka topic names):
    their offsets are operator sequences, never consumer-group offsets."""
    return bool(topic) and ":" not in topic


def kafka_offsets(offsets) -> Dict[str, Dict[str, int]]:
    return {t: dict(p) for t, p in (offsets or {}).items() if is_kafka_topic(str(t))}


def _channel_offsets(channel: str, offset) -> Dict[str, Dict[str, int]]:
    # Only source channels carry offsets to commit and restore from.
    topic, partition = split_channel(channel)
    if not is_kafka_topic(topic) or offset is None:
        return {}
    return {topic: {str(partition): int(offset)}}


def parse_ack(raw) -> Tuple[int, str, str, int, TaskAcknowledgement, Optional[int]]:
    """``(checkpoint_id, task_id, operator_id, num_key_groups, ack, checkpoint_timestamp)`` of
    one ack row (only Kafka offsets are kept)."""
    a = Acknowledgement.from_json(raw)
    snapshots = (SnapshotHandle.from_json(a.snapshot),) if a.snapshot else ()
    ack = TaskAcknowledgement(snapshots, kafka_offsets(a.offsets), a.metrics.reported())
    return (a.checkpoint_id, operator_task_id(a.operator_id, a.key_group), a.operator_id,
            a.num_key_groups, ack, a.checkpoint_timestamp)


def fold_batch(coordinator, batch_id: int, barriers: Iterable[dict], acks: Iterable,
               handles: Iterable[dict] = ()) -> Optional[CompletedCheckpoint]:
    """Fold batch ``batch_id`` into ``coordinator``; see the module docstring."""
    # Step 1. Parse.
    parsed = [parse_ack(a) for a in acks]
    channels: Dict[int, Set[str]] = defaultdict(set)
    arrived: Dict[int, List[SinkBarrier]] = defaultdict(list)
    timestamps: Dict[int, int] = {}
    for b in map(SinkBarrier.from_json, barriers):
        n = b.checkpoint_id
        channels[n].update(b.channels)
        arrived[n].append(b)
        if b.timestamp is not None:
            timestamps[n] = min(timestamps.get(n, b.timestamp), b.timestamp)
    for n, _t, _op, _nkg, _a, ts in parsed:
        if ts is not None and n not in timestamps:
            timestamps[n] = int(ts)
    by_epoch: Dict[int, List[dict]] = defaultdict(list)
    for h in handles:
        if h.get("checkpoint_id") is not None:
            by_epoch[int(h["checkpoint_id"])].append(h)
    mentioned = sorted(set(channels) | {n for n, *_ in parsed})
    before = coordinator.last_completed_id
    with coordinator.folding_batch(batch_id):
        for _n, _t, op, nkg, _a, _ts in parsed:
            coordinator.learn_operator(op, nkg)
        operators = coordinator.expected_operators
        # Expiry is checked on every batch, also one that mentions no checkpoint (Flink's
        # timeout timer fires whether data flows or not).
        coordinator.abort_expired_checkpoints()
        # Step 2. Trigger.
        expected_ops = {operator_task_id(op, k) for op, nkg in operators.items()
                        for k in range(nkg)}
        for n in mentioned:
            ts = timestamps.get(n)
            if ts is None:
                existing = coordinator.get_pending(n)
                ts = existing.timestamp_ms if existing else coordinator.clock.now_ms()
            expected = expected_ops | {SINK_BARRIER_TASK} | {
                sink_task_id(c) for c in channels.get(n, ())}
            coordinator.trigger(n, ts, expected)
        # Step 3. Sink handles.
        for n, hs in sorted(by_epoch.items()):
            coordinator.add_sink_transactions(n, hs)
        # Step 4. Acknowledge.
        for n, task, _op, _nkg, ack, _ts in parsed:
            coordinator.receive_acknowledge(n, task, ack)
        for n in sorted(arrived):
            coordinator.receive_acknowledge(n, SINK_BARRIER_TASK)
            for b in arrived[n]:
                ack = TaskAcknowledgement(offsets=_channel_offsets(b.channel, b.offset))
                coordinator.receive_acknowledge(n, sink_task_id(b.channel), ack)
        # A checkpoint whose last ack came in an earlier attempt whose finalisation raised
        # (a failed _metadata put): its acks are duplicates now, so complete it here.
        coordinator.complete_fully_acknowledged()
    # Step 5. What to notify.
    latest = coordinator.latest_completed()
    if latest is None:
        return None
    if (latest.checkpoint_id > before or latest.completion_batch == batch_id
            or latest.checkpoint_id > coordinator.last_committed_id):
        return latest
    return None

"""The source's end offset: JSON Spark stores verbatim in ``<checkpointLocation>/offsets/<N>``.

Pure data (runs anywhere). It carries the Kafka end offsets *and* the checkpoint decision, so a
replayed batch re-injects identical barriers at identical positions. Layout (key order is fixed
so identical states serialise to identical strings)::

    {"version": 1,
     "offsets": {"topic": {"0": 120, "1": 95}},        # exclusive end offset per partition
     "new_partitions": {"topic": {"2": 0}},            # start of partitions first seen here
     "checkpoint": {
        "next_id": 4,                                  # id the next triggered checkpoint gets
        "last_trigger_ms": 1700000000000,              # trigger time of checkpoint next_id-1
        "batches_since_trigger": 0,                    # batches planned since that trigger
        "barriers": [                                  # emitted in this batch or still owed
          {"id": 3, "timestamp": 1700000000000, "placement": "end",
           "channels": ["topic:0", "topic:1"],         # every channel delivering barrier 3
           "positions": {"topic:0": 120, "topic:1": 95},
           "emit": ["topic:0", "topic:1"],             # channels whose barrier is in THIS batch
           "owed": []}],                               # channels whose barrier comes later
        "sealed": {"id": 3, "timestamp": 1700000000000,  # newest checkpoint whose barriers
                   "offsets": {"topic": {"0": 120, "1": 95}}}}}  # are all emitted by now

See ``docs/internals/protocol.md`` ("Source end offset").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from barrier_core.exceptions import InvalidOptionError
from barrier_core.schema import channel_name, split_channel

OFFSET_VERSION = 1

PartitionOffsets = Dict[str, Dict[int, int]]  # topic -> partition -> offset


def sorted_channels(offsets: PartitionOffsets) -> List[str]:
    return [channel_name(t, p) for t in sorted(offsets) for p in sorted(offsets[t])]


def offsets_to_json(offsets: PartitionOffsets) -> Dict[str, Dict[str, int]]:
    """Spark's Kafka offset layout ``{"topic": {"0": n}}``, sorted for stable JSON."""
    return {t: {str(p): int(offsets[t][p]) for p in sorted(offsets[t])} for t in sorted(offsets)}


def offsets_from_json(raw: Any, what: str = "offset") -> PartitionOffsets:
    if not isinstance(raw, dict):
        raise InvalidOptionError(f"Malformed {what}: expected {{\"topic\": {{\"0\": n}}}}, "
                                 f"got {raw!r}.")
    try:
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (AttributeError, TypeError, ValueError):
        raise InvalidOptionError(f"Malformed {what}: {raw!r}.") from None


def offset_of(offsets: PartitionOffsets, channel: str) -> Optional[int]:
    topic, part = split_channel(channel)
    return offsets.get(topic, {}).get(part)


@dataclass(frozen=True)
class PlannedBarrier:
    """Barrier of checkpoint ``checkpoint_id`` as planned on the driver."""

    checkpoint_id: int
    timestamp_ms: int
    placement: str
    channels: Tuple[str, ...]
    positions: Dict[str, int]
    emit: Tuple[str, ...]
    owed: Tuple[str, ...]

    def to_json(self) -> dict:
        return {"id": self.checkpoint_id, "timestamp": self.timestamp_ms,
                "placement": self.placement, "channels": list(self.channels),
                "positions": {c: self.positions[c] for c in self.channels},
                "emit": list(self.emit), "owed": list(self.owed)}

    @classmethod
    def from_json(cls, d: dict) -> "PlannedBarrier":
        return cls(int(d["id"]), int(d["timestamp"]), d["placement"], tuple(d["channels"]),
                   {c: int(v) for c, v in d["positions"].items()}, tuple(d["emit"]),
                   tuple(d["owed"]))

    def sealed_offsets(self) -> PartitionOffsets:
        out: PartitionOffsets = {}
        for c in self.channels:
            topic, part = split_channel(c)
            out.setdefault(topic, {})[part] = self.positions[c]
        return out


@dataclass(frozen=True)
class SealedCheckpoint:
    """A checkpoint whose barriers have all been emitted; complete once that batch is durable."""

    checkpoint_id: int
    timestamp_ms: int
    offsets: PartitionOffsets

    def to_json(self) -> dict:
        return {"id": self.checkpoint_id, "timestamp": self.timestamp_ms,
                "offsets": offsets_to_json(self.offsets)}

    @classmethod
    def from_json(cls, d: Optional[dict]) -> Optional["SealedCheckpoint"]:
        if not d:
            return None
        return cls(int(d["id"]), int(d["timestamp"]), offsets_from_json(d["offsets"]))


@dataclass(frozen=True)
class SourceOffset:
    """Parsed form of the end offset JSON (see module docstring)."""

    offsets: PartitionOffsets
    new_partitions: PartitionOffsets = field(default_factory=dict)
    next_checkpoint_id: int = 1
    last_trigger_ms: Optional[int] = None
    batches_since_trigger: int = 0
    barriers: Tuple[PlannedBarrier, ...] = ()
    sealed: Optional[SealedCheckpoint] = None
    # A query started from a checkpoint/savepoint n (execution.savepoint.path): checkpoints
    # <= n count as completed and numbering continues at n + 1 (Flink's restored id counter).
    restored_id: int = 0

    def to_json(self) -> dict:
        checkpoint = {
            "next_id": self.next_checkpoint_id,
            "last_trigger_ms": self.last_trigger_ms,
            "batches_since_trigger": self.batches_since_trigger,
            "barriers": [b.to_json() for b in self.barriers],
            "sealed": None if self.sealed is None else self.sealed.to_json(),
        }
        if self.restored_id:
            checkpoint["restored_id"] = self.restored_id
        return {
            "version": OFFSET_VERSION,
            "offsets": offsets_to_json(self.offsets),
            "new_partitions": offsets_to_json(self.new_partitions),
            "checkpoint": checkpoint,
        }

    @classmethod
    def from_json(cls, raw: Any) -> "SourceOffset":
        """Parse an offset Spark hands back (``start`` / ``end``).

        A plain Spark Kafka offset ``{"topic": {"0": n}}`` is accepted too (no checkpoint state),
        so a query can be pointed at offsets copied from Spark's own Kafka source.
        """
        if isinstance(raw, dict) and "version" not in raw:
            return cls(offsets_from_json(raw, "source offset"))
        if not isinstance(raw, dict) or raw.get("version") != OFFSET_VERSION:
            raise InvalidOptionError(f"Unsupported barrier-kafka source offset: {raw!r}.")
        cp = raw.get("checkpoint") or {}
        return cls(
            offsets=offsets_from_json(raw["offsets"], "source offset"),
            new_partitions=offsets_from_json(raw.get("new_partitions") or {}, "source offset"),
            next_checkpoint_id=int(cp.get("next_id", 1)),
            last_trigger_ms=cp.get("last_trigger_ms"),
            batches_since_trigger=int(cp.get("batches_since_trigger", 0)),
            barriers=tuple(PlannedBarrier.from_json(b) for b in cp.get("barriers", [])),
            sealed=SealedCheckpoint.from_json(cp.get("sealed")),
            restored_id=int(cp.get("restored_id", 0)),
        )

    @property
    def highest_triggered_id(self) -> int:
        return self.next_checkpoint_id - 1

    @property
    def sealed_id(self) -> int:
        return 0 if self.sealed is None else self.sealed.checkpoint_id

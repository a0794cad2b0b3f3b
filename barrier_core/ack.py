"""Acknowledgement of one key group's snapshot (the ``ack`` column of ``kind='ack'`` rows): the
one codec of that message.

Built by the operators on executors, parsed by the coordinator in the driver commit worker
(``docs/internals/protocol.md``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Dict, Mapping, Optional, Union

from barrier_core.schema import split_channel


@dataclass(frozen=True)
class AckMetrics:
    """Per-snapshot figures for the checkpoint statistics (None: not reported)."""

    alignment_ms: Optional[float] = None
    held_back_records: Optional[int] = None
    sync_ms: Optional[float] = None
    async_ms: Optional[float] = None
    state_bytes: Optional[int] = None

    def reported(self) -> Dict[str, float]:
        """The metrics that carry a number."""
        return {k: v for k, v in asdict(self).items() if isinstance(v, (int, float))}


@dataclass(frozen=True)
class Acknowledgement:
    """``{"operator_id", "key_group", "num_key_groups", "checkpoint_id", "snapshot", "offsets",
    "metrics", "checkpoint_timestamp", "storage"}``; ``offsets`` = ``{topic: {partition: barrier
    offset}}`` (the cut), ``snapshot`` = ``SnapshotHandle.to_json()``, ``storage`` = the state
    backend the snapshot was written to (its ``describe()``, no secrets)."""

    operator_id: str
    key_group: int
    num_key_groups: int
    checkpoint_id: int
    snapshot: Optional[dict]
    offsets: Dict[str, Dict[str, Optional[int]]]
    metrics: AckMetrics
    checkpoint_timestamp: Optional[int] = field(default=None)
    storage: Optional[str] = field(default=None)  # where the snapshot went (describe())

    def to_json(self) -> str:
        """The row's JSON: the fields in declaration order, ``metrics`` as an object of its
        five fields. Built as plain dicts (``dataclasses.asdict`` deep-copies ``snapshot`` and
        ``offsets`` first, a few percent of a range's whole call with dozens of key groups);
        the text is the same as ``json.dumps(asdict(self))``, compact."""
        m = self.metrics
        return json.dumps({
            "operator_id": self.operator_id, "key_group": self.key_group,
            "num_key_groups": self.num_key_groups, "checkpoint_id": self.checkpoint_id,
            "snapshot": self.snapshot, "offsets": self.offsets,
            "metrics": {"alignment_ms": m.alignment_ms, "held_back_records": m.held_back_records,
                        "sync_ms": m.sync_ms, "async_ms": m.async_ms,
                        "state_bytes": m.state_bytes},
            "checkpoint_timestamp": self.checkpoint_timestamp, "storage": self.storage,
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: Union[str, bytes, Mapping]) -> "Acknowledgement":
        """Parse an ack row's JSON (or its already decoded dict)."""
        d = json.loads(raw) if isinstance(raw, (str, bytes)) else dict(raw)
        metrics = {k: v for k, v in (d.get("metrics") or {}).items()
                   if k in AckMetrics.__dataclass_fields__}
        return cls(d["operator_id"], int(d["key_group"]), int(d.get("num_key_groups") or 0),
                   int(d["checkpoint_id"]), d.get("snapshot"), d.get("offsets") or {},
                   AckMetrics(**metrics), d.get("checkpoint_timestamp"), d.get("storage"))


def offsets_by_topic(cut: Dict[str, Optional[int]]) -> Dict[str, Dict[str, Optional[int]]]:
    """``{"t:0": 5}`` -> ``{"t": {"0": 5}}`` (channels are ``topic:partition``)."""
    out: Dict[str, Dict[str, Optional[int]]] = {}
    for channel, offset in cut.items():
        topic, partition = split_channel(channel)
        out.setdefault(topic, {})[str(partition)] = offset
    return out

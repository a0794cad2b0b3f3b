"""Acknowledgement of one key group's snapshot (the ``ack`` column of ``kind='ack'`` rows).

Built on executors, read by the coordinator on the driver (``docs/internals/protocol.md``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Dict, Optional


@dataclass(frozen=True)
class AckMetrics:
    alignment_ms: float
    held_back_records: int
    sync_ms: float
    async_ms: float
    state_bytes: int


@dataclass(frozen=True)
class Acknowledgement:
    """``{"operator_id", "key_group", "num_key_groups", "checkpoint_id", "snapshot", "offsets",
    "metrics"}``; ``offsets`` = ``{topic: {partition: barrier offset}}`` (the cut), ``snapshot``
    = ``SnapshotHandle.to_json()``."""

    operator_id: str
    key_group: int
    num_key_groups: int
    checkpoint_id: int
    snapshot: dict
    offsets: Dict[str, Dict[str, Optional[int]]]
    metrics: AckMetrics
    checkpoint_timestamp: Optional[int] = field(default=None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Acknowledgement":
        d = json.loads(text)
        d["metrics"] = AckMetrics(**d["metrics"])
        return cls(**d)


def offsets_by_topic(cut: Dict[str, Optional[int]]) -> Dict[str, Dict[str, Optional[int]]]:
    """``{"t:0": 5}`` -> ``{"t": {"0": 5}}`` (channels are ``topic:partition``)."""
    out: Dict[str, Dict[str, Optional[int]]] = {}
    for channel, offset in cut.items():
        topic, _, partition = channel.rpartition(":")
        out.setdefault(topic, {})[partition] = offset
    return out

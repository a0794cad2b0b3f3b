"""The coordinator's hand-off to the source: ``<checkpoint.storage>/_completed_offsets.json``, the
source offsets of the newest checkpoint whose output is committed (pure codec, runs anywhere).

One writer, one reader:

* written by the sink's ``SinkCommitter`` (driver commit worker) after notifyCheckpointComplete(n)
  committed n's transactions;
* read by the barrier-kafka source (driver planner worker), which commits these offsets to the
  consumer group and restores its checkpoint counter from them.

Why a file of its own rather than ``chk-n/_metadata``: ``_metadata`` says a checkpoint is complete
before its transactions are committed, and the group must never run ahead of committed output;
finding the newest ``chk-n`` also takes a listing, this is one ``get``. The write is one atomic
``put`` and never moves backwards.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from barrier_core.exceptions import BarrierKafkaError

COMPLETED_OFFSETS_FILE = "_completed_offsets.json"


@dataclass(frozen=True)
class CompletedOffsets:
    """Checkpoint ``checkpoint_id`` (triggered at ``timestamp_ms``) is committed; ``offsets``
    = ``{topic: {partition: next offset to read}}``."""

    checkpoint_id: int
    timestamp_ms: int
    offsets: Dict[str, Dict[int, int]]

    def to_json(self) -> bytes:
        return json.dumps({
            "checkpoint_id": int(self.checkpoint_id), "timestamp": int(self.timestamp_ms),
            "offsets": {t: {str(p): int(o) for p, o in sorted(parts.items(),
                                                             key=lambda x: int(x[0]))}
                        for t, parts in sorted(self.offsets.items())}}).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> "CompletedOffsets":
        try:
            data = json.loads(raw)
            return cls(int(data["checkpoint_id"]), int(data.get("timestamp", 0)),
                       {t: {int(p): int(o) for p, o in parts.items()}
                        for t, parts in data["offsets"].items()})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BarrierKafkaError(f"Malformed {COMPLETED_OFFSETS_FILE} in checkpoint.storage: "
                                    f"{exc}") from exc

    @classmethod
    def of(cls, checkpoint_id: int, timestamp_ms: int,
           offsets: Mapping[str, Mapping[Any, int]]) -> "CompletedOffsets":
        return cls(int(checkpoint_id), int(timestamp_ms),
                   {t: {int(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()})


def write_completed_offsets(backend, completed: CompletedOffsets) -> None:
    """Record ``completed`` unless the storage already holds that checkpoint or a newer one."""
    current = read_completed_offsets(backend)
    if current is not None and current.checkpoint_id >= completed.checkpoint_id:
        return
    backend.put(COMPLETED_OFFSETS_FILE, completed.to_json())


def read_completed_offsets(backend) -> Optional[CompletedOffsets]:
    """The newest committed checkpoint's offsets, or None if none was committed yet."""
    data = backend.get_if_exists(COMPLETED_OFFSETS_FILE)
    return None if data is None else CompletedOffsets.from_json(data)

"""The source's checkpoint settings, recorded in ``checkpoint.storage`` so that the sink reads the
one configuration instead of a second copy that can disagree (driver).

The source decides when checkpoints trigger, so it owns ``execution.checkpointing.interval``,
``interval-batches`` and ``idle-seal-after``. When it starts with a ``checkpoint.storage`` it
writes them to ``<checkpoint.storage>/_checkpointing.json`` (driver planner worker, one small
put, only when they changed). The Kafka sink reads them when it starts (driver) to size its
transaction-timeout guard by the longest time a record can wait for its barrier, and refuses a
sink-side interval that contradicts the source's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Optional

SETTINGS_FILE = "_checkpointing.json"


@dataclass(frozen=True)
class CheckpointSettings:
    """What the source's trigger runs on (all durations in ms; 0 = off)."""

    interval_ms: int
    interval_batches: int
    idle_seal_ms: int
    min_pause_ms: int
    max_concurrent: int

    @property
    def seal_bound_ms(self) -> Optional[int]:
        """Longest a record read by the source waits for its barrier, apart from the time its
        batch itself takes: the time interval while data flows, the idle seal when it stops.
        None when nothing bounds it (checkpoints counted in batches, idle seal off)."""
        if self.interval_ms <= 0 and self.idle_seal_ms <= 0:
            return None
        return max(self.interval_ms, self.idle_seal_ms)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "CheckpointSettings":
        return cls(**{k: int(d[k]) for k in cls.__dataclass_fields__})


def record_settings(backend, settings: CheckpointSettings) -> None:
    """Write ``settings`` to the storage unless it already holds exactly them (driver)."""
    body = json.dumps(settings.to_json(), sort_keys=True).encode()
    if backend.get_if_exists(SETTINGS_FILE) == body:
        return
    backend.put(SETTINGS_FILE, body)


def read_settings(backend) -> Optional[CheckpointSettings]:
    """The settings the source recorded, or None (no barrier-kafka source uses this storage)."""
    data = backend.get_if_exists(SETTINGS_FILE)
    return None if data is None else CheckpointSettings.from_json(json.loads(data))

"""A barrier as it reached a sink task: the one codec of the ``barriers`` entries of a sink's
commit message and batch record (built on executors, parsed in the driver commit worker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Tuple


@dataclass(frozen=True)
class SinkBarrier:
    """Barrier ``checkpoint_id`` on ``channel`` at ``offset`` (None for operator output
    channels), delivered by every channel in ``channels``, triggered at ``timestamp`` (ms)."""

    checkpoint_id: int
    channel: str
    offset: Optional[int]
    channels: Tuple[str, ...]
    timestamp: Optional[int]

    def to_json(self) -> dict:
        return {"checkpoint_id": self.checkpoint_id, "channel": self.channel,
                "offset": self.offset, "channels": list(self.channels),
                "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, d: Mapping) -> "SinkBarrier":
        """Parse one entry (older records may lack ``channels`` or ``timestamp``)."""
        offset, ts = d.get("offset"), d.get("timestamp")
        return cls(int(d["checkpoint_id"]), str(d["channel"]),
                   None if offset is None else int(offset),
                   tuple(d.get("channels") or (d["channel"],)),
                   None if ts is None else int(ts))

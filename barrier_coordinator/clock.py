"""Clocks for the coordinator: the system clock, and a manual one for tests (Flink injects a
``Clock`` the same way)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch."""


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)


class ManualClock:
    """A clock that moves only when told (tests)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = int(start_ms)

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        self._now += int(ms)
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"

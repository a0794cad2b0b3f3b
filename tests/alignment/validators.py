"""Test doubles for the barrier handlers (like Flink's CheckpointSequenceValidator)."""

from __future__ import annotations

import pickle
from typing import List

from barrier_ops.alignment import CheckpointAborted, CheckpointTriggered, Released


class CheckpointSequenceValidator:
    """Feeds outputs of a handler and checks the trigger/abort sequence.

    ``expected``: checkpoint ids in order; a negative id means "expect an abort of -id".
    """

    def __init__(self, *expected: int) -> None:
        self.expected = list(expected)
        self.seen: List[int] = []
        self.released: List = []

    def feed(self, outputs) -> "CheckpointSequenceValidator":
        for o in outputs:
            if isinstance(o, Released):
                self.released.extend(o.payload)
            elif isinstance(o, CheckpointTriggered):
                self.seen.append(o.checkpoint_id)
            elif isinstance(o, CheckpointAborted):
                self.seen.append(-o.checkpoint_id)
            else:
                raise AssertionError(f"unexpected output {o!r}")
        return self

    def verify(self) -> None:
        assert self.seen == self.expected, f"expected {self.expected}, got {self.seen}"


def roundtrip(handler):
    """What GroupState does between micro-batches: pickle and unpickle the handler."""
    return pickle.loads(pickle.dumps(handler))

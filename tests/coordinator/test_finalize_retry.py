"""A checkpoint whose ``_metadata`` put raised after its last ack: the replay of the batch must
complete it (its acks are duplicates by then). Found by the raise-at-every-step chain: before,
it stayed PENDING with every ack in and held the max-concurrent slot until it expired."""

from __future__ import annotations

import pytest

from barrier_coordinator import CheckpointCoordinator, CoordinatorConfig, ManualClock
from state_backends.filesystem import FilesystemStateBackend


class FlakyBackend(FilesystemStateBackend):
    """Fails the first put of a ``_metadata`` file, as a storage timeout would."""

    failed = False

    def put(self, path, data):
        if path.endswith("_metadata") and not FlakyBackend.failed:
            FlakyBackend.failed = True
            raise TimeoutError(f"put {path} timed out")
        return super().put(path, data)


def test_replayed_batch_completes_a_checkpoint_whose_metadata_put_failed(tmp_path):
    backend = FlakyBackend(str(tmp_path / "storage"))
    clock = ManualClock()
    config = CoordinatorConfig(operators={"op": 1})
    barrier = {"checkpoint_id": 1, "channel": "t:0", "offset": 10, "channels": ["t:0"],
               "timestamp": clock.now_ms()}
    ack = {"operator_id": "op", "key_group": 0, "num_key_groups": 1, "checkpoint_id": 1,
           "snapshot": None, "offsets": {"t": {"0": 10}}, "metrics": {}}
    with pytest.raises(TimeoutError):
        CheckpointCoordinator(backend, config, clock).on_batch(0, [barrier], [ack])
    assert CheckpointCoordinator(backend, config, clock).last_completed_id == 0
    completed = CheckpointCoordinator(backend, config, clock).on_batch(0, [barrier], [ack])
    assert completed is not None and completed.checkpoint_id == 1
    assert CheckpointCoordinator(backend, config, clock).pending_checkpoints() == {}

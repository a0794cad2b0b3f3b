"""The sink refuses a batch whose source or operators checkpoint somewhere else than its own
``checkpoint.storage`` (issue 12 6b, issue 11: one checkpoint configuration), before anything is
recorded, and names what to set."""

from __future__ import annotations

import pytest

from barrier_core.ack import AckMetrics, Acknowledgement
from barrier_core.checkpoint_settings import CheckpointSettings, record_settings
from barrier_sink.exceptions import CheckpointStorageMismatchError
from barrier_sink.messages import SinkCommitMessage
from barrier_sink.shared_storage import require_shared_storage
from state_backends.filesystem import FilesystemStateBackend

BARRIER = {"checkpoint_id": 1, "channel": "t:0", "offset": 5, "channels": ["t:0"],
           "timestamp": 1}


def _ack(storage):
    return Acknowledgement("count", 0, 1, 1, None, {"t": {"0": 5}}, AckMetrics(), 1,
                           storage).to_json()


def _storage(tmp_path, name, with_source=True):
    backend = FilesystemStateBackend(str(tmp_path / name))
    if with_source:
        record_settings(backend, CheckpointSettings(0, 1, 10_000, 0, 1))
    return backend


def test_barriers_from_a_source_without_the_sinks_storage_are_refused(tmp_path):
    backend = _storage(tmp_path, "sink-storage", with_source=False)
    message = SinkCommitMessage(0, 0, barriers=[BARRIER])
    with pytest.raises(CheckpointStorageMismatchError) as err:
        require_shared_storage(backend, str(tmp_path / "sink-storage"), [message])
    assert f".option('checkpoint.storage', '{tmp_path / 'sink-storage'}')" in str(err.value)
    assert backend.list("") == []  # nothing recorded


def test_an_operator_snapshotting_elsewhere_is_refused(tmp_path):
    backend = _storage(tmp_path, "sink-storage")
    other = FilesystemStateBackend(str(tmp_path / "operator-storage"))
    message = SinkCommitMessage(0, 0, barriers=[BARRIER], acks=[_ack(other.describe())])
    with pytest.raises(CheckpointStorageMismatchError) as err:
        require_shared_storage(backend, str(tmp_path / "sink-storage"), [message])
    text = str(err.value)
    assert "'count'" in text and other.describe() in text
    assert f"state_backend='{tmp_path / 'sink-storage'}'" in text


def test_one_shared_storage_passes_however_it_is_spelled(tmp_path):
    backend = _storage(tmp_path, "sink-storage")
    same = backend.describe() + "/"
    require_shared_storage(backend, str(tmp_path / "sink-storage"),
                           [SinkCommitMessage(0, 0, barriers=[BARRIER], acks=[_ack(same)])])
    # acks of an older release carry no storage: nothing to compare
    require_shared_storage(backend, str(tmp_path / "sink-storage"),
                           [SinkCommitMessage(0, 0, acks=[_ack(None)])])

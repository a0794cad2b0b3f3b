"""Contract every state backend must pass (memory, filesystem, S3 on the real S3 server)."""

from __future__ import annotations

import os
import pickle

import pytest

from state_backends.base import SnapshotHandle, normalize_path
from state_backends.exceptions import (InvalidBackendOptionError, MissingChunkError,
                                       SnapshotNotFoundError, StateBackendError)
from state_backends.registry import SUPPORTED_BACKENDS


@pytest.mark.parametrize("backend", SUPPORTED_BACKENDS, indirect=True, ids=lambda c: c.__name__)
class TestBackendContract:
    def test_put_get_roundtrip_and_overwrite(self, backend):
        payload = os.urandom(4096) + b"\x00\xff"
        backend.put("a/b/blob", payload)
        assert backend.get("a/b/blob") == payload
        backend.put("a/b/blob", b"second")
        assert backend.get("a/b/blob") == b"second"
        backend.put("empty", b"")
        assert backend.get("empty") == b""

    def test_deferred_puts_are_stored_whole_and_made_durable_together(self, backend):
        """put_deferred stores like put (missing folders created, overwrites, no temporary
        file listed); make_durable of the paths returns with them still there."""
        paths = [f"chk-3/op-a/kg-{k}" for k in range(5)] + ["chk-3/op-b/kg-0"]
        for i, p in enumerate(paths):
            backend.put_deferred(p, p.encode() * (i + 1))
        backend.put_deferred(paths[0], b"again")
        backend.make_durable(paths)
        backend.make_durable([])
        assert backend.list("chk-3") == sorted(paths)
        assert backend.get(paths[0]) == b"again"
        assert [backend.get(p) for p in paths[1:]] == [p.encode() * (i + 2)
                                                      for i, p in enumerate(paths[1:])]

    def test_get_missing_names_location(self, backend):
        with pytest.raises(SnapshotNotFoundError) as info:
            backend.get("chk-9/op-x/kg-0")
        assert "chk-9/op-x/kg-0" in str(info.value)
        assert backend.describe() in str(info.value)

    def test_exists_is_exact(self, backend):
        backend.put("chk-1/op-a/kg-0", b"x")
        assert backend.exists("chk-1/op-a/kg-0")
        assert not backend.exists("chk-1/op-a/kg-1")
        assert not backend.exists("chk-1")  # a folder is not an object

    def test_list_uses_path_components(self, backend):
        for p in ("chk-1/_metadata", "chk-1/op-a/kg-0", "chk-10/_metadata", "chk-2/op-a/kg-1",
                  "sink/batch-1.json"):
            backend.put(p, p.encode())
        assert backend.list("chk-1") == ["chk-1/_metadata", "chk-1/op-a/kg-0"]
        assert backend.list("chk-1/") == ["chk-1/_metadata", "chk-1/op-a/kg-0"]
        assert backend.list("sink/") == ["sink/batch-1.json"]
        assert backend.list("chk-1/_metadata") == ["chk-1/_metadata"]
        everything = backend.list("")
        assert everything == sorted(everything) and len(everything) == 5
        assert backend.list("nope") == []
        from state_backends.checkpoint_store import CompletedCheckpointStore

        store = CompletedCheckpointStore(backend)
        assert store.completed_ids() == [1, 10] and store.incomplete_ids() == [2]

    def test_delete_prefix_never_touches_siblings(self, backend):
        for p in ("chk-1/op-a/kg-0", "chk-1/_metadata", "chk-10/op-a/kg-0", "chk-1x"):
            backend.put(p, b"x")
        backend.delete_prefix("chk-1")
        assert backend.list("") == ["chk-10/op-a/kg-0", "chk-1x"]
        backend.delete_prefix("chk-1")  # idempotent
        backend.delete_prefix("chk-10/op-a/kg-0")  # a single object
        assert backend.list("") == ["chk-1x"]

    def test_list_is_exact_around_siblings_that_sort_before_and_after_the_folder(self, backend):
        # '-' and '.' sort before '/', digits after: an S3 listing by Prefix=chk-1 returns
        # chk-1-old and chk-1.tmp before chk-1/..., and chk-10 after it
        for p in ("chk-1-old/x", "chk-1.tmp", "chk-1/a", "chk-1/b/c", "chk-10/a", "chk-2",
                  "chk-2-old"):
            backend.put(p, p.encode())
        assert backend.list("chk-1") == ["chk-1/a", "chk-1/b/c"]
        assert backend.list("chk-1/b") == ["chk-1/b/c"]
        assert backend.list("chk-2") == ["chk-2"]
        backend.delete_prefix("chk-1")
        assert backend.list("") == ["chk-1-old/x", "chk-1.tmp", "chk-10/a", "chk-2", "chk-2-old"]

    def test_get_if_exists_and_delete_are_exact(self, backend):
        assert backend.get_if_exists("sink/batch-1.json") is None
        for p in ("sink/batch-1.json", "sink/batch-10.json", "chk-3/_metadata",
                  "chk-3/op-a/kg-0"):
            backend.put(p, p.encode())
        assert backend.get_if_exists("sink/batch-1.json") == b"sink/batch-1.json"
        backend.delete(["sink/batch-1.json", "chk-3/_metadata", "never/written"])
        assert backend.list("") == ["chk-3/op-a/kg-0", "sink/batch-10.json"]
        backend.delete([])

    def test_snapshot_roundtrip(self, backend):
        data = os.urandom(10_000)
        handle = backend.write_snapshot(3, "agg", 7, data)
        assert (handle.checkpoint_id, handle.operator_id, handle.key_group) == (3, "agg", 7)
        assert handle.size_bytes == len(data)
        again = SnapshotHandle.from_json(handle.to_json())  # travels as JSON in ack rows
        assert backend.read_snapshot(again) == data
        if backend.inline_snapshots:
            assert handle.path is None and handle.inline == data
        else:
            assert handle.path == "chk-3/op-agg/kg-7" and backend.exists(handle.path)

    def test_missing_or_truncated_chunk_is_reported(self, backend):
        handle = backend.write_snapshot(4, "agg", 0, b"0123456789")
        if backend.inline_snapshots:
            bad = SnapshotHandle(4, "agg", 0, None, 11, b"0123456789")
        else:
            backend.put(handle.path, b"01234")
            bad = handle
        with pytest.raises(MissingChunkError) as info:
            backend.read_snapshot(bad)
        assert info.value.checkpoint_id == 4 and "checkpoint 4" in str(info.value)
        if not backend.inline_snapshots:
            backend.delete_prefix(handle.path)
            with pytest.raises(MissingChunkError, match="missing at .*chk-4/op-agg/kg-0"):
                backend.read_snapshot(handle)

    def test_invalid_paths_are_rejected(self, backend):
        for bad in ("../escape", "a/../b", "a//b", "/abs"):
            with pytest.raises(InvalidBackendOptionError):
                backend.put(bad, b"x")

    def test_pickled_copy_sees_the_same_objects(self, backend):
        backend.put("shared/obj", b"payload")
        clone = pickle.loads(pickle.dumps(backend))
        assert clone.get("shared/obj") == b"payload"
        assert clone == backend and hash(clone) == hash(backend)
        clone.put("shared/other", b"2")
        assert backend.get("shared/other") == b"2"

    def test_describe_and_repr_hold_no_secret(self, backend):
        secret = getattr(getattr(backend, "options", None), "secret_key", None)
        text = repr(backend) + backend.describe() + backend.location("chk-1/_metadata")
        assert backend.describe().split(":", 1)[0] in ("memory", "file", "s3")
        if secret is not None:
            assert secret not in text


def test_normalize_path():
    assert normalize_path("a/b/") == "a/b"
    assert normalize_path("", allow_root=True) == ""
    with pytest.raises(InvalidBackendOptionError):
        normalize_path("")


def test_state_backend_error_root():
    from barrier_core.exceptions import BarrierKafkaError

    assert issubclass(StateBackendError, BarrierKafkaError)
    assert issubclass(SnapshotNotFoundError, StateBackendError)


def test_the_filesystem_syncs_each_folder_once_for_deferred_puts(tmp_path, monkeypatch):
    """put syncs its file and its folder; put_deferred syncs its file only, and make_durable
    then syncs each folder of its paths once (the renames are durable only after that)."""
    import state_backends.filesystem as filesystem

    synced_files, synced_folders = [], []
    real_fsync = os.fsync
    monkeypatch.setattr(filesystem, "_fsync_dir", synced_folders.append)
    monkeypatch.setattr(filesystem.os, "fsync", lambda fd: (synced_files.append(fd),
                                                            real_fsync(fd))[1])
    backend = filesystem.FilesystemStateBackend(str(tmp_path))
    backend.put("chk-1/_metadata", b"m")
    assert len(synced_files) == 1 and synced_folders == [str(tmp_path / "chk-1")]
    paths = [f"chk-2/op-a/kg-{k}" for k in range(64)] + ["chk-2/op-b/kg-0"]
    for p in paths:
        backend.put_deferred(p, b"x")
    assert len(synced_files) == 1 + len(paths) and len(synced_folders) == 1
    backend.make_durable(paths)
    assert synced_folders[1:] == [str(tmp_path / "chk-2" / "op-a"),
                                  str(tmp_path / "chk-2" / "op-b")]
    assert not [n for _, _, names in os.walk(tmp_path) for n in names
                if n.startswith(filesystem.TMP_MARK)]
    unsynced = filesystem.FilesystemStateBackend(str(tmp_path / "nosync"), fsync=False)
    unsynced.put_deferred("chk-1/op-a/kg-0", b"y")
    unsynced.make_durable(["chk-1/op-a/kg-0"])
    assert len(synced_files) == 1 + len(paths) and len(synced_folders) == 3
    assert unsynced.get("chk-1/op-a/kg-0") == b"y"

"""``CompletedCheckpointStore`` and ``CheckpointMetadata`` on every backend: listing, retention,
debris, savepoints, restore and the errors for bad metadata."""

from __future__ import annotations

import json

import pytest

from state_backends.base import metadata_path, snapshot_path, stats_path
from state_backends.checkpoint_store import CompletedCheckpointStore
from state_backends.exceptions import (CheckpointNotFoundError, CorruptMetadataError,
                                       IncompatibleLayoutError, MissingChunkError)
from state_backends.metadata import LAYOUT_VERSION, CheckpointMetadata
from state_backends.registry import SUPPORTED_BACKENDS

backends = pytest.mark.parametrize("backend", SUPPORTED_BACKENDS, indirect=True,
                                   ids=lambda c: c.__name__)


def complete(store: CompletedCheckpointStore, n: int, kgs: int = 2, savepoint: bool = False,
             with_stats: bool = True) -> CheckpointMetadata:
    """Write snapshots of checkpoint n, then its metadata last (what the coordinator does)."""
    b = store.backend
    handles = tuple(b.write_snapshot(n, "agg", k, f"state-{n}-{k}".encode() * (k + 1))
                    for k in range(kgs))
    if with_stats:
        b.put(stats_path(n), json.dumps({"checkpoint_id": n}).encode())
    meta = CheckpointMetadata(n, 1000 * n, 1000 * n + 5, {"t": {"0": 10 * n, "1": 11 * n}},
                              handles, ({"transactional_id": f"tx-{n}"},), savepoint, n)
    store.add(meta)
    return meta


@backends
class TestCompletedCheckpointStore:
    def test_only_checkpoints_with_metadata_are_complete(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=5)
        complete(store, 1)
        backend.put(snapshot_path(2, "agg", 0), b"half-written")  # no metadata: debris
        assert store.completed_ids() == [1]
        assert store.incomplete_ids() == [2]
        assert store.latest().checkpoint_id == 1
        with pytest.raises(CheckpointNotFoundError, match="checkpoint 2: no metadata"):
            store.load(2)

    def test_metadata_roundtrip_and_state(self, backend):
        store = CompletedCheckpointStore(backend)
        written = complete(store, 3, kgs=3)
        loaded = store.load(3)
        assert loaded == written
        assert loaded.source_offsets == {"t": {"0": 30, "1": 33}}
        assert loaded.sink_transactions == ({"transactional_id": "tx-3"},)
        state = store.load_state(loaded)
        assert state == {"agg": {k: f"state-3-{k}".encode() * (k + 1) for k in range(3)}}

    def test_retention_keeps_last_n_and_savepoints(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=2)
        for n in range(1, 6):
            complete(store, n, savepoint=(n == 2))
        assert store.completed_ids() == [2, 4, 5]
        for gone in (1, 3):
            assert backend.list(f"chk-{gone}") == [stats_path(gone)]  # stats survive
        assert store.load(2).is_savepoint

    def test_discard_debris_spares_in_progress_and_newer(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=3)
        complete(store, 1)
        backend.put(snapshot_path(2, "agg", 0), b"aborted")
        backend.put(stats_path(2), b"{}")
        backend.put(snapshot_path(3, "agg", 0), b"in progress")
        complete(store, 4)
        backend.put(snapshot_path(5, "agg", 0), b"newer, being written")
        assert store.discard_debris(in_progress=[3]) == [2]
        assert backend.list("chk-2") == [stats_path(2)]
        assert backend.list("chk-3") and backend.list("chk-5")
        assert store.completed_ids() == [1, 4]

    def test_savepoint_copy_survives_retention(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=1)
        original = complete(store, 1)
        sp = store.create_savepoint("before-upgrade")
        for n in (2, 3):
            complete(store, n)
        assert store.completed_ids() == [3] and store.savepoints() == ["before-upgrade"]
        point = store.restore(savepoint="before-upgrade")
        assert point.checkpoint_id == 1 and point.metadata.is_savepoint
        assert point.source_offsets == original.source_offsets
        assert store.load_state(point.metadata) == store.load_state(sp)
        assert store.load_state(sp)["agg"][1] == b"state-1-1" * 2

    def test_restore_latest_or_chosen(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=3)
        assert store.restore() is None
        for n in (1, 2, 3):
            complete(store, n)
        assert store.restore().checkpoint_id == 3
        assert store.restore(checkpoint_id=2).checkpoint_id == 2

    @pytest.mark.parametrize("damage, error, words", [
        (lambda b: b.put(metadata_path(3), b.get(metadata_path(3))[:-7]), CorruptMetadataError,
         "invalid JSON"),
        (lambda b: b.put(metadata_path(3), b""), CorruptMetadataError, "empty"),
        (lambda b: b.put(metadata_path(3), b"\xff\xfe"), CorruptMetadataError, "UTF-8"),
        (lambda b: b.put(metadata_path(3), json.dumps({"layout_version": LAYOUT_VERSION,
                                                       "checkpoint_id": 3}).encode()),
         CorruptMetadataError, "missing field"),
        (lambda b: b.put(metadata_path(3), json.dumps(
            {**json.loads(b.get(metadata_path(3))), "layout_version": 99}).encode()),
         IncompatibleLayoutError, "layout version 99"),
        (lambda b: b.put(metadata_path(3), json.dumps(
            {**json.loads(b.get(metadata_path(3))), "checkpoint_id": 7}).encode()),
         CorruptMetadataError, "describes checkpoint 7"),
    ], ids=["truncated", "empty", "binary", "missing-field", "layout", "wrong-id"])
    def test_bad_metadata_is_named_and_never_silently_skipped(self, backend, damage, error,
                                                              words):
        store = CompletedCheckpointStore(backend, num_retained=3)
        for n in (1, 2, 3):
            complete(store, n)
        damage(backend)
        with pytest.raises(error) as info:
            store.restore()
        message = str(info.value)
        assert words in message and "checkpoint 3" in message
        assert backend.location(metadata_path(3)) in message
        assert "fallback_to_previous=True" in message
        assert info.value.checkpoint_id == 3
        point = store.restore(fallback_to_previous=True)
        assert point.checkpoint_id == 2 and len(point.skipped) == 1

    def test_missing_chunk_is_named(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=3)
        complete(store, 1)
        meta = complete(store, 2)
        if backend.inline_snapshots:
            pytest.skip("memory snapshots live inside the metadata; no chunk can go missing")
        backend.delete_prefix(meta.operators[1].path)
        with pytest.raises(MissingChunkError) as info:
            store.restore()
        assert "checkpoint 2" in str(info.value)
        assert backend.location("chk-2/op-agg/kg-1") in str(info.value)
        assert store.restore(fallback_to_previous=True).checkpoint_id == 1

    def test_every_checkpoint_unusable_with_fallback(self, backend):
        store = CompletedCheckpointStore(backend)
        complete(store, 1)
        backend.put(metadata_path(1), b"{")
        with pytest.raises(CheckpointNotFoundError, match="no usable completed checkpoint"):
            store.restore(fallback_to_previous=True)


def test_num_retained_validated(tmp_path):
    from state_backends.exceptions import InvalidBackendOptionError
    from state_backends.filesystem import FilesystemStateBackend

    with pytest.raises(InvalidBackendOptionError, match="num-retained"):
        CompletedCheckpointStore(FilesystemStateBackend(str(tmp_path)), num_retained=0)

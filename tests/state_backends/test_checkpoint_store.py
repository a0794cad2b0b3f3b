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


# ---------------------------------------------------------------------- incremental snapshots
file_backends = pytest.mark.parametrize(
    "backend", [b for b in SUPPORTED_BACKENDS if not b.inline_snapshots], indirect=True,
    ids=lambda c: c.__name__)


def complete_chained(store: CompletedCheckpointStore, n: int, chain, data: bytes = b"delta"):
    """Checkpoint n with one key group whose snapshot is ``data`` chained on ``chain``."""
    handle = store.backend.write_snapshot(n, "agg", 0, data + str(n).encode(), tuple(chain))
    store.add(CheckpointMetadata(n, n, n, {}, (handle,)))
    return handle


@file_backends
class TestChainedSnapshots:
    def test_handle_json_names_every_part_in_a_few_bytes(self, backend):
        ids = [1, 2, 3, 5, 6, 9] + list(range(11, 111))
        h = backend.write_snapshot(111, "agg", 0, b"d", tuple(
            (f"chk-{n}/op-agg/kg-0", 4) for n in ids))
        doc = h.to_json()
        assert doc["chain_checkpoints"] == "1-3,5-6,9,11-110" and "chain" not in doc
        again = type(h).from_json(json.loads(json.dumps(doc)))
        assert again.parts == tuple((f"chk-{n}/op-agg/kg-0", None) for n in ids) + (
            ("chk-111/op-agg/kg-0", 1),)
        moved = type(h).from_json(json.loads(json.dumps(
            backend.write_snapshot(3, "agg", 0, b"d", (("savepoints/sp/op-agg/kg-0.part-0",
                                                        7),)).to_json())))
        assert moved.chain == (("savepoints/sp/op-agg/kg-0.part-0", 7),)
        with pytest.raises(ValueError, match="read_snapshot_parts"):
            backend.read_snapshot(h)
        with pytest.raises(CorruptMetadataError, match="chain_checkpoints|range"):
            CheckpointMetadata.from_bytes(CheckpointMetadata(
                111, 1, 1, {}, (h,)).to_bytes().replace(b"11-110", b"110-11"), 111)

    def test_retention_keeps_chained_parts_and_frees_them_with_their_last_user(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=1)
        full = complete_chained(store, 1, (), b"full")
        d2 = complete_chained(store, 2, full.parts)
        d3 = complete_chained(store, 3, d2.parts)
        # 1 and 2 left retention, their metadata is gone, the parts 3 chains on stay
        assert store.completed_ids() == [3]
        assert backend.read_snapshot_parts(store.load(3).operators[0]) == [b"full1", b"delta2",
                                                                           b"delta3"]
        complete_chained(store, 4, (), b"full")  # a new full snapshot: nothing chains on 1-3
        assert [p for p in backend.list("") if "/op-" in p] == ["chk-4/op-agg/kg-0"]
        assert d3.path not in backend.list("")
        if hasattr(backend, "root"):  # filesystem: deleting leaves no empty folders behind
            import os

            empty = [d for d, dirs, files in os.walk(backend.root) if not dirs and not files]
            assert empty == []

    def test_debris_and_history_pruning_spare_chained_parts(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=1)
        complete_chained(store, 1, (), b"full")
        # checkpoint 2 failed after its key group wrote a delta; 3 chains on it and completes
        aborted = backend.write_snapshot(2, "agg", 0, b"delta2",
                                         store.load(1).operators[0].parts)
        backend.put(stats_path(2), b"{}")
        complete_chained(store, 3, aborted.parts)
        assert store.discard_debris(below=3) == []
        assert store.prune_history(1, 2) == 2
        assert backend.exists(aborted.path) and not backend.exists(stats_path(2))
        assert backend.exists("chk-1/op-agg/kg-0") and not backend.exists(stats_path(1))
        store.verify(store.load(3), "chk-3")

    def test_history_pruning_leaves_snapshots_newer_than_the_last_completion(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=1)
        complete_chained(store, 1, (), b"full")
        for n in (2, 3):  # failed; the next snapshot in flight may chain on them
            backend.write_snapshot(n, "agg", 0, b"delta", ())
            backend.put(stats_path(n), b"{}")
        store.prune_history(2, 3)
        assert backend.exists("chk-2/op-agg/kg-0") and backend.exists("chk-3/op-agg/kg-0")
        assert not backend.exists(stats_path(2))
        complete_chained(store, 4, (), b"full")
        assert store.discard_debris(below=4, above=1) == [2, 3]

    def test_savepoint_copies_every_part(self, backend):
        store = CompletedCheckpointStore(backend, num_retained=1)
        full = complete_chained(store, 1, (), b"full")
        complete_chained(store, 2, full.parts)
        sp = store.create_savepoint("sp")
        h = sp.operators[0]
        assert all(p.startswith("savepoints/sp/") for p, _ in h.parts)
        complete_chained(store, 3, (), b"full")
        complete_chained(store, 4, (), b"full")
        assert backend.read_snapshot_parts(store.load_savepoint("sp").operators[0]) == \
            [b"full1", b"delta2"]

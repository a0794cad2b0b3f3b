"""One checkpoint storage, one query: the sink's claim on its checkpoint.storage."""

import pytest

from barrier_sink.ownership import OWNER_FILE, StorageOwnedByAnotherQueryError, claim_storage
from state_backends.filesystem import FilesystemStateBackend


def test_the_owner_passes_every_restart_and_another_query_is_refused(tmp_path):
    backend = FilesystemStateBackend(str(tmp_path / "storage"))
    claim_storage(backend, str(tmp_path / "query-a"))
    assert backend.exists(OWNER_FILE)
    claim_storage(backend, str(tmp_path / "query-a") + "/")  # same query, restarted
    with pytest.raises(StorageOwnedByAnotherQueryError) as err:
        claim_storage(backend, str(tmp_path / "query-b"))
    message = str(err.value)
    assert "query-a" in message and "query-b" in message
    assert "execution.savepoint.path" in message and "copy_savepoint" in message


def test_relative_and_file_uri_locations_are_the_same_query(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    backend = FilesystemStateBackend(str(tmp_path / "storage"))
    claim_storage(backend, "chk")
    claim_storage(backend, f"file://{tmp_path}/chk")

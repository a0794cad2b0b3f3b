"""S3-specific behaviour (real moto S3 server) and ``backend_from_uri``."""

from __future__ import annotations

import logging
import socket

import pytest

from state_backends.exceptions import InvalidBackendOptionError, StateBackendError
from state_backends.filesystem import FilesystemStateBackend
from state_backends.memory import MemoryStateBackend
from state_backends.registry import SUPPORTED_BACKENDS, backend_from_uri
from state_backends.s3 import S3StateBackend
from tests.state_backends.conftest import SECRET, s3_options


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_uris_pick_the_backend(tmp_path):
    assert isinstance(backend_from_uri("memory://unit"), MemoryStateBackend)
    fs = backend_from_uri(f"file://{tmp_path}/x")
    assert isinstance(fs, FilesystemStateBackend) and fs.root == f"{tmp_path}/x"
    assert backend_from_uri(str(tmp_path)).describe() == f"file://{tmp_path}"
    s3 = backend_from_uri("s3://bucket/a/b/", {"S3.Region": "eu-west-1"})
    assert isinstance(s3, S3StateBackend)
    assert (s3.bucket, s3.prefix, s3.options.region) == ("bucket", "a/b", "eu-west-1")
    assert [c.__name__ for c in SUPPORTED_BACKENDS] == [
        "MemoryStateBackend", "FilesystemStateBackend", "S3StateBackend"]


@pytest.mark.parametrize("uri, options, message", [
    ("relative/path", None, "relative"),
    ("hdfs://nn/x", None, "unsupported state backend URI scheme 'hdfs'"),
    ("s3:///prefix", None, "no bucket"),
    ("s3://b/p", {"s3.endpiont": "x"}, "unknown S3 option.*s3.endpiont"),
    ("s3://b/p", {"s3.access.key": "a"}, "must be given together"),
    ("s3://b/p", {"s3.max.attempts": "many"}, "s3.max.attempts"),
    ("file://host/x", None, "names host"),
])
def test_bad_uris_and_options(uri, options, message):
    with pytest.raises(InvalidBackendOptionError, match=message):
        backend_from_uri(uri, options)


def test_non_s3_options_are_ignored(tmp_path):
    backend_from_uri("s3://b/p", {"checkpointLocation": "/x", "kafka.bootstrap.servers": "y"})


def test_secret_never_in_repr_logs_or_errors(caplog):
    backend = backend_from_uri("s3://no-such-bucket/p", {
        "s3.endpoint": f"http://127.0.0.1:{closed_port()}", "s3.access.key": "AKIAEXAMPLE",
        "s3.secret.key": SECRET, "s3.connect.timeout.ms": "300", "s3.max.attempts": "1"})
    assert SECRET not in repr(backend) and SECRET not in repr(backend.options)
    caplog.set_level(logging.DEBUG, logger="state_backends")
    with pytest.raises(StateBackendError) as info:
        backend.put("chk-1/_metadata", b"{}")
    text = str(info.value)
    assert "s3://no-such-bucket/p/chk-1/_metadata" in text and "unreachable" in text
    assert SECRET not in text and SECRET not in caplog.text
    assert info.value.__cause__ is None  # the botocore exception (with request details) dropped


def test_missing_bucket_is_named(s3_server):
    backend = backend_from_uri("s3://bucket-that-does-not-exist/x", s3_options(s3_server))
    with pytest.raises(StateBackendError, match="bucket 'bucket-that-does-not-exist' does not "
                                                "exist"):
        backend.put("chk-1/op-a/kg-0", b"x")
    with pytest.raises(StateBackendError, match="bucket-that-does-not-exist"):
        backend.list("")


def test_s3_objects_are_plain_keys_under_the_prefix(s3_server, s3_bucket, monkeypatch):
    import boto3

    import state_backends.s3 as s3_module

    monkeypatch.setattr(s3_module, "_LIST_PAGE", 7)     # several list pages ...
    monkeypatch.setattr(s3_module, "_DELETE_BATCH", 4)  # ... and several delete batches

    backend = backend_from_uri(f"s3://{s3_bucket}/root", s3_options(s3_server))
    backend.write_snapshot(1, "agg", 0, b"state")
    backend.put("chk-1/_metadata", b"{}")
    client = boto3.client("s3", **s3_server.client_kwargs())
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert sorted(keys) == ["root/chk-1/_metadata", "root/chk-1/op-agg/kg-0"]
    many = [f"chk-2/op-a/kg-{i}" for i in range(23)]
    for p in many:
        client.put_object(Bucket=s3_bucket, Key=f"root/{p}", Body=b"")
    assert backend.list("chk-2") == sorted(many)
    backend.delete_prefix("chk-2")
    assert backend.list("chk-2") == [] and len(backend.list("")) == 2


def test_s3_403_names_the_bucket_and_the_credentials():
    """Issue 14: a HEAD answered 403 (no error body, so the code is '403') gave a generic
    'S3 error 403'. Both the state backend and the file sink now say what to check."""
    from botocore.exceptions import ClientError

    from barrier_sink.exceptions import SinkError
    from barrier_sink.file_store import S3FileStore
    from state_backends.s3 import describe_s3_error

    forbidden = ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, "HeadObject")
    text = describe_s3_error("check", "my-bucket", "chk-1/_metadata", forbidden)
    assert "access denied (403)" in text and "'my-bucket'" in text and "credentials" in text

    class Denying:
        def head_object(self, **kw):
            raise forbidden

    class DenyingStore(S3FileStore):
        def _client(self):
            return Denying()

    store = DenyingStore("my-bucket", "out")
    with pytest.raises(SinkError, match="access denied.*bucket 'my-bucket'"):
        store.exists("part-0.parquet")


def test_one_s3_client_per_process_and_connection_settings(s3_server, s3_bucket):
    """Issue 15: the operator opens its state backend from the URI for every key group and batch,
    and the S3 file sink opened a client for every request; creating a boto3 client costs
    70-190 ms of CPU, which made a batch with its storage on S3 about 3x slower than on a local
    folder. Every backend and file store with the same connection settings now shares one
    client in a process (boto3 clients are thread-safe); other settings get their own."""
    import pickle

    from barrier_sink.file_store import S3FileStore

    uri = f"s3://{s3_bucket}/shared"
    first = backend_from_uri(uri, s3_options(s3_server))
    again = backend_from_uri(uri, s3_options(s3_server))
    unpickled = pickle.loads(pickle.dumps(first))
    assert again.client is first.client and unpickled.client is first.client
    first.put("a", b"1")
    assert unpickled.get("a") == b"1"
    elsewhere = backend_from_uri(uri, {**s3_options(s3_server), "s3.read.timeout.ms": "30000"})
    assert elsewhere.client is not first.client

    store = S3FileStore(s3_bucket, "out", s3_server.endpoint_url, s3_server.region,
                        s3_server.access_key, s3_server.secret_key)
    assert store._client() is store._client()
    assert pickle.loads(pickle.dumps(store))._client() is store._client()
    other = S3FileStore(s3_bucket, "out", s3_server.endpoint_url, s3_server.region,
                        "another-key", "another-secret")
    assert other._client() is not store._client()

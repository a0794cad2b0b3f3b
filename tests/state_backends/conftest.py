"""Fixtures for the backend contract suite: ``backend`` is parametrized indirectly over
``SUPPORTED_BACKENDS``; the S3 flavour runs against the real moto S3 server (``s3_server``)."""

from __future__ import annotations

import uuid

import pytest

from state_backends.filesystem import FilesystemStateBackend
from state_backends.memory import MemoryStateBackend, clear_memory_backend
from state_backends.registry import backend_from_uri
from state_backends.s3 import S3StateBackend

SECRET = "s3cr3t-" + uuid.uuid4().hex


def s3_options(server) -> dict:
    return {"s3.endpoint": server.endpoint_url, "s3.access.key": server.access_key,
            "s3.secret.key": server.secret_key, "s3.region": server.region}


def make_backend(cls, request, tmp_path):
    if cls is MemoryStateBackend:
        name = "t-" + uuid.uuid4().hex
        request.addfinalizer(lambda: clear_memory_backend(name))
        return backend_from_uri(f"memory://{name}")
    if cls is FilesystemStateBackend:
        return backend_from_uri(str(tmp_path / "chk"))
    if cls is S3StateBackend:
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        return backend_from_uri(f"s3://{bucket}/jobs/{uuid.uuid4().hex[:6]}", s3_options(server))
    raise AssertionError(f"no fixture for {cls}")


@pytest.fixture
def backend(request, tmp_path):
    return make_backend(request.param, request, tmp_path)

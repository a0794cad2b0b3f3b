"""``S3StateBackend``: objects in an S3 bucket (or any S3-compatible server) through boto3.

Atomic completion without renames: every object is one ``PutObject`` (S3 makes a PUT visible
all at once, never partially), and a checkpoint is complete exactly when its
``chk-<n>/_metadata`` object exists, which the coordinator PUTs last.

Credentials come from the options (``s3.access.key`` / ``s3.secret.key``) or boto3's default
chain. They are never part of ``repr``, ``describe()``, log lines or error messages: errors name
only the bucket, the key and the S3 error code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import List, Optional

from state_backends.base import StateBackend, normalize_path
from state_backends.exceptions import InvalidBackendOptionError, SnapshotNotFoundError, \
    StateBackendError
from state_backends.s3_clients import shared_client

logger = logging.getLogger(__name__)

_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
_DELETE_BATCH = 1000
_LIST_PAGE = 1000


def _boto3():
    try:
        import boto3
        import botocore
    except ImportError as exc:  # pragma: no cover - boto3 is an install requirement
        raise StateBackendError("the S3 state backend needs boto3: "
                                "pip install barrier-kafka[s3]") from exc
    return boto3, botocore


@dataclass(frozen=True)
class S3Options:
    """Connection options of :class:`S3StateBackend` (picklable; secrets hidden from repr)."""

    region: Optional[str] = None
    endpoint_url: Optional[str] = field(default=None, repr=False)
    access_key: Optional[str] = field(default=None, repr=False)
    secret_key: Optional[str] = field(default=None, repr=False)
    session_token: Optional[str] = field(default=None, repr=False)
    path_style: bool = False
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    max_attempts: int = 3

    def __post_init__(self) -> None:
        if (self.access_key is None) != (self.secret_key is None):
            raise InvalidBackendOptionError(
                "s3.access.key and s3.secret.key must be given together (or neither, to use "
                "boto3's default credential chain)")
        if self.max_attempts < 1 or self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise InvalidBackendOptionError(
                "s3.max.attempts must be >= 1 and s3 timeouts must be > 0")


class S3StateBackend(StateBackend):
    """Backend at ``s3://<bucket>/<prefix>``. Runs on the driver and on executors.

    The boto3 client is created lazily and shared by every backend with the same options in
    the process (:mod:`state_backends.s3_clients`); it is not pickled.
    """

    scheme = "s3"

    def __init__(self, bucket: str, prefix: str = "", options: Optional[S3Options] = None) -> None:
        if not bucket or "/" in bucket:
            raise InvalidBackendOptionError(f"invalid S3 bucket name {bucket!r}")
        self.bucket = bucket
        self.prefix = normalize_path(prefix, allow_root=True)
        self.options = options or S3Options()
        self._client = None

    # ------------------------------------------------------------------ plumbing
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self):
        """The process's boto3 client for these options (:mod:`state_backends.s3_clients`)."""
        if self._client is None:
            self._client = shared_client(self.options, self._make_client)
        return self._client

    def _make_client(self):
        boto3, botocore = _boto3()
        o = self.options
        config = botocore.config.Config(
            connect_timeout=o.connect_timeout_s, read_timeout=o.read_timeout_s,
            retries={"max_attempts": o.max_attempts, "mode": "standard"},
            s3={"addressing_style": "path" if o.path_style else "auto"})
        kwargs = {"config": config}
        if o.region:
            kwargs["region_name"] = o.region
        if o.endpoint_url:
            kwargs["endpoint_url"] = o.endpoint_url
        if o.access_key is not None:
            kwargs["aws_access_key_id"] = o.access_key
            kwargs["aws_secret_access_key"] = o.secret_key
            if o.session_token:
                kwargs["aws_session_token"] = o.session_token
        return boto3.session.Session().client("s3", **kwargs)

    def _key(self, path: str) -> str:
        rel = normalize_path(path, allow_root=True)
        if self.prefix and rel:
            return f"{self.prefix}/{rel}"
        return self.prefix or rel

    def _rel(self, key: str) -> str:
        return key[len(self.prefix) + 1:] if self.prefix else key

    def _error(self, action: str, key: str, exc: Exception) -> StateBackendError:
        """A ``StateBackendError`` naming bucket, key and error code only (no secrets)."""
        return StateBackendError(describe_s3_error(action, self.bucket, key, exc))

    def _call(self, action: str, key: str, fn, **kwargs):
        _boto, botocore = _boto3()
        try:
            return fn(**kwargs)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise self._error(action, key, exc) from None

    # ------------------------------------------------------------------ primitives
    def put(self, path: str, data: bytes) -> None:
        key = self._key(normalize_path(path))
        self._call("write", key, self.client.put_object, Bucket=self.bucket, Key=key, Body=data)

    def get(self, path: str) -> bytes:
        key = self._key(normalize_path(path))
        _boto, botocore = _boto3()
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _NOT_FOUND:
                raise SnapshotNotFoundError(f"no object at s3://{self.bucket}/{key}") from None
            raise self._error("read", key, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error("read", key, exc) from None

    def exists(self, path: str) -> bool:
        key = self._key(normalize_path(path))
        _boto, botocore = _boto3()
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
            return True
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return False
            raise self._error("check", key, exc) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise self._error("check", key, exc) from None

    def _list_keys(self, prefix: str) -> List[str]:
        """Keys at or under ``prefix`` (path components) in ONE listing: S3 returns keys in
        UTF-8 binary order, so with ``Prefix=base`` the object ``base`` and the block
        ``base/...`` come together, and the listing stops at the first key sorting after that
        block (a sibling such as ``chk-10`` of ``chk-1``)."""
        rel = normalize_path(prefix, allow_root=True)
        base = self._key(rel)
        if not rel:
            query = base + "/" if base else ""
        else:
            query = base
        keys: List[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self.bucket, Prefix=query,
                                   PaginationConfig={"PageSize": _LIST_PAGE})
        _boto, botocore = _boto3()
        try:
            for page in pages:
                for o in page.get("Contents", []):
                    key = o["Key"]
                    if not rel or key == base or key.startswith(base + "/"):
                        keys.append(key)
                    elif key[len(base)] > "/":
                        return keys  # past base/...: only siblings follow
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise self._error("list", query, exc) from None
        return keys

    def list(self, prefix: str = "") -> List[str]:
        return sorted(self._rel(k) for k in self._list_keys(prefix))

    def delete_prefix(self, prefix: str) -> None:
        self._delete_keys(self._list_keys(prefix))

    def delete(self, paths: List[str]) -> None:
        self._delete_keys([self._key(normalize_path(p)) for p in paths])

    def _delete_keys(self, keys: List[str]) -> None:
        for i in range(0, len(keys), _DELETE_BATCH):
            chunk = keys[i:i + _DELETE_BATCH]
            resp = self._call("delete", chunk[0], self.client.delete_objects, Bucket=self.bucket,
                              Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
            errors = resp.get("Errors") or []
            if errors:
                first = errors[0]
                raise StateBackendError(
                    f"could not delete s3://{self.bucket}/{first.get('Key')}: S3 error "
                    f"{first.get('Code')} ({len(errors)} keys failed)")

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def __repr__(self) -> str:
        return f"S3StateBackend({self.describe()!r}, {self.options!r})"


_ACCESS_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403",
                  "Forbidden", "ExpiredToken", "InvalidToken")


def describe_s3_error(action: str, bucket: str, key: str, exc: Exception) -> str:
    """What went wrong with an S3 call, for an error message: the bucket and key, the error
    code and what to check; never credentials (state backend and file sink, any process)."""
    _boto, botocore = _boto3()
    where = f"s3://{bucket}/{key}"
    if isinstance(exc, botocore.exceptions.ClientError):
        err = (getattr(exc, "response", None) or {}).get("Error", {})
        code = str(err.get("Code", "?"))
        if code == "NoSuchBucket":
            return f"could not {action} {where}: bucket {bucket!r} does not exist"
        if code in _ACCESS_DENIED:
            return (f"could not {action} {where}: access denied ({code}): the S3 credentials "
                    f"are wrong or lack permission on bucket {bucket!r} (check s3.access.key / "
                    "s3.secret.key or the instance credentials, and the bucket policy)")
        return f"could not {action} {where}: S3 error {code}: {err.get('Message', '')}".rstrip(": ")
    if isinstance(exc, (botocore.exceptions.EndpointConnectionError,
                        botocore.exceptions.ConnectTimeoutError,
                        botocore.exceptions.ReadTimeoutError)):
        return (f"could not {action} {where}: S3 endpoint unreachable ({type(exc).__name__}); "
                "check s3.endpoint and the network")
    if isinstance(exc, botocore.exceptions.NoCredentialsError):
        return (f"could not {action} {where}: no S3 credentials found (set "
                "s3.access.key/s3.secret.key or the AWS environment)")
    return f"could not {action} {where}: {type(exc).__name__}"

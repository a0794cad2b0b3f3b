"""Where the file sink stages and publishes Parquet files: a local folder or an S3 prefix.

Runs on executors (staging) and on the driver (publishing). Publishing is atomic per file: a local
``os.replace`` of the staged file into place, or on S3 a server-side ``copy_object`` (a single
PUT-equivalent that either fully appears or not). Credentials are never logged or shown in repr.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional
from urllib.parse import urlparse

from barrier_sink.exceptions import InvalidOptionError, SinkError
from state_backends.s3 import describe_s3_error
from state_backends.s3_clients import shared_client


class FileStore:
    """Interface: put (atomic), publish (staged -> final, idempotent), delete, list, get."""

    def put(self, rel: str, data: bytes) -> None: ...
    def get(self, rel: str) -> bytes: ...
    def exists(self, rel: str) -> bool: ...
    def publish(self, staged: str, final: str) -> None: ...
    def delete(self, rel: str) -> None: ...
    def list(self, prefix: str) -> List[str]: ...
    def uri(self, rel: str) -> str: ...


@dataclass(frozen=True)
class LocalFileStore(FileStore):
    root: str

    def _abs(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def put(self, rel: str, data: bytes) -> None:
        path = self._abs(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def get(self, rel: str) -> bytes:
        with open(self._abs(rel), "rb") as f:
            return f.read()

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._abs(rel))

    def publish(self, staged: str, final: str) -> None:
        src, dst = self._abs(staged), self._abs(final)
        if os.path.exists(dst) and not os.path.exists(src):
            return  # already published
        if not os.path.exists(src):
            raise SinkError(f"staged file {src} is missing: it cannot be published")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)

    def delete(self, rel: str) -> None:
        try:
            os.remove(self._abs(rel))
        except FileNotFoundError:
            pass

    def list(self, prefix: str) -> List[str]:
        base = self._abs(prefix)
        if not os.path.isdir(base):
            return []
        out = []
        for dirpath, _, files in os.walk(base):
            for name in files:
                if not name.startswith(".tmp-"):
                    out.append(os.path.relpath(os.path.join(dirpath, name), self.root))
        return sorted(out)

    def uri(self, rel: str) -> str:
        return self._abs(rel)


@dataclass(frozen=True)
class S3FileStore(FileStore):
    bucket: str
    prefix: str
    endpoint: Optional[str] = None
    region: Optional[str] = None
    access_key: Optional[str] = field(default=None, repr=False)
    secret_key: Optional[str] = field(default=None, repr=False)

    def _client(self):
        """The process's boto3 client for this store's settings (one per process and settings,
        :mod:`state_backends.s3_clients`; it was one per request)."""
        settings = ("file-store", self.endpoint, self.region, self.access_key, self.secret_key)
        return shared_client(settings, self._make_client)

    def _make_client(self):
        try:
            import boto3
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise SinkError("S3 output needs boto3: pip install 'barrier-kafka[s3]'") from exc
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key)

    def _key(self, rel: str) -> str:
        return f"{self.prefix.strip('/')}/{rel}" if self.prefix.strip("/") else rel

    def _call(self, what: str, rel: str, fn):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn()
        except (ClientError, BotoCoreError) as exc:
            raise SinkError(describe_s3_error(what, self.bucket, self._key(rel), exc)) from None

    def put(self, rel: str, data: bytes) -> None:
        self._call("put", rel, lambda: self._client().put_object(
            Bucket=self.bucket, Key=self._key(rel), Body=data))

    def get(self, rel: str) -> bytes:
        return self._call("get", rel, lambda: self._client().get_object(
            Bucket=self.bucket, Key=self._key(rel))["Body"].read())

    def exists(self, rel: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client().head_object(Bucket=self.bucket, Key=self._key(rel))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise SinkError(describe_s3_error("check", self.bucket, self._key(rel), exc)) \
                from None

    def publish(self, staged: str, final: str) -> None:
        if self.exists(final):
            self.delete(staged)  # a crash between copy and delete left the staged copy
            return
        client = self._client()
        self._call("copy", final, lambda: client.copy_object(
            Bucket=self.bucket, Key=self._key(final),
            CopySource={"Bucket": self.bucket, "Key": self._key(staged)}))
        self.delete(staged)

    def delete(self, rel: str) -> None:
        self._call("delete", rel, lambda: self._client().delete_object(
            Bucket=self.bucket, Key=self._key(rel)))

    def list(self, prefix: str) -> List[str]:
        client = self._client()
        out, token = [], None
        base = self._key(prefix)
        while True:
            kw = {"Bucket": self.bucket, "Prefix": base}
            if token:
                kw["ContinuationToken"] = token
            resp = self._call("list", prefix, lambda: client.list_objects_v2(**kw))
            root = self._key("")
            out += [o["Key"][len(root):] if root else o["Key"] for o in resp.get("Contents", [])]
            if not resp.get("IsTruncated"):
                return sorted(out)
            token = resp["NextContinuationToken"]

    def uri(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self._key(rel)}"


def file_store_from_path(path: str, options: Dict[str, str]) -> FileStore:
    """``/local/dir``, ``file:///dir`` or ``s3://bucket/prefix`` (+ s3.* options)."""
    if not path:
        raise InvalidOptionError("The barrier-files sink needs option 'path'.")
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return LocalFileStore(os.path.abspath(parsed.path if parsed.scheme else path))
    if parsed.scheme in ("s3", "s3a"):
        lowered = {k.lower(): v for k, v in options.items()}
        return S3FileStore(parsed.netloc, parsed.path.lstrip("/"), lowered.get("s3.endpoint"),
                           lowered.get("s3.region"), lowered.get("s3.access.key"),
                           lowered.get("s3.secret.key"))
    raise InvalidOptionError(f"Option 'path' = {path!r}: scheme {parsed.scheme!r} is not "
                             "supported; use a local path, file:// or s3://.")

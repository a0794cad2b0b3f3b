"""Choosing a backend from a URI: ``backend_from_uri(uri, options)`` (driver).

=========================  ============================================================
``memory://<name>``        :class:`MemoryStateBackend` (process-local; tests)
``file:///abs/path``       :class:`FilesystemStateBackend` (a plain absolute path works too)
``s3://bucket/prefix``     :class:`S3StateBackend`; options ``s3.endpoint``,
                           ``s3.access.key``, ``s3.secret.key``, ``s3.session.token``,
                           ``s3.region``, ``s3.path.style``, ``s3.connect.timeout.ms``,
                           ``s3.read.timeout.ms``, ``s3.max.attempts``
=========================  ============================================================

Option names are case-insensitive. Unknown ``s3.*`` options fail with
``InvalidBackendOptionError`` naming the option; options of other prefixes are ignored (the
sinks pass their whole option map).
"""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Type
from urllib.parse import unquote, urlparse

from state_backends.base import StateBackend
from state_backends.exceptions import InvalidBackendOptionError
from state_backends.filesystem import FilesystemStateBackend
from state_backends.memory import MemoryStateBackend
from state_backends.s3 import S3Options, S3StateBackend

SUPPORTED_BACKENDS: List[Type[StateBackend]] = [
    MemoryStateBackend, FilesystemStateBackend, S3StateBackend]

S3_OPTIONS: Dict[str, str] = {
    "s3.endpoint": "endpoint URL of an S3-compatible server (e.g. http://127.0.0.1:9000)",
    "s3.access.key": "access key id (with s3.secret.key)",
    "s3.secret.key": "secret access key (never logged)",
    "s3.session.token": "session token of temporary credentials",
    "s3.region": "bucket region, e.g. us-east-1",
    "s3.path.style": "true to use path-style addressing",
    "s3.connect.timeout.ms": "connect timeout (default 10000)",
    "s3.read.timeout.ms": "read timeout (default 60000)",
    "s3.max.attempts": "attempts per request including retries (default 3)",
}


def _bool(name: str, value: str) -> bool:
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise InvalidBackendOptionError(f"option {name}={value!r} must be true or false")


def _num(name: str, value: str, cast=int):
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise InvalidBackendOptionError(f"option {name}={value!r} must be a number") from None


def s3_options_from(options: Optional[Mapping[str, str]]) -> S3Options:
    """Parse the ``s3.*`` entries of ``options`` into :class:`S3Options`."""
    s3 = {k.lower(): v for k, v in (options or {}).items() if k.lower().startswith("s3.")}
    unknown = sorted(set(s3) - set(S3_OPTIONS))
    if unknown:
        raise InvalidBackendOptionError(
            f"unknown S3 option(s) {', '.join(unknown)}; supported: {', '.join(S3_OPTIONS)}")
    kwargs = {}
    if "s3.endpoint" in s3:
        kwargs["endpoint_url"] = s3["s3.endpoint"]
    if "s3.access.key" in s3:
        kwargs["access_key"] = s3["s3.access.key"]
    if "s3.secret.key" in s3:
        kwargs["secret_key"] = s3["s3.secret.key"]
    if "s3.session.token" in s3:
        kwargs["session_token"] = s3["s3.session.token"]
    if "s3.region" in s3:
        kwargs["region"] = s3["s3.region"]
    if "s3.path.style" in s3:
        kwargs["path_style"] = _bool("s3.path.style", s3["s3.path.style"])
    if "s3.connect.timeout.ms" in s3:
        kwargs["connect_timeout_s"] = _num("s3.connect.timeout.ms",
                                           s3["s3.connect.timeout.ms"], float) / 1000
    if "s3.read.timeout.ms" in s3:
        kwargs["read_timeout_s"] = _num("s3.read.timeout.ms", s3["s3.read.timeout.ms"],
                                        float) / 1000
    if "s3.max.attempts" in s3:
        kwargs["max_attempts"] = _num("s3.max.attempts", s3["s3.max.attempts"])
    return S3Options(**kwargs)


def backend_from_uri(uri: str, options: Optional[Mapping[str, str]] = None) -> StateBackend:
    """Return the backend for ``uri`` (runs on the driver; the result is picklable).

    Parameters
    ----------
    uri : str
        ``memory://name``, ``file:///abs/path`` (or ``/abs/path``), ``s3://bucket/prefix``.
    options : dict, optional
        Backend options, e.g. ``{"s3.endpoint": ..., "s3.access.key": ...}``.

    Raises
    ------
    InvalidBackendOptionError
        Unknown scheme, relative path, missing bucket or unknown ``s3.*`` option.
    """
    if not uri or not isinstance(uri, str):
        raise InvalidBackendOptionError(f"state backend URI must be a non-empty string, got {uri!r}")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        path = os.path.expanduser(uri)
        if not os.path.isabs(path):
            raise InvalidBackendOptionError(
                f"state backend path {uri!r} is relative; use an absolute path or file:///abs/path")
        return FilesystemStateBackend(path)
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidBackendOptionError(
                f"file URI {uri!r} names host {parsed.netloc!r}; use file:///abs/path")
        return FilesystemStateBackend(unquote(parsed.path))
    if scheme == "memory":
        name = (parsed.netloc + parsed.path).strip("/") or "default"
        return MemoryStateBackend(name)
    if scheme in ("s3", "s3a"):
        if not parsed.netloc:
            raise InvalidBackendOptionError(f"S3 URI {uri!r} has no bucket; use s3://bucket/prefix")
        return S3StateBackend(parsed.netloc, parsed.path.strip("/"), s3_options_from(options))
    raise InvalidBackendOptionError(
        f"unsupported state backend URI scheme {scheme!r} in {uri!r}; supported: memory://, "
        "file://, s3://")

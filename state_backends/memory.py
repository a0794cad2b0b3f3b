"""``MemoryStateBackend``: objects in a process-local dict, snapshots inline in the handles.

For unit tests and small state. Snapshots travel inside the acknowledgements
(``inline_snapshots=True``), so executors never need the driver's memory; everything the
driver-side stores (metadata, stats, pending checkpoints) lives in a registry keyed by the
backend's name, shared by every instance with that name *in the same Python process*.

Notes
-----
PySpark runs ``writer.commit`` in short-lived Python workers: a memory backend's content does not
survive from one worker process to the next. Use it with Spark only where that is acceptable.
"""

from __future__ import annotations

import threading
from typing import Dict, List

from state_backends.base import StateBackend, normalize_path, under_prefix
from state_backends.exceptions import SnapshotNotFoundError

_REGISTRY: Dict[str, Dict[str, bytes]] = {}
_LOCK = threading.Lock()


def _store(name: str) -> Dict[str, bytes]:
    with _LOCK:
        return _REGISTRY.setdefault(name, {})


def clear_memory_backend(name: str) -> None:
    """Forget everything stored under ``name`` in this process (tests)."""
    with _LOCK:
        _REGISTRY.pop(name, None)


class MemoryStateBackend(StateBackend):
    """In-memory backend ``memory://<name>``; picklable (only the name travels)."""

    inline_snapshots = True
    scheme = "memory"

    def __init__(self, name: str = "default") -> None:
        if not name or "/" in name:
            from state_backends.exceptions import InvalidBackendOptionError

            raise InvalidBackendOptionError(
                f"memory backend name {name!r} must be non-empty and contain no '/'")
        self.name = name

    @property
    def _objects(self) -> Dict[str, bytes]:
        return _store(self.name)

    def put(self, path: str, data: bytes) -> None:
        self._objects[normalize_path(path)] = bytes(data)

    def get(self, path: str) -> bytes:
        key = normalize_path(path)
        try:
            return self._objects[key]
        except KeyError:
            raise SnapshotNotFoundError(f"no object at {self.location(key)}") from None

    def exists(self, path: str) -> bool:
        return normalize_path(path) in self._objects

    def list(self, prefix: str = "") -> List[str]:
        prefix = normalize_path(prefix, allow_root=True)
        return sorted(k for k in list(self._objects) if under_prefix(k, prefix))

    def delete_prefix(self, prefix: str) -> None:
        for key in self.list(prefix):
            self._objects.pop(key, None)

    def describe(self) -> str:
        return f"memory://{self.name}"

    def __repr__(self) -> str:
        return f"MemoryStateBackend({self.name!r})"

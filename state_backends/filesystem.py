"""``FilesystemStateBackend``: a local or mounted directory.

``put`` is atomic and durable: the bytes go to a temp file in the target directory, which is
fsync'ed and renamed over the target, then the directory is fsync'ed. ``put_deferred`` leaves
that last step to ``make_durable``, which syncs each folder once for many files (the keyed
operator's snapshots of one call, :mod:`barrier_ops.snapshot_uploads`). A crash leaves either the
old object, the new one, or an ignorable ``.tmp-`` file (never listed, removed with its folder).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import uuid
from typing import List

from state_backends.base import StateBackend, normalize_path
from state_backends.exceptions import InvalidBackendOptionError, SnapshotNotFoundError, \
    StateBackendError

logger = logging.getLogger(__name__)

TMP_MARK = ".tmp-"


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


class FilesystemStateBackend(StateBackend):
    """Backend rooted at an absolute directory ``root`` (created on first write).

    Runs on the driver and on executors (the directory must be shared, e.g. a mount, when
    executors run on other hosts). Picklable.
    """

    scheme = "file"
    overlap_uploads = False

    def __init__(self, root: str, fsync: bool = True) -> None:
        if not os.path.isabs(root):
            raise InvalidBackendOptionError(
                f"filesystem backend root {root!r} must be an absolute path")
        self.root = os.path.normpath(root)
        self.fsync = fsync

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, *normalize_path(path).split("/"))

    def put(self, path: str, data: bytes) -> None:
        self.put_deferred(path, data)
        self.make_durable([path])

    def put_deferred(self, path: str, data: bytes) -> None:
        """Write ``data`` to a temporary file in ``path``'s folder, fsync it and rename it over
        ``path``; the folder (which records the rename) is synced by :meth:`make_durable`. The
        folder is created only when the write finds it missing."""
        target = self._abs(path)
        directory = os.path.dirname(target)
        tmp = os.path.join(directory, f"{TMP_MARK}{os.path.basename(target)}.{uuid.uuid4().hex}")
        try:
            try:
                f = open(tmp, "wb")
            except FileNotFoundError:
                os.makedirs(directory, exist_ok=True)
                f = open(tmp, "wb")
            with f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise StateBackendError(f"could not write {self.location(path)}: {exc.strerror}") \
                from exc

    def make_durable(self, paths: List[str]) -> None:
        """Sync each folder of ``paths`` once (the renames of :meth:`put_deferred`)."""
        if not self.fsync:
            return
        for directory in sorted({os.path.dirname(self._abs(p)) for p in paths}):
            _fsync_dir(directory)

    def get(self, path: str) -> bytes:
        target = self._abs(path)
        try:
            with open(target, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"no object at {self.location(path)}") from None
        except IsADirectoryError:
            raise SnapshotNotFoundError(f"no object at {self.location(path)} (a folder)") from None
        except OSError as exc:
            raise StateBackendError(f"could not read {self.location(path)}: {exc.strerror}") \
                from exc

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._abs(path))

    def list(self, prefix: str = "") -> List[str]:
        rel = normalize_path(prefix, allow_root=True)
        base = self._abs(rel) if rel else self.root
        if os.path.isfile(base):
            return [rel]
        out = []
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                if name.startswith(TMP_MARK):
                    continue
                full = os.path.join(dirpath, name)
                out.append(os.path.relpath(full, self.root).replace(os.sep, "/"))
        return sorted(out)

    def delete_prefix(self, prefix: str) -> None:
        rel = normalize_path(prefix, allow_root=True)
        target = self._abs(rel) if rel else self.root
        try:
            if os.path.isdir(target):
                shutil.rmtree(target)
            else:
                os.unlink(target)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise StateBackendError(f"could not delete {self.location(rel)}: "
                                        f"{exc.strerror}") from exc

    def delete(self, paths: List[str]) -> None:
        """Delete exactly ``paths``, then the folders they leave empty (up to the root), so a
        long-running job's storage does not fill with empty ``chk-<n>`` folders."""
        folders = set()
        for p in paths:
            self.delete_prefix(p)
            folders.add(os.path.dirname(self._abs(normalize_path(p))))
        for folder in sorted(folders, key=len, reverse=True):
            while folder.startswith(self.root + os.sep):
                try:
                    os.rmdir(folder)
                except OSError:
                    break  # not empty (or gone): its parents are not empty either
                folder = os.path.dirname(folder)

    def describe(self) -> str:
        return f"file://{self.root}"

    def __repr__(self) -> str:
        return f"FilesystemStateBackend({self.root!r})"

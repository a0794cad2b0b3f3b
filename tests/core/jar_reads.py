"""What one ``importlib.invalidate_caches()`` reads from disk: the archives whose directory a
zipimporter read again (tests; also run inside PySpark workers by the integration tests)."""

from __future__ import annotations

from typing import List


def archives_read_on_invalidation(times: int = 1) -> List[str]:
    """Run ``importlib.invalidate_caches()`` ``times`` times, as PySpark 4.0/4.1 do before every
    task; the archive of each directory read, once per read."""
    import importlib
    import zipimport

    reads: List[str] = []
    original = zipimport._read_directory

    def counted(archive):
        reads.append(archive)
        return original(archive)

    zipimport._read_directory = counted
    try:
        for _ in range(times):
            importlib.invalidate_caches()
    finally:
        zipimport._read_directory = original
    return reads

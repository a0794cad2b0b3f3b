"""kafka-python's CRC-32C package imported without a walk through Spark's jars (every Python
worker that uses kafka-python: driver planner workers, driver commit worker, executors).

kafka-python computes record-batch checksums with the ``crc32c`` package, which it imports with
itself. That package's ``__init__`` reads its own version with ``importlib.metadata.version``,
and ``importlib.metadata`` looks for a distribution through every ``sys.path`` entry in order
until it finds one. In a PySpark worker that path starts with Spark's jars, ahead of
site-packages: spark-core's (about 6,000 entries, always there) and those of ``--packages``.
Listing them cost 40-100 ms in each worker process that imported kafka-python, and a query
starts three or more such processes on the driver (the source's runner, the sink's planner and
its commit runner) before its first batch.

:func:`install` (called by ``barrier_core/__init__``) adds a finder to ``sys.meta_path`` that
waits for the first ``import kafka`` and, just before it, imports ``crc32c`` with the ``.jar``
entries left out of ``sys.path``, then removes itself. Guarantees:

* it only acts in a process whose ``sys.path`` holds a ``.jar`` when this package is imported
  (a PySpark worker), and once: the finder is gone after the first ``import kafka``;
* ``sys.path`` is the same list in the same order afterwards; entries added meanwhile are kept;
* ``crc32c`` comes from where it would have come from (site-packages; it is never in a jar),
  and a missing ``crc32c`` is left to kafka-python, which falls back to its own code as before.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Optional


def _is_jar(entry: str) -> bool:
    return isinstance(entry, str) and entry.endswith(".jar")


class _Crc32cBeforeKafka(importlib.abc.MetaPathFinder):
    """Finds nothing; on the first lookup of ``kafka`` it imports ``crc32c`` first."""

    def find_spec(self, fullname, path, target=None):  # noqa: D401 (importlib's name)
        if fullname == "kafka":
            _remove()
            import_without_jars("crc32c")
        return None


_FINDER: Optional[_Crc32cBeforeKafka] = None


def install() -> None:
    """Put the finder on ``sys.meta_path`` when ``sys.path`` holds a jar and neither ``kafka``
    nor ``crc32c`` is imported yet; otherwise do nothing."""
    global _FINDER
    if _FINDER is not None or "kafka" in sys.modules or "crc32c" in sys.modules:
        return
    if not any(_is_jar(entry) for entry in sys.path):
        return
    _FINDER = _Crc32cBeforeKafka()
    sys.meta_path.insert(0, _FINDER)


def _remove() -> None:
    global _FINDER
    if _FINDER is not None and _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    _FINDER = None


def import_without_jars(name: str) -> None:
    """Import ``name`` with ``sys.path``'s ``.jar`` entries left out, then put them back where
    they were; an ``ImportError`` is swallowed (the caller's own import decides what to do)."""
    if name in sys.modules:
        return
    saved = list(sys.path)
    sys.path[:] = [entry for entry in saved if not _is_jar(entry)]
    try:
        __import__(name)
    except ImportError:
        pass
    finally:
        added = [entry for entry in sys.path if entry not in saved]
        sys.path[:] = saved + added

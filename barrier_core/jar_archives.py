"""Spark's jars on a Python worker's path, their directories read once per process instead of
once per task (executors, driver planner workers, driver commit worker).

PySpark puts jars on every Python worker's ``sys.path``, ahead of site-packages: spark-core's
(about 6,000 entries, always there) and those of ``--jars`` / ``--packages``. Python imports
from a jar through a ``zipimport.zipimporter`` kept in ``sys.path_importer_cache``, created the
first time an import looks past that entry. PySpark 4.0 and 4.1 begin every task a reused
worker runs with ``importlib.invalidate_caches()`` (``pyspark.worker_util.setup_spark_files``;
4.2 and later only when the task adds a file to the path), and a zipimporter's
``invalidate_caches`` reads its archive's whole central directory again, in pure Python: 31 ms
for spark-core's jar and 20 ms for kafka-clients' on this machine, 43-150 ms per task in the
workers of ``benchmarks/bench_pipeline.py``, several tasks a micro-batch. Spark's own pipeline,
which runs no Python, pays none of it.

:func:`keep_jar_directories` swaps each such importer of a ``.jar`` for a
:class:`JarImporter`: the same archive, the same prefix, the same directory (zipimport's own
cache, so nothing is read again), except that ``invalidate_caches`` leaves the directory as it
is. Guarantees:

* only importers of ``.jar`` archives are replaced; ``.zip`` and ``.egg`` files a job adds with
  ``addPyFile``, and every directory on the path, are still refreshed on each task as before;
* imports from a jar find exactly what they found before: ``JarImporter`` is a
  ``zipimporter`` (``find_spec``, loaders, ``pkgutil`` and resources behave the same);
* a jar is read once per worker process: a jar rewritten in place under a running worker (Spark
  fetches each job file once per name) would not have its new Python modules seen until the
  worker restarts.
"""

from __future__ import annotations

import sys
import zipimport


class JarImporter(zipimport.zipimporter):
    """A ``zipimporter`` of a jar whose directory ``importlib.invalidate_caches`` does not
    read again."""

    def invalidate_caches(self) -> None:
        """Keep the directory: a jar does not change under a running worker."""


def keep_jar_directories() -> int:
    """Replace the plain zipimporters of ``.jar`` archives in ``sys.path_importer_cache`` by
    :class:`JarImporter` (cheap: zipimport keeps each archive's directory, so none is read);
    returns how many were replaced. Safe to call on every task: a few microseconds when there is
    nothing to replace."""
    replaced = 0
    for entry, finder in list(sys.path_importer_cache.items()):
        if type(finder) is zipimport.zipimporter and finder.archive.endswith(".jar"):
            try:
                sys.path_importer_cache[entry] = JarImporter(entry)
            except zipimport.ZipImportError:
                continue   # the archive went away: leave the entry as it was
            replaced += 1
    return replaced

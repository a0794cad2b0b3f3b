"""In a real PySpark Python worker, Spark's jars are on ``sys.path`` with zipimporters, and once
the worker has loaded barrier_core an ``importlib.invalidate_caches()`` (what PySpark 4.0 and
4.1 run before every task) reads none of them again (barrier_core.jar_archives). Also in the
PySpark compatibility matrix (integration_tests/test_pyspark_versions.py)."""

from __future__ import annotations

import json


def _probe(_):
    """Executor: the jar importers of this worker and the archives one invalidation reads."""
    import sys
    import zipimport

    import barrier_core  # noqa: F401 - what every task of the source, operator and sinks loads
    from tests.core.jar_reads import archives_read_on_invalidation

    jars = {path: type(finder).__name__ for path, finder in sys.path_importer_cache.items()
            if isinstance(finder, zipimport.zipimporter) and finder.archive.endswith(".jar")}
    yield json.dumps({"jars": jars, "reads": archives_read_on_invalidation()})


def test_a_worker_with_barrier_core_loaded_reads_no_jar_on_invalidation(spark):
    seen = [json.loads(s) for s in spark.sparkContext.parallelize(range(2), 2)
            .mapPartitions(_probe).collect()]
    for one in seen:
        assert any("spark-core" in path for path in one["jars"]), one["jars"]
        assert set(one["jars"].values()) == {"JarImporter"}, one["jars"]
        assert not [a for a in one["reads"] if a.endswith(".jar")], one["reads"]

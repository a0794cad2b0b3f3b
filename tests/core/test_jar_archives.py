"""Spark's jars on a Python worker's path are read once per process, not on every
importlib.invalidate_caches() (barrier_core.jar_archives): PySpark 4.0 and 4.1 call it at the
start of every task, and each zipimporter of a jar then read its whole directory again (31 ms for
spark-core's jar here; the exactly-once pipeline ran at 0.41x Spark's own on PySpark 4.0.5
with it, 0.70x without)."""

from __future__ import annotations

import json
import os
import zipfile

from tests.core.fresh_interpreter import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_INVALIDATE_AND_COUNT = """
    import json, pkgutil, sys, zipimport
    sys.path[:0] = [{jar!r}, {egg!r}]
    import in_the_jar, in_the_zip     # zipimporters for both, as a worker's first imports make
    {imports}
    sys.path.append({root!r})                   # this repository, for the helper below
    from tests.core.jar_reads import archives_read_on_invalidation
    reads = archives_read_on_invalidation(2)   # what PySpark 4.0/4.1 run before every task
    import also_in_the_jar
    print(json.dumps({{
        "reads": reads,
        "jar_importer": type(sys.path_importer_cache[{jar!r}]).__name__,
        "is_zipimporter": isinstance(sys.path_importer_cache[{jar!r}], zipimport.zipimporter),
        "zip_importer": type(sys.path_importer_cache[{egg!r}]).__name__,
        "values": [in_the_jar.VALUE, also_in_the_jar.VALUE, in_the_zip.VALUE],
        "listed": sorted(m.name for m in pkgutil.iter_modules([{jar!r}])),
    }}))
"""


def _archives(tmp_path):
    """A jar with many entries and two modules (as spark-core's, ahead of site-packages) and a
    zip of the kind ``addPyFile`` ships."""
    jar, egg = tmp_path / "spark-core-like.jar", tmp_path / "job-files.zip"
    with zipfile.ZipFile(jar, "w") as z:
        for i in range(2000):
            z.writestr(f"org/apache/spark/C{i}.class", b"")
        z.writestr("in_the_jar.py", "VALUE = 7\n")
        z.writestr("also_in_the_jar.py", "VALUE = 8\n")
    with zipfile.ZipFile(egg, "w") as z:
        z.writestr("in_the_zip.py", "VALUE = 9\n")
    return str(jar), str(egg)


def _run(tmp_path, imports):
    jar, egg = _archives(tmp_path)
    code = _INVALIDATE_AND_COUNT.format(jar=jar, egg=egg, root=ROOT, imports=imports)
    return jar, egg, json.loads(run_python(code))


def test_with_barrier_core_loaded_a_jar_is_not_read_again(tmp_path):
    jar, egg, seen = _run(tmp_path, "import barrier_core")
    assert jar not in seen["reads"]
    assert seen["reads"].count(egg) == 2          # a job's zip is still refreshed every time
    assert seen["jar_importer"] == "JarImporter" and seen["is_zipimporter"]
    assert seen["zip_importer"] == "zipimporter"
    assert seen["values"] == [7, 8, 9]             # imports from the jar work as before
    assert seen["listed"] == ["also_in_the_jar", "in_the_jar"]


def test_without_it_every_invalidation_reads_the_jar_again(tmp_path):
    # What a PySpark 4.0/4.1 worker does before every task: the cost the module removes.
    jar, _, seen = _run(tmp_path, "pass")
    assert seen["reads"].count(jar) == 2
    assert seen["jar_importer"] == "zipimporter"


def test_a_jar_first_imported_from_after_the_package_loaded_is_kept_at_the_next_task(tmp_path):
    # barrier_core is imported before the worker looked into the jar; the next task's call
    # (the source, the operator and the sinks call keep_jar_directories() at their start)
    # replaces the importer created since.
    jar = str(tmp_path / "spark-core-like.jar")
    imports = ("import barrier_core\n"
               "    from barrier_core.jar_archives import keep_jar_directories\n"
               "    sys.path_importer_cache[{jar!r}] = zipimport.zipimporter({jar!r})\n"
               "    assert keep_jar_directories() == 1\n"
               "    assert keep_jar_directories() == 0").format(jar=jar)
    jar, _, seen = _run(tmp_path, imports)
    assert jar not in seen["reads"] and seen["jar_importer"] == "JarImporter"


def test_an_archive_that_went_away_is_left_as_it_was(tmp_path):
    jar, _ = _archives(tmp_path)
    out = run_python(f"""
        import os, sys, zipimport
        sys.path.insert(0, {jar!r})
        import in_the_jar
        os.remove({jar!r})
        from barrier_core.jar_archives import keep_jar_directories
        print(keep_jar_directories(), type(sys.path_importer_cache[{jar!r}]).__name__)
    """)
    assert out == "0 zipimporter"   # not replaced, and no error: the worker goes on as before

"""kafka-python's crc32c package is imported without importlib.metadata listing Spark's jars
(barrier_core.crc32c_import): in a PySpark worker those jars come first on sys.path, and the
listing cost 40-100 ms in every worker process that imported kafka-python."""

from __future__ import annotations

import json
import zipfile

from tests.core.fresh_interpreter import run_python

_RECORD_LOOKUPS = """
    import importlib.metadata, json, sys
    looked = []
    original = importlib.metadata.Lookup.__init__
    def listing(self, path):
        looked.append(path.root)
        original(self, path)
    importlib.metadata.Lookup.__init__ = listing
    sys.path.insert(0, {jar!r})
    before = list(sys.path)
    {imports}
    import kafka
    import in_the_jar
    print(json.dumps({{"looked": looked, "same_path": sys.path == before,
                       "crc32c": sys.modules["crc32c"].__file__,
                       "finders": [type(f).__name__ for f in sys.meta_path],
                       "jar_module": in_the_jar.VALUE}}))
"""


def _jar(tmp_path):
    """A jar with many entries, ahead of site-packages as Spark's are, holding a module."""
    jar = tmp_path / "spark-core-like.jar"
    with zipfile.ZipFile(jar, "w") as z:
        for i in range(2000):
            z.writestr(f"org/apache/spark/C{i}.class", b"")
        z.writestr("in_the_jar.py", "VALUE = 7\n")
    return str(jar)


def _run(tmp_path, imports):
    jar = _jar(tmp_path)
    return jar, json.loads(run_python(_RECORD_LOOKUPS.format(jar=jar, imports=imports)))


def test_with_barrier_core_loaded_kafka_python_lists_no_jar(tmp_path):
    jar, seen = _run(tmp_path, "import barrier_core")
    assert jar not in seen["looked"] and seen["looked"], seen["looked"]
    assert seen["same_path"] and seen["jar_module"] == 7
    assert "site-packages" in seen["crc32c"]
    assert "_Crc32cBeforeKafka" not in seen["finders"]  # gone after the first import kafka


def test_without_it_the_jar_is_listed(tmp_path):
    # What happens in a worker without barrier_core: the cost the module removes.
    jar, seen = _run(tmp_path, "pass")
    assert jar in seen["looked"]


def test_a_process_without_jars_gets_no_finder():
    out = run_python("""
        import sys
        sys.path[:] = [p for p in sys.path if not p.endswith(".jar")]
        import barrier_core
        print([type(f).__name__ for f in sys.meta_path])
    """)
    assert "_Crc32cBeforeKafka" not in out

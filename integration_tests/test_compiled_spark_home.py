"""The tests' Spark home (kafka_harness.compiled_spark_home): Python workers import PySpark as
bytecode from a copy of pyspark.zip that has a checked pyc beside each module; the home links
everything else of the installed PySpark and is never offered half-built."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from kafka_harness import compiled_spark_home


def test_the_session_workers_import_pyspark_as_bytecode(spark):
    home = compiled_spark_home.home_path()
    chosen = os.environ.get("SPARK_HOME", "")
    if chosen and not chosen.startswith(str(home.parent)):
        pytest.skip(f"SPARK_HOME={chosen} was set before the run: the tests use it as it is")
    assert chosen == str(home), "pytest_sessionstart set no compiled home"

    def where(_):
        import sys as worker_sys

        yield worker_sys.modules["pyspark.worker"].__file__

    files = set(spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect())
    assert files == {str(home / "python" / "lib" / "pyspark.zip" / "pyspark" / "worker.pyc")}


def _fake_pyspark(root):
    """A PySpark-shaped Spark home: jars, bin, python/lib with pyspark.zip and py4j's zip."""
    for folder in ("jars", "bin", "python/lib", "python/pyspark"):
        os.makedirs(root / folder)
    (root / "jars" / "spark-core.jar").write_bytes(b"jar")
    (root / "python" / "lib" / "py4j-src.zip").write_bytes(b"py4j")
    with zipfile.ZipFile(root / "python" / "lib" / "pyspark.zip", "w") as z:
        z.writestr("pyspark/", b"")
        z.writestr("pyspark/__init__.py", b"")
        z.writestr("pyspark/answer.py", b"def value():\n    return 42\n")
        z.writestr("pyspark/broken.py", b"def (:\n")  # keeps its source only
    return root


def test_the_home_links_the_install_and_compiles_each_module(monkeypatch, tmp_path):
    monkeypatch.setenv("BARRIER_KAFKA_CACHE", str(tmp_path / "cache"))
    fake = _fake_pyspark(tmp_path / "pyspark")
    monkeypatch.setattr(compiled_spark_home, "installed_home", lambda: fake)
    home = compiled_spark_home.ensure_home()
    assert home == compiled_spark_home.home_path() and home.is_dir()
    assert os.path.realpath(home / "jars") == str(fake / "jars")
    assert os.path.realpath(home / "python" / "lib" / "py4j-src.zip") == \
        str(fake / "python" / "lib" / "py4j-src.zip")
    zipped = home / "python" / "lib" / "pyspark.zip"
    assert not zipped.is_symlink()
    with zipfile.ZipFile(zipped) as z:
        names = set(z.namelist())
        flags = int.from_bytes(z.read("pyspark/answer.pyc")[4:8], "little")
    assert names == {"pyspark/", "pyspark/__init__.py", "pyspark/__init__.pyc", "pyspark/answer.py",
                     "pyspark/answer.pyc", "pyspark/broken.py"}
    assert flags == 0b11  # hash-based and checked against the source on every import
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import pyspark.answer as a; "
             "print(a.__file__, a.value.__code__.co_filename, a.value())")
    out = subprocess.run([sys.executable, "-c", probe, str(zipped)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [f"{zipped}/pyspark/answer.pyc", f"{zipped}/pyspark/answer.py", "42"]
    assert [p.name for p in home.parent.iterdir()] == [home.name]  # no staging folder left
    assert compiled_spark_home.ensure_home() == home  # built once, then reused


def test_a_failed_build_offers_no_home_and_leaves_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("BARRIER_KAFKA_CACHE", str(tmp_path / "cache"))
    fake = _fake_pyspark(tmp_path / "pyspark")
    (fake / "python" / "lib" / "pyspark.zip").write_bytes(b"not a zip")
    monkeypatch.setattr(compiled_spark_home, "installed_home", lambda: fake)
    assert compiled_spark_home.ensure_home() is None
    assert os.listdir(tmp_path / "cache" / "spark-home") == []


@pytest.mark.parametrize("compiled", [True, False])
def test_the_cluster_harness_uses_the_compiled_home_only_when_the_tests_chose_it(
        monkeypatch, compiled):
    from kafka_harness.spark_cluster import spark_home

    home = str(compiled_spark_home.home_path())
    monkeypatch.setenv("SPARK_HOME", home if compiled else "/opt/some/other/spark")
    expected = home if compiled else str(compiled_spark_home.installed_home())
    assert spark_home() == expected

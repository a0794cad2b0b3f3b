"""The compiled Spark home (barrier_kafka.spark_home): Python workers import PySpark and py4j as
bytecode from their zips' files, extracted into folders of the zips' names with their bytecode
cached; the home links everything else of its Spark home, is never offered half-built, follows
PySpark upgrades, and a stale one is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

import barrier_kafka
from barrier_kafka import spark_home
from barrier_kafka.spark_home import SparkHomeError


def test_the_session_workers_import_pyspark_as_bytecode(spark):
    home = spark_home.home_path(spark_home.installed_home())
    chosen = os.environ.get("SPARK_HOME", "")
    if chosen and not chosen.startswith(str(home.parent)):
        pytest.skip(f"SPARK_HOME={chosen} was set before the run: the tests use it as it is")
    assert chosen == str(home), "pytest_sessionstart set no compiled home"

    def where(_):
        import sys as worker_sys

        module = worker_sys.modules["pyspark.worker"]
        gateway = worker_sys.modules["py4j.java_gateway"]   # py4j's bytecode, from its folder
        yield (module.__file__, module.__spec__.cached,
               gateway.__spec__.cached is not None and gateway.__file__.startswith(str(home)))

    files = set(spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect())
    folder = home / "python" / "lib" / "pyspark.zip"
    tag = sys.implementation.cache_tag
    assert files == {(str(folder / "pyspark" / "worker.py"),
                      str(folder / "pyspark" / "__pycache__" / f"worker.{tag}.pyc"),
                      True)}


def _fake_pyspark(root):
    """A PySpark-shaped Spark home: jars, bin, python/lib with pyspark.zip, py4j's zip and a
    file that is neither."""
    for folder in ("jars", "bin", "python/lib", "python/pyspark"):
        os.makedirs(root / folder)
    (root / "jars" / "spark-core.jar").write_bytes(b"jar")
    (root / "version.py").write_text('__version__: str = "9.8.7"\n')
    (root / "python" / "lib" / "README").write_text("not a zip: linked")
    with zipfile.ZipFile(root / "python" / "lib" / "py4j-0.1.2-src.zip", "w") as z:
        z.writestr("py4j/__init__.py", b"")
        z.writestr("py4j/java_gateway.py", b"GATEWAY = 'gw'\n")
    _write_zip(root, b"def value():\n    return 42\n")
    return root


def _write_zip(root, answer: bytes):
    with zipfile.ZipFile(root / "python" / "lib" / "pyspark.zip", "w") as z:
        z.writestr("pyspark/", b"")
        z.writestr("pyspark/__init__.py", b"")
        z.writestr("pyspark/answer.py", answer)
        z.writestr("pyspark/broken.py", b"def (:\n")  # keeps its source only


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A fake Spark home chosen by ``SPARK_HOME``, and an empty cache."""
    monkeypatch.setenv("BARRIER_KAFKA_CACHE", str(tmp_path / "cache"))
    root = _fake_pyspark(tmp_path / "pyspark")
    monkeypatch.setenv("SPARK_HOME", str(root))
    return root


def test_the_home_links_the_install_and_compiles_each_module(fake, tmp_path):
    home = spark_home.compiled_spark_home()
    assert home == spark_home.home_path() and home.is_dir()
    assert home.parent == tmp_path / "cache" / "spark-home" and home.name.startswith("9.8.7-")
    assert os.path.realpath(home / "jars") == str(fake / "jars")
    assert os.path.realpath(home / "python" / "lib" / "README") == \
        str(fake / "python" / "lib" / "README")
    folder = home / "python" / "lib" / "pyspark.zip"
    assert folder.is_dir() and not folder.is_symlink()
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    tag = sys.implementation.cache_tag
    assert files == ["pyspark/__init__.py", f"pyspark/__pycache__/__init__.{tag}.pyc",
                     f"pyspark/__pycache__/answer.{tag}.pyc", "pyspark/answer.py",
                     "pyspark/broken.py"]  # broken.py keeps only its source, as in the zip
    assert (folder / "pyspark" / "answer.py").read_bytes() == b"def value():\n    return 42\n"
    probe = ("import sys; sys.dont_write_bytecode = True; sys.path.insert(0, sys.argv[1]); "
             "import pyspark.answer as a; "
             "print(a.__file__, a.__spec__.cached, a.value.__code__.co_filename, a.value())")
    out = subprocess.run([sys.executable, "-c", probe, str(folder)], capture_output=True,
                         text=True, check=True).stdout.split()
    answer = f"{folder}/pyspark/answer.py"
    assert out == [answer, f"{folder}/pyspark/__pycache__/answer.{tag}.pyc", answer, "42"]
    # py4j's zip, also on every worker's path, is a folder of its files and their bytecode too
    py4j = home / "python" / "lib" / "py4j-0.1.2-src.zip"
    assert py4j.is_dir() and not py4j.is_symlink()
    assert sorted(str(p.relative_to(py4j)) for p in py4j.rglob("*") if p.is_file()) == [
        "py4j/__init__.py", f"py4j/__pycache__/__init__.{tag}.pyc",
        f"py4j/__pycache__/java_gateway.{tag}.pyc", "py4j/java_gateway.py"]
    probe = ("import sys; sys.dont_write_bytecode = True; sys.path.insert(0, sys.argv[1]); "
             "import py4j.java_gateway as g; print(g.__spec__.cached, g.GATEWAY)")
    out = subprocess.run([sys.executable, "-c", probe, str(py4j)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [f"{py4j}/py4j/__pycache__/java_gateway.{tag}.pyc", "gw"]
    assert [p.name for p in home.parent.iterdir()] == [home.name]  # no staging folder left
    assert spark_home.compiled_spark_home() == home  # built once, then reused


def test_a_compiled_home_in_spark_home_builds_no_home_of_a_home(fake, monkeypatch):
    home = spark_home.compiled_spark_home()
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert spark_home.source_home() == fake
    assert spark_home.compiled_spark_home() == home
    spark_home.check_current()  # current: passes


def test_without_spark_home_the_installed_pyspark_is_the_source(monkeypatch):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    import pyspark

    assert spark_home.source_home() == spark_home.installed_home()
    assert spark_home.installed_home() / "__init__.py" == \
        spark_home.installed_home().joinpath(os.path.basename(pyspark.__file__))


def test_an_upgraded_pyspark_gets_a_new_home_and_the_old_one_is_refused(fake, monkeypatch):
    old = spark_home.compiled_spark_home()
    _write_zip(fake, b"def value():\n    return 43\n")  # what an upgrade of PySpark does
    os.utime(fake / "python" / "lib" / "pyspark.zip", ns=(1, 1))
    new = spark_home.compiled_spark_home()
    assert new != old and new.is_dir()
    spark_home.check_current(new)
    monkeypatch.setenv("SPARK_HOME", str(old))  # a path kept from before the upgrade
    with pytest.raises(SparkHomeError, match="whose PySpark has changed since") as raised:
        spark_home.check_current()
    assert str(old) in str(raised.value) and "compiled_spark_home()" in str(raised.value)
    with pytest.raises(SparkHomeError, match="changed since"):
        barrier_kafka.register(spark=None)  # refused before it touches the session
    monkeypatch.setenv("SPARK_HOME", str(fake))
    spark_home.check_current()  # a plain Spark home always passes


def test_a_folder_with_an_unreadable_source_file_is_not_taken_for_a_compiled_home(fake, tmp_path):
    other = tmp_path / "other-spark"
    other.mkdir()
    (other / "BARRIER_KAFKA_SOURCE.json").write_text('{"source": "/x"}')  # no zip stamp
    spark_home.check_current(other)  # passes: not one of ours
    assert spark_home.source_home() == fake


def test_a_home_without_pyspark_zip_is_refused_with_the_reason(fake):
    os.remove(fake / "python" / "lib" / "pyspark.zip")
    with pytest.raises(SparkHomeError, match="no python/lib/pyspark.zip in the Spark home"):
        spark_home.compiled_spark_home()


def test_a_failed_build_offers_no_home_and_leaves_nothing(fake, tmp_path):
    (fake / "python" / "lib" / "pyspark.zip").write_bytes(b"not a zip")
    with pytest.raises(SparkHomeError, match="could not build a compiled Spark home from"):
        spark_home.compiled_spark_home()
    assert os.listdir(tmp_path / "cache" / "spark-home") == []


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "barrier_kafka.spark_home", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_command_prints_the_home_or_only_why_not(fake):
    done = _cli()
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{spark_home.home_path()}\n"
    (fake / "python" / "lib" / "pyspark.zip").write_bytes(b"changed, not a zip")
    failed = _cli()
    assert (failed.returncode, failed.stdout) == (1, "")
    assert "could not build a compiled Spark home" in failed.stderr
    assert _cli("--force").returncode == 2


@pytest.mark.parametrize("compiled", [True, False])
def test_the_cluster_harness_uses_the_compiled_home_only_when_the_tests_chose_it(
        monkeypatch, compiled):
    from kafka_harness.spark_cluster import spark_home as cluster_home

    home = str(spark_home.home_path(spark_home.installed_home()))
    monkeypatch.setenv("SPARK_HOME", home if compiled else "/opt/some/other/spark")
    expected = home if compiled else str(spark_home.installed_home())
    assert cluster_home() == expected

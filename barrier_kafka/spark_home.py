"""A Spark home whose Python workers import PySpark as bytecode (driver machine, before the
SparkSession starts; ``python -m barrier_kafka.spark_home`` prints it).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip beside it first on every Python
worker's path, and those zips hold only ``.py`` files. Python cannot cache bytecode for a zip, so
every new Python worker process compiles the PySpark modules it imports, about half a second of
CPU each, and py4j's, about 50 ms more. A Python data source starts several such workers on the
driver at every query start (planning, the streaming source and the sink's commit runner), so a
barrier-kafka query started about 0.6-0.9 s later than with PySpark imported as bytecode on 2
cores (``benchmarks/bench_pipeline.py --spark-home``).

:func:`compiled_spark_home` builds, once per PySpark install and Python version, a folder that
links every entry of the Spark home except ``python/lib/pyspark.zip`` and py4j's zip. In the
place of each it puts a folder of that name holding the zip's files, extracted, with their
bytecode beside them in ``__pycache__``: Python imports from a folder on its path whatever the
folder is called, and caches bytecode there. Point ``SPARK_HOME`` at it before the session starts::

    os.environ["SPARK_HOME"] = str(barrier_kafka.compiled_spark_home())
    spark = SparkSession.builder.getOrCreate()

Guarantees:

- Workers run the very code of the Spark home it was built from: the folder holds the zip's
  files byte for byte, whatever Python the workers run (the bytecode is only a cache, checked
  against each file's time and size as for any installed package), and tracebacks name the same
  paths (``.../python/lib/pyspark.zip/pyspark/worker.py``).
- The home is built under a staging name and renamed into place complete; a half-built one is
  never returned, and concurrent builders share the first complete one.
- Its name is derived from the Spark home's path, its zip's size and time and Python's bytecode
  version, so upgrading PySpark makes :func:`compiled_spark_home` build a new one. A compiled home
  whose zip no longer matches its Spark home (a path kept from before an upgrade) is refused by
  :func:`check_current`, which :func:`barrier_kafka.register` calls: its workers would run the old
  PySpark's Python code against the new jars.

It speeds up workers started by the JVM on this machine: the driver's planning workers, and in
``local[*]`` mode the tasks too. Executors of a cluster use their workers' Spark home. YARN
uploads ``pyspark.zip`` from the submitting Spark home, which here is a folder: submit to YARN
from the installed home. Databricks manages its own Spark home; this does not apply there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional, Union

from barrier_core.exceptions import BarrierKafkaError

logger = logging.getLogger(__name__)

_ZIP = ("python", "lib", "pyspark.zip")
#: The other zips of ``python/lib`` Spark puts on a worker's path (py4j's, named by its version).
_PY4J_ZIPS = "py4j-*.zip"
#: File in a compiled home naming the Spark home it was built from and that home's zip.
_SOURCE_FILE = "BARRIER_KAFKA_SOURCE.json"

#: Part of every home's name: homes of an older layout (no source file) are never reused.
_LAYOUT = b"compiled-spark-home-5"

PathLike = Union[str, "os.PathLike[str]"]


class SparkHomeError(BarrierKafkaError):
    """No compiled Spark home can be built, or ``SPARK_HOME`` names a stale one."""


def default_cache_dir() -> Path:
    """``BARRIER_KAFKA_CACHE``, else ``~/.cache/barrier-kafka``."""
    default = Path.home() / ".cache" / "barrier-kafka"
    return Path(os.environ.get("BARRIER_KAFKA_CACHE", default))


def source_home() -> Path:
    """The Spark home a new session would start from: ``SPARK_HOME`` when set (for a compiled
    home, the one it was built from), else the folder of the PySpark this interpreter imports
    (pip installs the Spark home in the package)."""
    chosen = os.environ.get("SPARK_HOME")
    if chosen:
        built_from = _built_from(Path(chosen))
        return Path(built_from["source"]) if built_from else Path(chosen)
    return installed_home()


def installed_home() -> Path:
    """The Spark home inside the PySpark package this interpreter imports."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def home_path(source: Optional[PathLike] = None, cache_dir: Optional[PathLike] = None) -> Path:
    """Where the compiled home of ``source`` (default :func:`source_home`) lives; it may not
    exist yet."""
    source = Path(source) if source is not None else source_home()
    stamp = _zip_stamp(source)
    digest = hashlib.sha256(_LAYOUT)
    digest.update(str(source).encode())
    digest.update(importlib.util.MAGIC_NUMBER)
    if stamp is not None:
        digest.update(f"{stamp['zip_size']}:{stamp['zip_mtime_ns']}".encode())
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "spark-home" / f"{_version(source)}-{digest.hexdigest()[:16]}"


def compiled_spark_home(source: Optional[PathLike] = None,
                        cache_dir: Optional[PathLike] = None) -> Path:
    """The compiled home of ``source`` (default :func:`source_home`), built first if missing
    (about 4 s on 2 cores, under ``cache_dir``, default :func:`default_cache_dir`).

    Raises :class:`SparkHomeError` when ``source`` has no ``python/lib/pyspark.zip`` (its workers
    already import PySpark from files, nothing to gain) or the build fails; nothing half-built is
    left behind.
    """
    # Imported here: Python workers import this package (its data sources) but never build.
    import py_compile
    import shutil
    import tempfile
    import zipfile

    source = Path(source) if source is not None else source_home()
    home = home_path(source, cache_dir)
    if home.is_dir():
        return home
    stamp = _zip_stamp(source)
    if stamp is None:
        raise SparkHomeError(
            f"no {'/'.join(_ZIP)} in the Spark home {source}: its Python workers do not import "
            "PySpark from a zip, so there is nothing to compile; keep SPARK_HOME as it is")
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=home.name + "-", suffix=".staging", dir=home.parent))
    try:
        staging.chmod(0o755)
        _link_tree(source, staging)
        for zip_path in _zips(source):
            inner = zip_path.relative_to(source).parts
            _extract_compiled(zip_path, staging.joinpath(*inner), home.joinpath(*inner))
        staging.joinpath(_SOURCE_FILE).write_text(json.dumps({"source": str(source), **stamp}))
        try:
            os.replace(staging, home)
        except OSError:
            if not home.is_dir():  # else another builder finished first: use theirs
                raise
        logger.info("compiled Spark home written: %s", home)
        return home
    except (OSError, zipfile.BadZipFile, py_compile.PyCompileError) as exc:
        raise SparkHomeError(
            f"could not build a compiled Spark home from {source} under {home.parent}: {exc}; "
            "fix the cause or keep SPARK_HOME as it is (workers then compile PySpark at start)"
        ) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_current(spark_home: Optional[PathLike] = None) -> None:
    """Raise :class:`SparkHomeError` when ``spark_home`` (default ``SPARK_HOME``) is a compiled
    home whose Spark home's zip changed since it was built (PySpark upgraded or reinstalled).
    Any other Spark home passes."""
    chosen = spark_home if spark_home is not None else os.environ.get("SPARK_HOME")
    built_from = _built_from(Path(chosen)) if chosen else None
    if not built_from:
        return
    now = _zip_stamp(Path(built_from["source"]))
    if now is None or any(now[k] != built_from[k] for k in now):
        raise SparkHomeError(
            f"SPARK_HOME={chosen} is a compiled Spark home built from {built_from['source']}, "
            "whose PySpark has changed since: its Python workers would run the old PySpark. "
            "Set SPARK_HOME from barrier_kafka.compiled_spark_home() (or "
            "`python -m barrier_kafka.spark_home`) each time a driver starts instead of keeping "
            "the path")


def _built_from(home: Path) -> Optional[dict]:
    """What a compiled home records of its source, or None for any other folder (a home writes
    it before it is renamed into place, so a complete one always has it)."""
    try:
        recorded = json.loads(home.joinpath(_SOURCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    keys = ("source", "zip_size", "zip_mtime_ns")
    return recorded if isinstance(recorded, dict) and all(k in recorded for k in keys) else None


def _zip_stamp(source: Path) -> Optional[dict]:
    try:
        stat = source.joinpath(*_ZIP).stat()
    except OSError:
        return None
    return {"zip_size": stat.st_size, "zip_mtime_ns": stat.st_mtime_ns}


def _version(source: Path) -> str:
    """PySpark's version as its Spark home names it (``python/pyspark/version.py`` of a
    distribution, ``version.py`` of a pip install), else ``spark``."""
    for candidate in (source / "version.py", source / "python" / "pyspark" / "version.py"):
        try:
            text = candidate.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("\"'")
    return "spark"


def _zips(source: Path) -> list:
    """The zips of ``source`` a compiled home holds extracted: ``pyspark.zip`` and py4j's."""
    lib = source.joinpath(*_ZIP[:-1])
    return [lib / _ZIP[-1]] + sorted(p for p in lib.glob(_PY4J_ZIPS) if p.is_file())


def _link_tree(source: Path, target: Path) -> None:
    """Symlinks in ``target`` to every entry of ``source``, except the folders on the way to the
    zips, which are real folders holding links to their other entries (the zips themselves are
    left out)."""
    extracted = {p.name for p in _zips(source)}
    for entry in source.iterdir():
        if entry.name == _ZIP[0]:
            continue
        os.symlink(entry, target / entry.name)
    inner_source, inner_target = source, target
    for part in _ZIP[:-1]:
        inner_source, inner_target = inner_source / part, inner_target / part
        inner_target.mkdir()
        for entry in inner_source.iterdir():
            if entry.name not in _ZIP and entry.name not in extracted:
                os.symlink(entry, inner_target / entry.name)


def _extract_compiled(original: Path, target: Path, final: Path) -> None:
    """``target``: a folder holding every file of the zip ``original``, and the bytecode of each
    module in ``__pycache__``, compiled with the file names the modules have in ``final``."""
    import compileall
    import py_compile
    import warnings
    import zipfile

    with zipfile.ZipFile(original) as source:
        source.extractall(target)
    # A module that does not compile keeps only its source, as in the zip; PySpark's own tests
    # in the zip raise SyntaxWarnings that are not ours to print.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        compileall.compile_dir(target, ddir=str(final), quiet=2,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)


def main(argv: Optional[list] = None) -> int:
    """``python -m barrier_kafka.spark_home``: print the compiled home of :func:`source_home`
    (built first if missing); on failure print why to stderr, nothing to stdout, and exit 1, so
    ``home=$(python -m barrier_kafka.spark_home) && export SPARK_HOME=$home`` keeps the old
    one."""
    if argv:
        print("usage: python -m barrier_kafka.spark_home  (takes no arguments; SPARK_HOME and "
              "BARRIER_KAFKA_CACHE choose the source and the cache)", file=sys.stderr)
        return 2
    try:
        print(compiled_spark_home())
    except SparkHomeError as exc:
        print(f"barrier_kafka.spark_home: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

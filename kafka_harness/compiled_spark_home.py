"""A Spark home whose Python workers import PySpark as bytecode (test driver, test harness only).

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path, and the
zip holds only ``.py`` files: Python cannot cache bytecode for a zip, so every new worker process
(Spark starts one daemon per worker kind: data source lookup, planning, reading, writing, the
streaming source and sink runners, UDFs) compiles PySpark's modules again, about half a second of
CPU each. The exactly-once tests restart pipelines about a hundred times, so each restart paid
that many times over before its first batch.

:func:`ensure_home` builds, once per machine, a folder that links every entry of the installed
PySpark's Spark home except ``python/lib/pyspark.zip``, which it rewrites with a ``.pyc`` beside
each ``.py`` (checked-hash pycs: Python compares each one with its source's hash before using it,
so a pyc never stands in for different source). The pytest plugin points ``SPARK_HOME`` at it.

Guarantees: the folder is built under a staging name and renamed into place complete (a half-built
one is never used); it holds the very files of the installed PySpark, so workers run the same code
(tracebacks name the same zip paths); on any failure tests use the installed Spark home, only
slower. Benchmarks and the demo never use it.
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.util
import logging
import os
import py_compile
import shutil
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Optional

from kafka_harness.jars import cache_root

logger = logging.getLogger(__name__)

_ZIP = ("python", "lib", "pyspark.zip")


def installed_home() -> Path:
    """The Spark home of the PySpark this interpreter imports (pip installs it in the package)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def home_path() -> Path:
    """Where the compiled home for this PySpark and this Python lives (it may not exist yet)."""
    import pyspark

    source = installed_home()
    zipped = source.joinpath(*_ZIP)
    digest = hashlib.sha256()
    digest.update(str(source).encode())
    digest.update(importlib.util.MAGIC_NUMBER)
    if zipped.is_file():
        stat = zipped.stat()
        digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache_root() / "spark-home" / f"{pyspark.__version__}-{digest.hexdigest()[:16]}"


def ensure_home() -> Optional[Path]:
    """The compiled Spark home, built first if it is missing. Returns None (and logs why) when
    the installed PySpark has no ``pyspark.zip`` or the build fails."""
    home = home_path()
    if home.is_dir():
        return home
    source = installed_home()
    if not source.joinpath(*_ZIP).is_file():
        logger.info("no %s in %s: workers use the installed Spark home", "/".join(_ZIP), source)
        return None
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=home.name + "-", suffix=".staging", dir=home.parent))
    try:
        staging.chmod(0o755)
        _link_tree(source, staging)
        _write_compiled_zip(source.joinpath(*_ZIP), staging.joinpath(*_ZIP), home.joinpath(*_ZIP))
        try:
            os.replace(staging, home)
        except OSError:
            if not home.is_dir():  # else another session built it meanwhile: use theirs
                raise
        logger.info("compiled Spark home written: %s", home)
        return home
    except (OSError, zipfile.BadZipFile, py_compile.PyCompileError) as exc:
        logger.warning("no compiled Spark home (workers compile PySpark): %s", exc)
        return None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _link_tree(source: Path, target: Path) -> None:
    """Symlinks in ``target`` to every entry of ``source``, except the folders on the way to the
    zip, which are real folders holding links to their other entries (the zip itself is left
    out)."""
    for entry in source.iterdir():
        if entry.name == _ZIP[0]:
            continue
        os.symlink(entry, target / entry.name)
    inner_source, inner_target = source, target
    for part in _ZIP[:-1]:
        inner_source, inner_target = inner_source / part, inner_target / part
        inner_target.mkdir()
        for entry in inner_source.iterdir():
            if entry.name not in _ZIP:
                os.symlink(entry, inner_target / entry.name)


def _write_compiled_zip(original: Path, target: Path, final: Path) -> None:
    """``target``: every entry of ``original`` as it is, plus a checked-hash ``.pyc`` beside each
    ``.py``, compiled with the file names the modules have when imported from ``final``."""
    with tempfile.TemporaryDirectory(prefix="pyspark-zip-") as folder:
        with zipfile.ZipFile(original) as source:
            source.extractall(folder)
            entries = source.infolist()
        # A module that does not compile keeps only its source, as before; PySpark's own tests
        # in the zip raise SyntaxWarnings that are not ours to print.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            compileall.compile_dir(folder, ddir=str(final), quiet=2, legacy=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for info in entries:
                path = Path(folder, info.filename)
                out.writestr(info, b"" if info.is_dir() else path.read_bytes())
                compiled = path.with_name(path.name + "c")
                if info.filename.endswith(".py") and compiled.is_file():
                    out.writestr(info.filename + "c", compiled.read_bytes())

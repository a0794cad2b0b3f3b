"""Quicker starts of the Spark driver JVMs that tests and the demo launch (test / demo driver).

The exactly-once tests kill and restart pipelines about a hundred times per run, and each restart
starts a new Spark driver JVM; most of its start is loading and verifying Spark's classes. With
class data sharing (a JDK 13+ dynamic archive) one warm-up run stores the classes Spark loaded in
an archive in the cache folder, keyed by the JDK, Spark's jars and ``SPARK_HOME``, and every later
driver maps it instead. The pytest plugin also asks for the JIT's first tier only
(``-XX:TieredStopAtLevel=1``): test pipelines are short, so compiling less pays; benchmarks
never get it.

Guarantees: an archive is written to a staging name and renamed into place only after the JVM
that wrote it exited cleanly and a fresh JVM has mapped it (a half-written or unusable archive is
never offered); a missing or stale archive only costs speed (the JVM falls back to loading
classes, ``-Xshare:auto``). Nothing here changes what Spark computes.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from kafka_harness.jars import cache_root

logger = logging.getLogger(__name__)

#: Set (to 1) by the pytest plugin: drivers started by tests compile with the JIT's first tier.
QUICK_JIT_ENV = "BARRIER_KAFKA_TEST_QUICK_JIT"

#: How long the warm-up run that writes the archive may take (seconds).
WARM_UP_TIMEOUT_S = 300

# JVM unified logging of class data sharing off: a stale archive or a class it cannot hold
# ("Skipping ...: Signed JAR") is expected and would only clutter the pipeline logs.
CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_file(kind: str, java: str, jars: Path, *keys: str) -> Path:
    """Where the class archive of ``kind`` for this JDK, these ``keys`` and the jars in the
    folder ``jars`` lives in the cache folder (it may not exist yet)."""
    digest = hashlib.sha256()
    digest.update(os.path.realpath(java).encode())
    for key in keys:
        digest.update(key.encode())
    for name in sorted(os.listdir(jars)) if jars.is_dir() else ():
        digest.update(name.encode())
    return cache_root() / "jvm" / f"{kind}-{digest.hexdigest()[:16]}.jsa"


def staging_path(archive: Path) -> str:
    """A free name beside ``archive`` for a JVM to write it to as it exits
    (``-XX:ArchiveClassesAtExit``), renamed into place once it is known good: a half-written
    archive is never offered, and two processes writing one never meet."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=archive.stem + "-", suffix=".staging",
                                   dir=str(archive.parent))
    os.close(fd)
    os.unlink(staging)  # the JVM creates it at exit
    return staging


def archive_path() -> Optional[Path]:
    """Where the archive for this JDK and this PySpark's jars lives (it may not exist yet);
    None without a ``java`` on PATH."""
    java = shutil.which("java")
    if java is None:
        return None
    import pyspark

    # The archive records the class path, which starts at SPARK_HOME (the tests' compiled home
    # links the same jars under another path): a driver maps only an archive of its own home.
    return archive_file("spark-driver", java, Path(pyspark.__file__).parent / "jars",
                        pyspark.__version__, os.environ.get("SPARK_HOME", ""))


def driver_java_options(existing: str = "") -> str:
    """``spark.driver.extraJavaOptions`` for a driver started here: ``existing`` plus the class
    archive if there is one, plus the first-tier JIT if the tests asked for it."""
    options = [existing] if existing else []
    archive = archive_path()
    if archive is not None and archive.is_file():
        options.append(f"-XX:SharedArchiveFile={archive} {CDS_QUIET}")
    if os.environ.get(QUICK_JIT_ENV) == "1":
        options.append("-XX:TieredStopAtLevel=1")
    return " ".join(options)


def ensure_archive() -> Optional[Path]:
    """The archive, written by a warm-up run first if it is missing. Returns None (and logs
    why) when it cannot be written: tests then run without it, only slower."""
    archive = archive_path()
    if archive is None or archive.is_file():
        return archive
    staging = staging_path(archive)
    try:
        _run_warm_up(f"-XX:ArchiveClassesAtExit={staging} {CDS_QUIET}")
        if not os.path.isfile(staging):
            raise RuntimeError("the warm-up JVM exited without writing the archive")
        _run_warm_up(f"-XX:SharedArchiveFile={staging} -Xshare:on {CDS_QUIET}", check_only=True)
        os.replace(staging, archive)
        logger.info("Spark driver class archive written: %s", archive)
        return archive
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        logger.warning("no Spark driver class archive (drivers start without it): %s", exc)
        return None
    finally:
        if os.path.exists(staging):
            os.unlink(staging)


def _run_warm_up(java_options: str, check_only: bool = False) -> None:
    """A child Python starting a local Spark driver with ``java_options`` and running the kinds
    of jobs the tests run (Arrow, grouped pandas, a streaming query with pandas state)."""
    env = dict(os.environ)
    env.pop(QUICK_JIT_ENV, None)
    cmd = [sys.executable, "-m", "kafka_harness.jvm_startup", java_options]
    if check_only:
        cmd.append("--check")
    # The driver JVM inherits the child's stdout: reading the pipe to its end waits for the JVM
    # to exit too, after it wrote the archive (it outlives the Python child by a few seconds).
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=WARM_UP_TIMEOUT_S)
    if done.returncode != 0:
        tail = done.stdout.decode(errors="replace")[-2000:]
        raise RuntimeError(f"warm-up run exited {done.returncode}: {tail}")


def _warm_up(java_options: str, check_only: bool) -> None:
    """Runs in the warm-up child: one session, a few representative jobs, then exit (the JVM
    writes the archive as it exits)."""
    import pandas as pd
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    # Not build_spark: it adds the cached archive, which the JVM that writes one must not map.
    spark = (SparkSession.builder.master("local[2]").appName("barrier-kafka-jvm-warm-up")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.driver.extraJavaOptions", java_options)
             .getOrCreate())
    try:
        if check_only:
            spark.range(10).count()
            return
        frame = spark.range(2000).selectExpr("id % 7 AS key", "CAST(id AS STRING) AS value")
        frame.groupBy("key").applyInPandas(
            lambda pdf: pdf.head(1), "key long, value string").collect()
        frame.toPandas()

        def count(key, frames, state):
            total = sum(len(f) for f in frames) + (state.get[0] if state.exists else 0)
            state.update((total,))
            yield pd.DataFrame({"key": [key[0]], "n": [total]})

        with tempfile.TemporaryDirectory() as folder:
            source = os.path.join(folder, "in")
            os.mkdir(source)
            pd.DataFrame({"key": [i % 7 for i in range(500)], "value": range(500)}).to_json(
                os.path.join(source, "part.json"), orient="records", lines=True)
            stream = (spark.readStream.schema("key long, value long").json(source)
                      .groupBy("key")
                      .applyInPandasWithState(count, "key long, n long", "n long", "update",
                                              GroupStateTimeout.NoTimeout))
            query = (stream.writeStream.format("noop").outputMode("update")
                     .option("checkpointLocation", os.path.join(folder, "checkpoint"))
                     .trigger(availableNow=True).start())
            query.awaitTermination(WARM_UP_TIMEOUT_S)
            query.stop()
    finally:
        spark.stop()


if __name__ == "__main__":
    _warm_up(sys.argv[1], check_only="--check" in sys.argv[2:])

"""Fetch Apache Kafka's broker jars from Maven Central, once, into a cache folder.

Runs in the test / demo driver process. Guarantees: the cache folder is either complete (it
contains a ``.complete`` marker written last) or ignored and rebuilt; a failed download never
leaves a half-filled cache that a later run would trust. One process at a time downloads a
version (a lock file beside its folder): the parallel test workers start their brokers at once
on a fresh machine, and a second download would replace the folder under the first broker.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from barrier_kafka.spark_home import default_cache_dir

logger = logging.getLogger(__name__)

KAFKA_VERSION = os.environ.get("BARRIER_KAFKA_VERSION", "4.1.1")
# The log4j version kafka-server 4.1.1 depends on; the slf4j binding must match it.
LOG4J_VERSION = os.environ.get("BARRIER_KAFKA_LOG4J_VERSION", "2.24.3")
MAVEN_TIMEOUT_S = 900

_POM = Path(__file__).with_name("pom.xml")
#: Written last into a version's folder: the folder is complete.
_COMPLETE = ".complete"


class JarFetchError(RuntimeError):
    """The broker jars could not be downloaded (no JDK/Maven, or Maven failed)."""


def cache_root() -> Path:
    """Folder that holds downloaded jars; ``BARRIER_KAFKA_CACHE`` overrides the default (the
    library's cache, :func:`barrier_kafka.spark_home.default_cache_dir`)."""
    return default_cache_dir()


def require_java() -> str:
    """Return the path of ``java`` or raise a clear error naming the fix."""
    java = shutil.which("java")
    if java is None and os.environ.get("JAVA_HOME"):
        candidate = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
        java = str(candidate) if candidate.exists() else None
    if java is None:
        raise JarFetchError(
            "No Java runtime found: the Kafka broker and Spark need a JDK 17+. "
            "Install one (e.g. `apt-get install openjdk-17-jdk-headless`) or set JAVA_HOME."
        )
    return java


def fetch_broker_jars(version: str = KAFKA_VERSION) -> Path:
    """Return a folder holding the broker's runtime classpath, downloading it if needed.

    Parameters
    ----------
    version : str
        Apache Kafka version (``org.apache.kafka:kafka_2.13:<version>``).

    Returns
    -------
    Path
        Folder of jars, usable as ``-cp '<folder>/*'``.

    Raises
    ------
    JarFetchError
        If Maven is missing, fails or times out. The message carries Maven's last lines.
    """
    libs = cache_root() / f"kafka-{version}" / "libs"
    marker = libs / _COMPLETE
    if marker.exists():
        return libs
    require_java()
    with _download_lock(version):
        if not marker.exists():  # else another process downloaded it while this one waited
            _download(version, libs)
    return libs


@contextlib.contextmanager
def _download_lock(version: str):
    """Hold the version's download lock (an exclusive ``flock`` on ``kafka-<version>.lock`` in
    the cache; released when the holder exits, however it exits)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"kafka-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _download(version: str, libs: Path) -> None:
    """Maven's copy of the version's runtime classpath, moved into ``libs`` whole, then its
    completeness marker (the caller holds the version's download lock)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarFetchError(
            "Maven (`mvn`) not found: it downloads the Kafka broker jars from Maven Central. "
            "Install it (e.g. `apt-get install maven`) or set BARRIER_KAFKA_CACHE to a folder "
            "that already holds kafka-<version>/libs."
        )
    staging = Path(tempfile.mkdtemp(prefix="kafka-jars-", dir=str(cache_root().parent)
                                    if cache_root().parent.exists() else None))
    work = Path(tempfile.mkdtemp(prefix="kafka-pom-"))
    shutil.copy(_POM, work / "pom.xml")
    cmd = [
        mvn, "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-Dkafka.version={version}", f"-Dlog4j.version={LOG4J_VERSION}",
        f"-DoutputDirectory={staging}",
    ]
    logger.info("Downloading Kafka %s broker jars from Maven Central into %s", version, libs)
    try:
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                              timeout=MAVEN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise JarFetchError(
            f"Maven did not finish downloading Kafka {version} jars within {MAVEN_TIMEOUT_S}s; "
            "check that Maven Central is reachable."
        ) from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if proc.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        shutil.rmtree(staging, ignore_errors=True)
        raise JarFetchError(
            f"Maven failed (exit {proc.returncode}) to download org.apache.kafka:kafka_2.13:"
            f"{version} from Maven Central. Check network access and the version.\n{tail}"
        )
    libs.parent.mkdir(parents=True, exist_ok=True)
    if libs.exists():
        shutil.rmtree(libs)
    shutil.move(str(staging), str(libs))
    (libs / _COMPLETE).write_text(version)
